package integration_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// ledgerCaddyfile gates the flaky upstream (its first answer per path is 503) on two
// routes: one where a payment id is optional and one where it is required.
const ledgerCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.RPC_A}
				asset {$TOKEN_A}
				asset_name USDC
				asset_version 2
			}
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}
		}
	}
}

http://:{$PORT} {
	bind 127.0.0.1
	handle /api/flaky/optional/* {
		x402 {
			pay_to {$X402_PAY_TO}
			network base-sepolia
			price 0.01 USDC
			payment_id optional
		}
		reverse_proxy {$UPSTREAM}
	}
	handle /api/flaky/required/* {
		x402 {
			pay_to {$X402_PAY_TO}
			network base-sepolia
			price 0.01 USDC
			payment_id required
		}
		reverse_proxy {$UPSTREAM}
	}
}
`

// withPaymentID is header, a v2 payment, with its payment-identifier id replaced: the id
// is not signed, so the same signed authorization travels under any id.
func withPaymentID(t *testing.T, header, id string) string {
	t.Helper()
	p := decodePaymentJSON(t, header)
	ext, _ := p["extensions"].(map[string]any)
	pid, _ := ext["payment-identifier"].(map[string]any)
	info, _ := pid["info"].(map[string]any)
	if info == nil {
		t.Fatalf("the client's payment carries no payment-identifier: %v", p["extensions"])
	}
	info["id"] = id
	return p.encode(t)
}

// TestCaddyLedgerIDsAndTokenOneAnswer is point 1 of "Why" in issue 20 through the built
// binary, with the real @x402/fetch and @x402/extensions client: after a paid request
// whose upstream failed (503 with a retry token), the same signed authorization under id
// X, under id Y with the retry token, and under X with the token, in sequence and at
// once, on an optional and on a required payment_id route, gets one good answer, and the
// upstream answers well once, for one transfer each.
func TestCaddyLedgerIDsAndTokenOneAnswer(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	up := startUpstream(t)
	testenv.StartCaddy(t, ledgerCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"RPC_A=" + chain.RPCURL, "TOKEN_A=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PORT=" + strconv.Itoa(port), "UPSTREAM=" + up.srv.URL,
		},
		WaitPorts: []int{port},
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	token := "X402_TOKEN=" + tok.Address.Hex()
	payer := chain.Accounts[1]
	bal := balances(t, tok, payer.Address, payTo)
	payments := 0
	for _, route := range []string{"optional", "required"} {
		for _, order := range []string{"in-sequence", "at-once"} {
			path := "/api/flaky/" + route + "/" + order
			url := base + path
			x := signOnly(t, payV2Script, payer, url, token, "X402_PAYMENT_ID=pay_ledger_"+route+"_"+order+"_X")
			y := withPaymentID(t, x, "pay_ledger_"+route+"_"+order+"_Y")
			first := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": x})
			retry := first.Header.Get("X-PAYMENT-RETRY")
			if first.Status != http.StatusServiceUnavailable || retry == "" {
				t.Fatalf("%s: first: %d %s, want the upstream's 503 with a retry token", path, first.Status, first.Body)
			}
			payments++
			tries := []map[string]string{
				{"PAYMENT-SIGNATURE": y, "X-PAYMENT-RETRY": retry},
				{"PAYMENT-SIGNATURE": x},
				{"PAYMENT-SIGNATURE": x, "X-PAYMENT-RETRY": retry},
				{"PAYMENT-SIGNATURE": y},
			}
			statuses := make([]int, len(tries))
			if order == "in-sequence" {
				for i, h := range tries {
					statuses[i] = mustDo(t, http.MethodGet, url, h).Status
				}
			} else {
				var wg sync.WaitGroup
				for i, h := range tries {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if r, err := do(t, http.MethodGet, url, "", h); err == nil {
							statuses[i] = r.Status
						}
					}()
				}
				wg.Wait()
			}
			good := 0
			for _, s := range statuses {
				if s == http.StatusOK {
					good++
				}
			}
			if good != 1 {
				t.Errorf("%s: answers %v to id Y with the token, id X, id X with the token and id Y: %d good, want 1", path, statuses, good)
			}
			if n := up.count(path); n != 2 {
				t.Errorf("%s: the upstream ran %d times (its first answer failed), want 2", path, n)
			}
		}
	}
	wantDelta(t, tok, payer.Address, bal[0], -price*int64(payments))
	wantDelta(t, tok, payTo, bal[1], price*int64(payments))
}
