package verdictserver

import (
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

// TestModesOverTheAPI submits the same payment to a payee the policy does not list for three
// agents whose policies differ only in mode (docs/verdict-api.md#modes): enforce rejects it,
// warn approves it with a warning and audit approves it, both recording the recipient check
// in wouldFail; every answer passes the client's rules (await), and the stored verdict
// carries the observation's suggested correction (docs/verdict-api.md#observations).
func TestModesOverTheAPI(t *testing.T) {
	e := newEnv(t, sqliteStore(t), nil)
	for i, tc := range []struct {
		mode    verdict.Mode
		outcome verdict.Outcome
		warned  bool // humanReason names the code that would have rejected
	}{
		{verdict.ModeEnforce, verdict.OutcomeRejected, false},
		{verdict.ModeWarn, verdict.OutcomeApproved, true},
		{verdict.ModeAudit, verdict.OutcomeApproved, false},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			doc := strings.Replace(allowPolicy, "{", `{"mode": "`+string(tc.mode)+`",`, 1)
			a := e.agent("modes-"+string(tc.mode), common.BigToAddress(big.NewInt(int64(0xA0DE0+i))), doc)
			sub := e.submit(a.Key, submitBody(a.Wallet, strangerPay, ""))
			if sub.status != http.StatusCreated {
				t.Fatalf("submit = %d %s", sub.status, sub.raw)
			}
			hash := sub.body["requestHash"].(string)
			v := e.await(a.Key, hash)
			if v.Outcome != tc.outcome || v.Mode != tc.mode {
				t.Fatalf("verdict %s in mode %q (%s), want %s in %s", v.Outcome, v.Mode, v.HumanReason, tc.outcome, tc.mode)
			}
			if got := strings.Contains(v.HumanReason, "recipient_not_allowed"); got != tc.warned {
				t.Errorf("humanReason %q names recipient_not_allowed: %v, want %v", v.HumanReason, got, tc.warned)
			}
			wantWould := tc.mode != verdict.ModeEnforce
			if got := len(v.WouldFail) == 1 && v.WouldFail[0].CheckID == verdict.CheckRecipient; got != wantWould {
				t.Errorf("wouldFail %+v, want the recipient check: %v", v.WouldFail, wantWould)
			}
			raw := e.status(a.Key, hash).raw
			if fix := `"suggestion":"use one of recipients.allowed: ` + allowedPay.Hex() + `"`; !strings.Contains(string(raw), fix) {
				t.Errorf("the stored verdict lacks %s: %s", fix, raw)
			}
		})
	}
}
