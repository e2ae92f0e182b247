package verdictserver

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

// Request limits (docs/verdict-api.md#post-transactions).
const (
	// DefaultMaxBodyBytes caps a request body: 64 KiB, far above a proposed action with
	// its prompt and context.
	DefaultMaxBodyBytes = 64 << 10
	// maxPromptBytes caps prompt.
	maxPromptBytes = 8 << 10
	// maxProtocolLen caps proposedTx.protocol.
	maxProtocolLen = 64
	// maxTraceIDLen caps metadata.traceId; verdictclient sends 8 to 128 characters.
	maxTraceIDLen = 128
	// maxSignatureLen caps executionSignature.
	maxSignatureLen = 4096
)

// submitFields are the members of a POST /transactions body; any other is refused.
var submitFields = map[string]bool{
	"escrowAddress": true, "prompt": true, "proposedTx": true, "metadata": true,
	"contextLogs": true, "executionSignature": true, "arbiter": true,
}

// encryptedFields are members of the pre-encrypted submit shape, which agent keys may not
// use (docs/verdict-api.md#post-transactions): routing and encryption happen here.
var encryptedFields = []string{
	"ciphertext", "encrypted", "encryptedManifest", "encryptedPayload",
	"encryptedTransaction", "encryptedTx", "pgpMessage",
}

// submitRequest is a decoded, valid POST /transactions body.
type submitRequest struct {
	Escrow             common.Address
	Prompt             string
	ProposedTx         map[string]any // numbers as json.Number
	Protocol           string
	ChainID            int64
	Metadata           map[string]any // nil when absent
	ContextLogs        map[string]any // nil when absent
	ExecutionSignature string
	Arbiter            string // "" or "policy"
	TraceID            string // metadata.traceId, "" when absent
}

// decodeSubmit decodes and validates a POST /transactions body strictly: one JSON object
// without duplicate keys, only the known members, each of its type
// (docs/verdict-api.md#post-transactions). Every error is a *fieldError.
func decodeSubmit(body []byte) (*submitRequest, error) {
	tree, err := verdict.ParseJSON(body)
	if err != nil {
		return nil, &fieldError{code: codeMalformedJSON, message: "body is not valid json: " + err.Error()}
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, badField("", "body must be a json object")
	}
	for _, f := range encryptedFields {
		if _, ok := obj[f]; ok {
			return nil, &fieldError{code: codePreEncrypted, field: f, message: "the pre-encrypted transaction shape is not accepted from agent keys; send proposedTx as a json object"}
		}
	}
	if _, ok := obj["proposedTx"].(string); ok {
		return nil, &fieldError{code: codePreEncrypted, field: "proposedTx", message: "the pre-encrypted transaction shape is not accepted from agent keys; send proposedTx as a json object"}
	}
	var unknown []string
	for k := range obj {
		if !submitFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, &fieldError{code: codeUnknownField, field: unknown[0], message: "unknown field"}
	}
	if f := nulField(obj, ""); f != "" {
		return nil, badField(f, "must not contain a NUL character")
	}
	req := &submitRequest{}
	if req.Escrow, err = readAddress(obj, "escrowAddress"); err != nil {
		return nil, err
	}
	p, ok := obj["prompt"].(string)
	switch {
	case !ok:
		return nil, badField("prompt", "is required and must be a string")
	case strings.TrimSpace(p) == "":
		return nil, badField("prompt", "must be non-empty")
	case len(p) > maxPromptBytes:
		return nil, badField("prompt", "must be at most "+strconv.Itoa(maxPromptBytes)+" bytes")
	}
	req.Prompt = p
	tx, ok := obj["proposedTx"].(map[string]any)
	if !ok {
		return nil, badField("proposedTx", "is required and must be a json object")
	}
	req.ProposedTx = tx
	proto, ok := tx["protocol"].(string)
	switch {
	case !ok:
		return nil, badField("proposedTx.protocol", "is required and must be a string")
	case proto == "" || len(proto) > maxProtocolLen || !printableASCII(proto):
		return nil, badField("proposedTx.protocol", "must be 1 to "+strconv.Itoa(maxProtocolLen)+" visible ascii characters")
	}
	req.Protocol = proto
	if req.ChainID, err = readChainID(tx); err != nil {
		return nil, err
	}
	if req.Metadata, err = optObject(obj, "metadata"); err != nil {
		return nil, err
	}
	if req.ContextLogs, err = optObject(obj, "contextLogs"); err != nil {
		return nil, err
	}
	if raw, ok := req.Metadata["traceId"]; ok {
		t, ok := raw.(string)
		if !ok || t == "" || len(t) > maxTraceIDLen || !printableASCII(t) {
			return nil, badField("metadata.traceId", "must be 1 to "+strconv.Itoa(maxTraceIDLen)+" visible ascii characters")
		}
		req.TraceID = t
	}
	if raw, ok := obj["executionSignature"]; ok {
		s, ok := raw.(string)
		if !ok || len(s) > maxSignatureLen {
			return nil, badField("executionSignature", "must be a string of at most "+strconv.Itoa(maxSignatureLen)+" bytes")
		}
		req.ExecutionSignature = s
	}
	if raw, ok := obj["arbiter"]; ok {
		if s, _ := raw.(string); s != "policy" {
			return nil, badField("arbiter", `must be "policy"`)
		}
		req.Arbiter = "policy"
	}
	return req, nil
}

