package verdictclient

import (
	"errors"
	"net/http"
	"testing"

	"github.com/x402gate/x402gate/verdict"
)

// TestReportExecution: the reservation's state on 200, a *StatusError for the service's
// refusals, and a *ValidationError for a 200 that does not say the state.
func TestReportExecution(t *testing.T) {
	const route = "POST /transactions/0xabc/execution"
	for _, tc := range []struct {
		name   string
		reply  reply
		want   string
		status int // of the *StatusError; 0 for none
		valErr bool
	}{
		{"committed", reply{body: `{"requestHash":"0xabc","reservation":"committed"}`}, "committed", 0, false},
		{"no reservation is 404", statusReply(http.StatusNotFound), "", http.StatusNotFound, false},
		{"settled the other way is 409", statusReply(http.StatusConflict), "", http.StatusConflict, false},
		{"a 200 without the state", reply{body: `{"requestHash":"0xabc"}`}, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(route, tc.reply)
			got, err := s.client(t).ReportExecution(t.Context(), "0xabc", true)
			var se *StatusError
			var ve *verdict.ValidationError
			switch {
			case tc.status != 0 && (!errors.As(err, &se) || se.Status != tc.status):
				t.Fatalf("err = %v, want status %d", err, tc.status)
			case tc.valErr && !errors.As(err, &ve):
				t.Fatalf("err = %v, want a validation error", err)
			case tc.status == 0 && !tc.valErr && (err != nil || got != tc.want):
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			if n := s.count(route); n != 1 {
				t.Fatalf("sent %d times, want 1", n)
			}
		})
	}
}
