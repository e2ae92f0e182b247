package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/internal/testenv"
)

// FuzzVerifySettleBody posts any body to /verify and /settle of a handler whose backend
// approves whatever reaches it, so that only the HTTP layer's decoding stands between a
// body and an approval (docs/facilitator.md#api). For any body:
//   - the answer is 200, 400 or 413, JSON, and every 400 names its error, reason and message;
//   - an approval (isValid or success true) comes only from the backend, called once with a
//     decoded payment and requirement, for the payer the answer names;
//   - a body the backend never saw is not an approval: 200 with isValid/success false and
//     a reason, or an error status.
//
// Seeds: testdata/fuzz/FuzzVerifySettleBody and the reference clients' bodies in both
// versions.
func FuzzVerifySettleBody(f *testing.F) {
	for _, v := range []int{1, 2} {
		body := testenv.JSON(f, apiTestBody(f, v))
		f.Add(false, body)
		f.Add(true, body)
		f.Add(false, strings.Replace(body, `"x402Version":`+string(rune('0'+v)), `"x402Version":3`, 1))
	}
	f.Add(false, `{"paymentPayload":{},"paymentRequirements":{}}`)
	f.Add(true, `{"x402Version":2,"paymentPayload":{"x402Version":1},"paymentRequirements":{"scheme":"exact"}}`)
	f.Fuzz(func(t *testing.T, settle bool, body string) {
		path := "/verify"
		if settle {
			path = "/settle"
		}
		svc := gatetest.NewFacilitator()
		h := NewHandler(svc, HandlerOptions{})
		status, hdr, out := apiDo(t, h, http.MethodPost, path, "application/json", body, nil)
		if ct := hdr.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("status %d with Content-Type %q", status, ct)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("status %d, the answer is not a JSON object: %q", status, out)
		}
		calls := len(svc.Calls())
		switch status {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if m["error"] == nil || m["reason"] == nil || m["message"] == nil {
				t.Fatalf("%d without error, reason and message: %s", status, out)
			}
			if calls != 0 {
				t.Fatalf("%d, but the backend was called", status)
			}
			return
		default:
			t.Fatalf("status %d: %s", status, out)
		}
		ok, reason := m["isValid"], m["invalidReason"]
		if settle {
			ok, reason = m["success"], m["errorReason"]
		}
		if ok == true {
			if calls != 1 {
				t.Fatalf("an approval with %d backend calls: %s", calls, out)
			}
			var payer string
			if settle {
				if lastCall(svc).Payment == nil || lastCall(svc).Requirements == nil {
					t.Fatal("settle approved without a decoded payment and requirement")
				}
				payer = lastCall(svc).Payment.Authorization.From.Hex()
			} else {
				if lastCall(svc).Input.Payment == nil || lastCall(svc).Input.Requirements == nil {
					t.Fatal("verify approved without a decoded payment and requirement")
				}
				payer = lastCall(svc).Input.Payment.Authorization.From.Hex()
			}
			if m["payer"] != payer {
				t.Fatalf("approved for payer %v, the backend saw %s", m["payer"], payer)
			}
			return
		}
		if ok != false {
			t.Fatalf("neither an approval nor a refusal: %s", out)
		}
		if r, _ := reason.(string); calls == 0 && r == "" {
			t.Fatalf("a refusal without a reason: %s", out)
		}
	})
}
