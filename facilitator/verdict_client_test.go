package facilitator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// vcTestKey is the verdict service key of these tests; no output may contain it.
const vcTestKey = "vk_facilitator_test_0123456789"

// verdictService is an httptest verdict service: POST /transactions creates request
// "0xreq<n>", GET approval-status answers with the scripted body. It counts requests and
// keeps the submit bodies. The fault cases (malformed JSON, a verdict pending forever)
// are what the real service will not produce on demand.
type verdictService struct {
	srv     *httptest.Server
	mu      sync.Mutex
	status  func() (int, string) // approval-status answer
	posts   int
	gets    int
	submits []map[string]any
	keys    []string
}

func newVerdictService(t *testing.T, status func() (int, string)) *verdictService {
	t.Helper()
	s := &verdictService{status: status}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("x-api-key"))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/transactions":
			s.posts++
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			s.submits = append(s.submits, m)
			s.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"t1","requestHash":"0xreq1","description":"pay","status":"PENDING"}`)
		case r.Method == http.MethodGet && r.URL.Path == "/transactions/0xreq1/approval-status":
			s.gets++
			s.mu.Unlock()
			code, b := s.status()
			w.WriteHeader(code)
			_, _ = io.WriteString(w, b)
		default:
			s.mu.Unlock()
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"statusCode":404}`)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *verdictService) counts() (posts, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts, s.gets
}

// vcEnvelope answers the approval-status GET with testenv.Verdict(outcome, code, human).
func vcEnvelope(outcome, code, human string) func() (int, string) {
	body := testenv.VerdictEnvelope(testenv.Verdict(outcome, code, human))
	return func() (int, string) { return http.StatusOK, body }
}

// TestVerdictClientDrivesTheService runs a real Service on anvil in GUARDIAN_MODE required
// with the verdictclient-backed VerdictClient against a scripted verdict service: only
// an approved verdict makes /verify valid and lets /settle move the money
// (docs/verdict.md#fail-closed, docs/facilitator.md#settle-order).
func TestVerdictClientDrivesTheService(t *testing.T) {
	env := newTestEnv(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	reg := &x402.Registry{}
	if err := reg.Add(env.net); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		status      func() (int, string)
		version     int
		wantValid   bool
		wantStatus  verdict.GuardianStatus
		wantReason  string // substring of guardianReason
		wantGETs    int
		wantMessage string
	}{
		{"approved verdict: valid, and settle pays the payee", vcEnvelope("approved", "allowed", "payment within policy"),
			x402.Version2, true, verdict.GuardianApproved, "payment within policy", 1, ""},
		{"approved verdict in x402 v1", vcEnvelope("approved", "allowed", "payment within policy"),
			x402.Version1, true, verdict.GuardianApproved, "payment within policy", 1, ""},
		{"rejected verdict: invalid, settle refused", vcEnvelope("rejected", "recipient_not_allowed", "payee is not on the allowlist"),
			x402.Version2, false, verdict.GuardianRejected, "payee is not on the allowlist", 1, "verdict is rejected"},
		{"pending at the polling bound: timeout", vcEnvelope("pending", "pending", "evaluating"),
			x402.Version2, false, verdict.GuardianTimeout, "0xreq1", 3, "verdict is timeout"},
		{"malformed verdict: error", func() (int, string) { return http.StatusOK, `{"verdict":{"schemaVersion":1,"outcome":"approved"` },
			x402.Version1, false, verdict.GuardianError, "0xreq1", 1, "verdict is error"},
		{"inconsistent verdict (approved, violation code): error", vcEnvelope("approved", "recipient_not_allowed", "ok"),
			x402.Version2, false, verdict.GuardianError, "reasonCode", 1, "verdict is error"},
		{"service that stays unavailable: error", func() (int, string) { return http.StatusServiceUnavailable, `{"statusCode":503}` },
			x402.Version2, false, verdict.GuardianError, "503", 3, "verdict is error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := newVerdictService(t, tc.status)
			core, logs := observer.New(zapcore.DebugLevel)
			vc, err := NewVerdictClient(VerdictClientConfig{
				BaseURL: svc.srv.URL + "/", APIKey: vcTestKey, Assets: reg, Logger: zap.New(core),
				Poll: verdictclient.PollOptions{IntervalMs: 1, MaxAttempts: 3},
			})
			if err != nil {
				t.Fatal(err)
			}
			cfg := env.config(t)
			cfg.VerdictMode, cfg.Verdicts, cfg.SkipStartupReconcile = VerdictRequired, vc, true
			cfg.Logger = zap.New(core)
			e := env.engine(t, cfg)

			p, r := env.pay(t, tc.version, payer, payee.Address)
			ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if ver.IsValid != tc.wantValid || ver.GuardianStatus != string(tc.wantStatus) || !strings.Contains(ver.GuardianReason, tc.wantReason) {
				t.Fatalf("verify = %+v; want valid=%v guardianStatus=%s guardianReason containing %q", ver, tc.wantValid, tc.wantStatus, tc.wantReason)
			}
			// The verdict's reasonCode travels with a terminal verdict only.
			wantCode := map[verdict.GuardianStatus]string{verdict.GuardianApproved: "allowed", verdict.GuardianRejected: "recipient_not_allowed"}[tc.wantStatus]
			if ver.GuardianReasonCode != wantCode {
				t.Fatalf("guardianReasonCode = %q, want %q", ver.GuardianReasonCode, wantCode)
			}
			if !tc.wantValid && (ver.InvalidReason != x402.ReasonVerdictNotApproved.For(tc.version) || ver.InvalidMessage != tc.wantMessage) {
				t.Fatalf("invalid reason %q message %q", ver.InvalidReason, ver.InvalidMessage)
			}
			posts, gets := svc.counts()
			if posts != 1 || gets != tc.wantGETs {
				t.Fatalf("verdict service saw %d POSTs and %d GETs, want 1 and %d", posts, gets, tc.wantGETs)
			}
			// The submit is the docs/verdict.md#paymentaction of this payment.
			sub := svc.submits[0]
			ptx := sub["proposedTx"].(map[string]any)
			if ptx["protocol"] != "payment" || ptx["rail"] != "x402" || ptx["chainId"] != float64(84532) ||
				ptx["payTo"] != payee.Address.Hex() || ptx["asset"] != env.token.Address.Hex() || ptx["amount"] != testAmount.String() ||
				sub["escrowAddress"] != payer.Address.Hex() || sub["arbiter"] != "policy" ||
				sub["prompt"] != "Pay 0.01 USDC to "+payee.Address.Hex() {
				t.Fatalf("submit = %v", sub)
			}

			payeeBefore := env.token.BalanceOf(t, payee.Address)
			nonceBefore := env.pendingNonce(t, signer)
			res, err := e.Settle(context.Background(), p, r)
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			received := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), payeeBefore)
			if tc.wantValid {
				if !res.Success || received.Cmp(testAmount) != 0 {
					t.Fatalf("settle = %+v, payee received %s", res, received)
				}
			} else {
				if res.Success || res.ErrorReason != x402.ReasonApprovalNotFound.For(tc.version) || received.Sign() != 0 {
					t.Fatalf("settle = %+v, payee received %s; want approval not found and nothing paid", res, received)
				}
				if n := env.pendingNonce(t, signer); n != nonceBefore {
					t.Fatalf("signer broadcast %d transactions without an approval", n-nonceBefore)
				}
			}
			for _, k := range svc.keys {
				if k != vcTestKey {
					t.Fatalf("request without the key in x-api-key")
				}
			}
			for _, entry := range logs.All() {
				enc := zapcore.NewMapObjectEncoder()
				for _, f := range entry.Context {
					f.AddTo(enc)
				}
				b, _ := json.Marshal(enc.Fields)
				if strings.Contains(entry.Message+string(b), vcTestKey) {
					t.Fatalf("key in log entry %q %s", entry.Message, b)
				}
			}
			if logs.FilterField(zap.String("requestHash", "0xreq1")).Len() == 0 {
				t.Fatal("no log entry names the requestHash")
			}
		})
	}
}

