package verdictserver

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

var (
	uuidV4  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	hash256 = regexp.MustCompile(`^0x[0-9a-f]{64}$`)
)

// TestAPIFlow runs the whole agent path against SQLite and a real PostgreSQL: an agent
// with a key, a wallet and a policy submits a payment to an allowed payee and one to a
// stranger, polls, and reads an approved and a rejected verdict that pass the client's
// rules and record the policy version.
func TestAPIFlow(t *testing.T) {
	for name, open := range map[string]storeOpener{"sqlite": sqliteStore, "postgres": postgresStore} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, open(t), nil)
			a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)

			ok := e.submit(a.Key, submitBody(a.Wallet, allowedPay, "trace-flow-approved"))
			if ok.status != http.StatusCreated {
				t.Fatalf("submit = %d %s", ok.status, ok.raw)
			}
			rec := ok.body
			hash, _ := rec["requestHash"].(string)
			if !hash256.MatchString(hash) || !uuidV4.MatchString(rec["id"].(string)) {
				t.Errorf("record id %v / requestHash %v: want a UUID v4 and 0x + 64 hex", rec["id"], rec["requestHash"])
			}
			if rec["status"] != "PENDING" || rec["description"] != "pay for the weather report" || rec["traceId"] != "trace-flow-approved" {
				t.Errorf("record = %s", ok.raw)
			}
			if _, err := verdict.ParseTransaction(ok.raw, "trace-flow-approved"); err != nil {
				t.Errorf("the client refuses the record: %v", err)
			}
			v := e.await(a.Key, hash)
			if v.Outcome != verdict.OutcomeApproved || v.ReasonCode != verdict.ReasonAllowed {
				t.Errorf("verdict = %s %s (%s), want approved", v.Outcome, v.ReasonCode, v.HumanReason)
			}
			if v.PolicyVersion == nil || *v.PolicyVersion != 1 {
				t.Errorf("policyVersion = %v, want 1", v.PolicyVersion)
			}

			bad := e.submit(a.Key, submitBody(a.Wallet, strangerPay, ""))
			if bad.status != http.StatusCreated {
				t.Fatalf("submit = %d %s", bad.status, bad.raw)
			}
			v = e.await(a.Key, bad.body["requestHash"].(string))
			if v.Outcome != verdict.OutcomeRejected || v.ReasonCode != "recipient_not_allowed" {
				t.Errorf("verdict = %s %s, want rejected recipient_not_allowed", v.Outcome, v.ReasonCode)
			}
			if err := v.Consistent(); err != nil {
				t.Error(err)
			}
			tx, err := e.st.TransactionByHash(t.Context(), hash)
			if err != nil || tx.Status != "APPROVED" || tx.PolicyVersion == nil || *tx.PolicyVersion != 1 {
				t.Errorf("stored record: %+v %v, want APPROVED at policy version 1", tx, err)
			}
		})
	}
}

