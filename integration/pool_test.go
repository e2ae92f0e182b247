package integration_test

import (
	"encoding/json"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// poolCaddyfile is a gate on a bundled facilitator with a signer pool of two keys read
// from files, and the facilitator API (docs/facilitator.md#signer-pool).
const poolCaddyfile = `{
` + globalOptions + `	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_RPC_URL}
				asset {$X402_TOKEN}
				asset_name USDC
				asset_version 2
			}
			signer_key {file.{$KEY1}} {file.{$KEY2}}
			min_gas_balance 1000000000000000
			balance_check_interval 1s
			journal sqlite {$X402_JOURNAL}
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	handle_path /facilitator/* {
		x402_facilitator {
			api_key {env.FACILITATOR_API_KEY}
		}
	}
	handle {
		x402 /paid/* {
			price 0.01 USDC
			pay_to {$PAY_TO}
			network base-sepolia
		}
		reverse_proxy {$UPSTREAM}
	}
}
`

// TestSignerPoolInCaddy: a Caddy whose bundled facilitator has two signer keys settles
// paid requests of the real @x402/fetch client on both keys, lists both in /supported,
// and keeps the keys out of its logs; a key short of gas shows in
// caddy_x402_relayer_insufficient_funds.
func TestSignerPoolInCaddy(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	k1, k2 := testenv.NewAccount(t), testenv.NewAccount(t)
	for _, k := range []testenv.Account{k1, k2} {
		chain.SetBalance(t, k.Address, big.NewInt(1e18))
	}
	g := &fcGate{chain: chain, tok: tok, up: startUpstream(t), payTo: testenv.NewAccount(t).Address}
	port := testenv.FreePort(t)
	g.api = "http://127.0.0.1:" + strconv.Itoa(port)
	env := []string{
		"X402_RPC_URL=" + chain.RPCURL,
		"X402_TOKEN=" + tok.Address.Hex(),
		"KEY1=" + writeKeyFile(t, k1),
		"KEY2=" + writeKeyFile(t, k2),
		"X402_JOURNAL=" + t.TempDir() + "/journal.db",
		"PAY_TO=" + g.payTo.Hex(),
		"UPSTREAM=" + g.up.srv.URL,
		"API_PORT=" + strconv.Itoa(port),
		"FACILITATOR_API_KEY=pool-test-api-key",
	}
	g.caddy = testenv.StartCaddy(t, poolCaddyfile, testenv.CaddyOptions{Env: env, WaitPorts: []int{port}})

	r := mustDo(t, http.MethodGet, g.api+"/facilitator/supported", map[string]string{"x-facilitator-key": "pool-test-api-key"})
	var sup struct {
		Signers map[string][]string `json:"signers"`
	}
	if err := json.Unmarshal(r.Body, &sup); err != nil || r.Status != http.StatusOK {
		t.Fatalf("/supported: %d %s (%v)", r.Status, r.Body, err)
	}
	if s := sup.Signers["eip155:*"]; len(s) != 2 || s[0] != k1.Address.Hex() || s[1] != k2.Address.Hex() {
		t.Fatalf("/supported signers %v, want both keys, the first first", s)
	}

	for i := range 4 {
		payer := newPayer(t, tok)
		out := payWith(t, payV2Script, payer, g.api+"/paid/"+strconv.Itoa(i), "X402_TOKEN="+tok.Address.Hex())
		if out.Status != http.StatusOK || out.PaymentResponseHeader == nil {
			t.Fatalf("@x402/fetch: status %d %s", out.Status, out.Body)
		}
		checkOnChain(t, chain, tok, decodeSettleResponse(t, *out.PaymentResponseHeader).Transaction, payer.Address, g.payTo)
	}
	for _, k := range []testenv.Account{k1, k2} {
		if n := nonceOf(t, chain, k); n == 0 {
			t.Errorf("signer %s sent nothing of 4 settlements", k.Address.Hex())
		}
	}

	chain.SetBalance(t, k2.Address, big.NewInt(1e14))
	for deadline := time.Now().Add(time.Minute); !strings.Contains(g.caddy.Metrics(t), "caddy_x402_relayer_insufficient_funds 1"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("caddy_x402_relayer_insufficient_funds did not count the key short of gas")
		}
	}
	logs := g.caddy.Logs()
	if !strings.Contains(logs, "relayer_insufficient_funds") {
		t.Error("no relayer_insufficient_funds in the log")
	}
	for _, k := range []testenv.Account{k1, k2} {
		if key := hexutil.Encode(crypto.FromECDSA(k.Key))[2:]; strings.Contains(logs, key) {
			t.Fatal("a signer key in Caddy's log")
		}
	}
}

// nonceOf is how many transactions k has had mined.
func nonceOf(t *testing.T, chain *testenv.Chain, k testenv.Account) uint64 {
	t.Helper()
	n, err := chain.Client.NonceAt(t.Context(), k.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
