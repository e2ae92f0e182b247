package verdictserver

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

// FuzzDecodeSubmit: the POST /transactions decoder never panics, every refusal is a
// *fieldError with a known code, and what it accepts is valid by rules checked here on
// their own (not by calling the decoder's helpers), and decodes again to the same request
// after re-encoding. Seeds: below, and the corpus in testdata/fuzz/FuzzDecodeSubmit.
func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range []string{
		`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","prompt":"pay","proposedTx":{"protocol":"payment","chainId":84532}}`,
		`{"escrowAddress":"0xA11CE00000000000000000000000000000000001","prompt":"pay","proposedTx":{"protocol":"payment","chainId":84532,"payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C"},"metadata":{"traceId":"abcdefgh"},"contextLogs":{},"arbiter":"policy","executionSignature":"0x"}`,
		`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","prompt":" ","proposedTx":{"protocol":"payment","chainId":1}}`,
		`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","prompt":"p","proposedTx":{"protocol":"payment","chainId":1e3}}`,
		`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","prompt":"p","proposedTx":"ciphertext"}`,
		`{"escrowAddress":"0xa11ce00000000000000000000000000000000001","escrowAddress":"0xa11ce00000000000000000000000000000000002"}`,
		`{"prompt":"p\u0000","proposedTx":{}}`,
		`[]`, `null`, `{"a":`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeSubmit(body)
		if err != nil {
			fe, ok := err.(*fieldError)
			if !ok || errorCodes[fe.code] == 0 || fe.message == "" {
				t.Fatalf("refusal %#v is not a *fieldError with a known code", err)
			}
			if req != nil {
				t.Fatal("a refusal returned a request too")
			}
			return
		}
		checkAccepted(t, body, req)
		again, err := json.Marshal(req.wire())
		if err != nil {
			t.Fatal(err)
		}
		req2, err := decodeSubmit(again)
		if err != nil {
			t.Fatalf("an accepted request does not decode again: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(req, req2) {
			t.Fatalf("re-decoded request differs:\n%#v\n%#v", req, req2)
		}
	})
}

// checkAccepted states the accepted shape independently of the decoder.
func checkAccepted(t *testing.T, body []byte, req *submitRequest) {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("accepted a body that is not a json object: %v", err)
	}
	for k := range raw {
		switch k {
		case "escrowAddress", "prompt", "proposedTx", "metadata", "contextLogs", "executionSignature", "arbiter":
		default:
			t.Fatalf("accepted unknown member %q", k)
		}
	}
	var esc string
	if json.Unmarshal(raw["escrowAddress"], &esc) != nil || !common.IsHexAddress(esc) || len(esc) != 42 ||
		!strings.EqualFold(esc, req.Escrow.Hex()) || req.Escrow == (common.Address{}) {
		t.Fatalf("accepted escrowAddress %s", raw["escrowAddress"])
	}
	if strings.TrimSpace(req.Prompt) == "" || strings.ContainsRune(req.Prompt, 0) {
		t.Fatalf("accepted prompt %q", req.Prompt)
	}
	tx, err := verdict.ParseJSON(raw["proposedTx"])
	m, ok := tx.(map[string]any)
	if err != nil || !ok {
		t.Fatalf("accepted proposedTx %s", raw["proposedTx"])
	}
	if p, _ := m["protocol"].(string); p == "" || p != req.Protocol {
		t.Fatalf("accepted protocol %v", m["protocol"])
	}
	n, _ := m["chainId"].(json.Number)
	if id, err := strconv.ParseInt(string(n), 10, 64); err != nil || id <= 0 || id != req.ChainID {
		t.Fatalf("accepted chainId %v", m["chainId"])
	}
	for _, k := range []string{"metadata", "contextLogs"} {
		if v, ok := raw[k]; ok {
			if o, err := verdict.ParseJSON(v); err != nil {
				t.Fatalf("accepted %s %s", k, v)
			} else if _, ok := o.(map[string]any); !ok {
				t.Fatalf("accepted %s %s", k, v)
			}
		}
	}
	if a, ok := raw["arbiter"]; ok {
		var s string
		if json.Unmarshal(a, &s) != nil || s != "policy" || req.Arbiter != "policy" {
			t.Fatalf("accepted arbiter %s", a)
		}
	}
}