// A payment that cannot become a PaymentAction (a network the spec's adapter does not
// map) is an error from VerifyPayment and a non-approved result, without a request.
func TestVerdictClientUnbuildableAction(t *testing.T) {
	svc := newVerdictService(t, vcEnvelope("approved", "allowed", "ok"))
	vc, err := NewVerdictClient(VerdictClientConfig{BaseURL: svc.srv.URL, APIKey: vcTestKey})
	if err != nil {
		t.Fatal(err)
	}
	p := &x402.Payment{Version: x402.Version2, Scheme: x402.SchemeExact, Network: "eip155:1"}
	r := &x402.Requirements{Scheme: x402.SchemeExact, Network: "eip155:1"}
	res, err := vc.VerifyPayment(context.Background(), p, r)
	if !errors.Is(err, verdictclient.ErrInvalidInput) || res.Approved || res.Status != verdict.GuardianError {
		t.Fatalf("= %+v, %v", res, err)
	}
	if posts, gets := svc.counts(); posts+gets != 0 {
		t.Fatalf("%d requests sent", posts+gets)
	}
}

func TestNewVerdictClientRefusesBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  VerdictClientConfig
	}{
		{"no base url", VerdictClientConfig{APIKey: vcTestKey}},
		{"not http", VerdictClientConfig{BaseURL: "file:///etc", APIKey: vcTestKey}},
		{"key in the url", VerdictClientConfig{BaseURL: "https://verdicts.example/?key=" + vcTestKey, APIKey: vcTestKey}},
		{"no key", VerdictClientConfig{BaseURL: "https://verdicts.example"}},
		{"short key", VerdictClientConfig{BaseURL: "https://verdicts.example", APIKey: "abc"}},
		{"negative timeout", VerdictClientConfig{BaseURL: "https://verdicts.example", APIKey: vcTestKey, Timeout: -1}},
		{"negative attempts", VerdictClientConfig{BaseURL: "https://verdicts.example", APIKey: vcTestKey, Poll: verdictclient.PollOptions{MaxAttempts: -1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vc, err := NewVerdictClient(tc.cfg)
			if err == nil || vc != nil {
				t.Fatalf("accepted: %v", vc)
			}
			if strings.Contains(err.Error(), vcTestKey) {
				t.Fatalf("error quotes the key: %v", err)
			}
		})
	}
}
