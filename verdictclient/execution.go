package verdictclient

import (
	"context"
	"encoding/json"
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
	if requestHash == "" || len(requestHash) > 512 || !printableASCII(requestHash) {
		return "", &verdict.InputError{Field: "requestHash", Problem: "must be 1 to 512 visible ascii characters"}
	}
	body, err := json.Marshal(map[string]bool{"executed": executed})
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