// readAddress reads a 20-byte 0x-hex address. A mixed-case spelling must be its EIP-55
// checksum, so a typo in one letter is caught rather than turned into another address.
func readAddress(obj map[string]any, key string) (common.Address, error) {
	s, ok := obj[key].(string)
	if !ok {
		return common.Address{}, badField(key, "is required and must be a string")
	}
	if len(s) != 42 || !strings.HasPrefix(s, "0x") || !common.IsHexAddress(s) {
		return common.Address{}, badField(key, "must be a 20-byte address: 0x and 40 hex digits")
	}
	a := common.HexToAddress(s)
	if body := s[2:]; body != strings.ToLower(body) && body != strings.ToUpper(body) && s != a.Hex() {
		return common.Address{}, badField(key, "mixed-case address fails its EIP-55 checksum")
	}
	if a == (common.Address{}) {
		return common.Address{}, badField(key, "must not be the zero address")
	}
	return a, nil
}

// readChainID reads proposedTx.chainId: a JSON integer from 1 to 2^63-1, written without
// fraction or exponent.
func readChainID(tx map[string]any) (int64, error) {
	n, ok := tx["chainId"].(json.Number)
	if !ok {
		return 0, badField("proposedTx.chainId", "is required and must be a number")
	}
	id, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || id <= 0 {
		return 0, badField("proposedTx.chainId", "must be a positive integer")
	}
	return id, nil
}

func optObject(obj map[string]any, key string) (map[string]any, error) {
	raw, ok := obj[key]
	if !ok {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, badField(key, "must be a json object")
	}
	return m, nil
}

// nulField returns the path of the first string or key below v that holds a NUL, which
// no store keeps faithfully (PostgreSQL refuses it in json), or "".
func nulField(v any, path string) string {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t := v.(type) {
	case string:
		if hasNUL(t) {
			return orRoot(path)
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if hasNUL(k) {
				return orRoot(path)
			}
			if f := nulField(t[k], join(k)); f != "" {
				return f
			}
		}
	case []any:
		for i, x := range t {
			if f := nulField(x, path+"["+strconv.Itoa(i)+"]"); f != "" {
				return f
			}
		}
	}
	return ""
}

func orRoot(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// canonicalJSON encodes a decoded JSON tree canonically (docs/verdict-api.md#requesthash):
// object keys sorted by their bytes, no insignificant whitespace, numbers exactly as they
// were sent, strings without HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// wire re-encodes r as a POST /transactions body; decodeSubmit(r.wire()) gives r back.
func (r *submitRequest) wire() map[string]any {
	m := map[string]any{
		"escrowAddress": r.Escrow.Hex(),
		"prompt":        r.Prompt,
		"proposedTx":    r.ProposedTx,
	}
	if r.Metadata != nil {
		m["metadata"] = r.Metadata
	}
	if r.ContextLogs != nil {
		m["contextLogs"] = r.ContextLogs
	}
	if r.ExecutionSignature != "" {
		m["executionSignature"] = r.ExecutionSignature
	}
	if r.Arbiter != "" {
		m["arbiter"] = r.Arbiter
	}
	return m
}