// TestSpecStatusRows covers each row of the status table (docs/verdict-api.md#errors):
// every status the verdict API answers, with the one error body for the failures.
func TestSpecStatusRows(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	b := e.agent("bob", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), allowPolicy)
	created := e.submit(a.Key, submitBody(a.Wallet, allowedPay, "trace-rows-0001"))
	if created.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", created.status, created.raw)
	}
	hash := created.body["requestHash"].(string)
	readOnly := e.agent("reader", common.HexToAddress("0xC0C0000000000000000000000000000000000003"), "", ScopeReadOwn)
	revoked := e.agent("gone", common.HexToAddress("0xD0D0000000000000000000000000000000000004"), "")
	keys, _ := e.srv.Operator().Keys(t.Context(), revoked.ID)
	if err := e.srv.Operator().RevokeKey(t.Context(), keys[0].ID); err != nil {
		t.Fatal(err)
	}
	statusURL := e.api.URL + "/transactions/" + hash + "/approval-status"

	rows := []struct {
		name   string
		do     func() answer
		status int
		code   string // "" for a success
	}{
		{"200 status: the owner reads its verdict envelope", func() answer { return e.status(a.Key, hash) }, 200, ""},
		{"201 submit: a valid request is recorded", func() answer { return e.submit(a.Key, submitBody(a.Wallet, allowedPay, "")) }, 201, ""},
		{"400 submit: an invalid chainId names the field", func() answer {
			body := submitBody(a.Wallet, allowedPay, "")
			body["proposedTx"].(map[string]any)["chainId"] = "84532"
			return e.submit(a.Key, body)
		}, 400, codeInvalidBody},
		{"400 submit: malformed json", func() answer { return e.submit(a.Key, `{"prompt":`) }, 400, codeMalformedJSON},
		{"400 submit: a duplicate key", func() answer {
			return e.submit(a.Key, `{"escrowAddress":"`+a.Wallet.Hex()+`","escrowAddress":"`+b.Wallet.Hex()+`"}`)
		}, 400, codeMalformedJSON},
		{"400 submit: the pre-encrypted shape", func() answer {
			body := submitBody(a.Wallet, allowedPay, "")
			body["proposedTx"] = "-----BEGIN PGP MESSAGE-----"
			return e.submit(a.Key, body)
		}, 400, codePreEncrypted},
		{"400 submit: an unknown field", func() answer {
			body := submitBody(a.Wallet, allowedPay, "")
			body["idempotencyKey"] = "x"
			return e.submit(a.Key, body)
		}, 400, codeUnknownField},
		{"400 both: a bearer token beside the key", func() answer {
			return call(t, "GET", statusURL, nil, "x-api-key", a.Key, "Authorization", "Bearer abc.def.ghi")
		}, 400, codeConflictingAuth},
		{"401 submit: no key", func() answer { return call(t, "POST", e.api.URL+"/transactions", submitBody(a.Wallet, allowedPay, "")) }, 401, codeMissingKey},
		{"401 status: an unknown key", func() answer { k, _, _ := newAPIKeyForTest(); return e.status(k, hash) }, 401, codeInvalidKey},
		{"401 status: a revoked key", func() answer { return e.status(revoked.Key, hash) }, 401, codeInvalidKey},
		{"401 status: a key of the wrong shape", func() answer { return e.status("not-a-key-at-all-really", hash) }, 401, codeInvalidKey},
		{"403 submit: the key lacks verdicts:create:own", func() answer {
			return e.submit(readOnly.Key, submitBody(readOnly.Wallet, allowedPay, ""))
		}, 403, codeInsufficientScope},
		{"403 status: another agent's transaction", func() answer { return e.status(b.Key, hash) }, 403, codeNotOwner},
		{"403 submit: another agent's wallet", func() answer { return e.submit(a.Key, submitBody(b.Wallet, allowedPay, "")) }, 403, codeWalletNotRegistered},
		{"403 submit: a wallet registered on another chain only", func() answer {
			body := submitBody(a.Wallet, allowedPay, "")
			body["proposedTx"].(map[string]any)["chainId"] = 8453
			return e.submit(a.Key, body)
		}, 403, codeWalletNotRegistered},
		{"404 status: an unknown requestHash", func() answer { return e.status(a.Key, "0x"+strings.Repeat("ab", 32)) }, 404, codeNotFound},
		{"404: an unknown route", func() answer { return call(t, "GET", e.api.URL+"/nope", nil) }, 404, codeNotFound},
		{"405: a known route with another method", func() answer { return call(t, "DELETE", e.api.URL+"/transactions", nil) }, 405, codeMethodNotAllowed},
		{"409 submit: the agent reused a traceId", func() answer { return e.submit(a.Key, submitBody(a.Wallet, allowedPay, "trace-rows-0001")) }, 409, codeDuplicateTrace},
		{"413 submit: a body over the cap", func() answer {
			body := submitBody(a.Wallet, allowedPay, "")
			body["contextLogs"] = map[string]any{"blob": strings.Repeat("x", DefaultMaxBodyBytes)}
			return e.submit(a.Key, body)
		}, 413, codeBodyTooLarge},
		{"415 submit: not json", func() answer {
			return call(t, "POST", e.api.URL+"/transactions", nil, "x-api-key", a.Key, "Content-Type", "text/plain")
		}, 415, codeUnsupportedMediaType},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := r.do()
			if r.code == "" {
				if got.status != r.status {
					t.Fatalf("status = %d, want %d; body %s", got.status, r.status, got.raw)
				}
				return
			}
			wantError(t, got, r.status, r.code)
		})
	}
	if f := e.submit(a.Key, map[string]any{"escrowAddress": a.Wallet.Hex(), "prompt": "x", "proposedTx": map[string]any{"protocol": "payment", "chainId": 0}}); f.body["field"] != "proposedTx.chainId" {
		t.Errorf("a zero chainId: field = %v, want proposedTx.chainId", f.body["field"])
	}

	// 429 and 5xx have tests of their own: TestBurstIsRateLimited and
	// TestStoreDownIs5xx.
}

func newAPIKeyForTest() (string, string, [32]byte) {
	id, key, h := newAPIKey()
	return key, id, h
}

// TestStoreDownIs5xx: with the store closed, every route that needs it answers 503 with
// the error body, and /health says so; nothing is reported as a success.
func TestStoreDownIs5xx(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	if h := call(t, "GET", e.api.URL+"/health", nil); h.status != 200 || h.body["status"] != "ok" {
		t.Fatalf("health = %d %s", h.status, h.raw)
	}
	_ = e.srv.Close()
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, "GET", e.api.URL+"/health", nil), 503, codeUnavailable)
	wantError(t, e.submit(a.Key, submitBody(a.Wallet, allowedPay, "")), 503, codeUnavailable)
	wantError(t, e.status(a.Key, "0x"+strings.Repeat("ab", 32)), 503, codeUnavailable)
}

// TestDescription: the record's description is the prompt trimmed, its white space
// collapsed, cut to 200 characters with an ellipsis.
func TestDescription(t *testing.T) {
	long := strings.Repeat("é", 250)
	for _, c := range []struct{ in, want string }{
		{"  pay\tthe\n\nweather   report ", "pay the weather report"},
		{long, strings.Repeat("é", 199) + "…"},
		{strings.Repeat("a", 200), strings.Repeat("a", 200)},
	} {
		if got := describe(c.in); got != c.want {
			t.Errorf("describe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRequestHashBindsAgentAndNonce: the same request hashes differently for another
// agent and with another nonce, and the same with both equal (docs/verdict-api.md#requesthash).
func TestRequestHashBindsAgentAndNonce(t *testing.T) {
	req, err := decodeSubmit([]byte(`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","prompt":"p","proposedTx":{"protocol":"payment","chainId":84532,"b":1,"a":[1.50,"x"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var n1, n2 [32]byte
	n2[0] = 1
	h := func(agent string, n [32]byte) string {
		s, err := hashWithNonce(agent, req, n)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if h("a", n1) != h("a", n1) || h("a", n1) == h("b", n1) || h("a", n1) == h("a", n2) {
		t.Error("requestHash must be a function of the agent, the request and the nonce")
	}
	c, _ := canonicalJSON(map[string]any{"z": 1, "a": req.ProposedTx})
	if string(c) != `{"a":{"a":[1.50,"x"],"b":1,"chainId":84532,"protocol":"payment"},"z":1}` {
		t.Errorf("canonical json = %s", c)
	}
}
