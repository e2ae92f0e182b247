package verdictapp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/verdictserver/policy"
)

// TestPolicyErrorsCountsInWords: `caddy verdict policy validate` prints each problem on a
// line of its own and counts them in English ("1 problem", "2 problems").
func TestPolicyErrorsCountsInWords(t *testing.T) {
	for doc, want := range map[string]string{
		`{"limits": {"perTxUsd": -1}}`:                             "(1 problem)",
		`{"limits": {"perTxUsd": -1}, "chains": {"allowed": [0]}}`: "(2 problems)",
	} {
		_, err := policy.Parse([]byte(doc))
		var out bytes.Buffer
		got := policyErrors(&out, err)
		if got == nil || !strings.HasSuffix(got.Error(), want) {
			t.Errorf("%s: error %v, want one ending %q", doc, got, want)
		}
		if !strings.Contains(out.String(), "limits.perTxUsd: ") {
			t.Errorf("%s: printed %q, want a line naming limits.perTxUsd", doc, out.String())
		}
	}
}
