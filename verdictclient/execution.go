package verdictclient

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"

	"github.com/x402gate/x402gate/verdict"
)

// ReportExecution tells x402gate's verdict service whether the approved action requestHash
// was executed, through POST /transactions/{requestHash}/execution: executed commits its
// spend reservation, otherwise it is released (docs/spend-windows.md#reporting). It returns
// the reservation's state, "committed" or "released". Errors: *StatusError (404: no such
// transaction of the key's agent, or it has no reservation; 409: settled the other way
// already), ErrNetwork, *verdict.ValidationError for an answer without the state, or the
// context's error. This route is an extension of the spec.
func (c *Client) ReportExecution(ctx context.Context, requestHash string, executed bool) (string, error) {
	return c.reportExecution(ctx, requestHash, map[string]any{"executed": executed})
}

// ReportMoved tells x402gate's verdict service that the approved payment requestHash moved
// amount of its action's amount (an upto payment's settled amount, in base units), through
// the same route as ReportExecution with {"executed": true, "amount"}: the service commits
// that share of the spend reservation and releases the rest, or releases it all for 0
// (docs/spend-windows.md#reporting). An amount below the action's needs a key with
// verdicts:release:own (*StatusError 403 without it); one above it is a *StatusError 400.
func (c *Client) ReportMoved(ctx context.Context, requestHash string, amount *big.Int) (string, error) {
	if amount == nil || amount.Sign() < 0 {
		return "", &verdict.InputError{Field: "amount", Problem: "must be an integer >= 0"}
	}
	return c.reportExecution(ctx, requestHash, map[string]any{"executed": true, "amount": amount.String()})
}

// reportExecution posts report to POST /transactions/{requestHash}/execution and returns the
// reservation's state.
func (c *Client) reportExecution(ctx context.Context, requestHash string, report map[string]any) (string, error) {
	if requestHash == "" || len(requestHash) > 512 || !printableASCII(requestHash) {
		return "", &verdict.InputError{Field: "requestHash", Problem: "must be 1 to 512 visible ascii characters"}
	}
	body, err := json.Marshal(report)
	if err != nil {
		return "", err
	}
	op := "report execution"
	u := c.base + "/transactions/" + url.PathEscape(requestHash) + "/execution"
	ans, err := c.t.do(ctx, call{op: op, method: http.MethodPost, url: u, body: body, apiKey: c.apiKey, requestHash: requestHash})
	if err != nil {
		return "", err
	}
	if ans.status != http.StatusOK {
		return "", &StatusError{Op: op, Status: ans.status, RequestHash: requestHash}
	}
	var out struct {
		Reservation string `json:"reservation"`
	}
	if err := json.Unmarshal(ans.body, &out); err != nil || (out.Reservation != "committed" && out.Reservation != "released") {
		return "", validator{op: op}.fail("reservation", "must be committed or released")
	}
	return out.Reservation, nil
}
