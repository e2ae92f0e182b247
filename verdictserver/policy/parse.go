package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/x402gate/x402gate/docs"
	"github.com/x402gate/x402gate/verdict"
)

// MaxDocumentBytes bounds an uploaded document (docs/policy.md#validation).
const MaxDocumentBytes = 1 << 20

// maxProblems bounds the problems one error lists.
const maxProblems = 50

// Problem is one reason a document was refused. Field is the dotted path of the member at
// fault ("limits.perTxUsd", "recipients.allowed.1"); "" is the document itself.
type Problem struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// Errors is every problem Parse found, sorted by field (docs/policy.md#validation).
type Errors struct {
	Problems []Problem
}

// Error lists the problems: "policy: limits.perTxUsd: must be >= 0; …".
func (e *Errors) Error() string {
	var b strings.Builder
	b.WriteString("policy:")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteByte(' ')
		if p.Field == "" {
			b.WriteString("document")
		} else {
			b.WriteString(p.Field)
		}
		b.WriteString(": ")
		b.WriteString(p.Problem)
	}
	return b.String()
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// Schema returns the compiled docs.PolicySchema.
func Schema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(docs.PolicySchema))
		if err != nil {
			schemaErr = fmt.Errorf("policy schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource("policy.schema.json", doc); err != nil {
			schemaErr = fmt.Errorf("policy schema: %w", err)
			return
		}
		schema, schemaErr = c.Compile("policy.schema.json")
	})
	return schema, schemaErr
}

// Parse validates raw against docs.PolicySchema and the semantic rules of
// docs/policy.md#validation and returns its typed view. Any refusal is an *Errors whose
// problems each name the field at fault.
func Parse(raw []byte) (*Document, error) {
	if len(raw) > MaxDocumentBytes {
		return nil, one("", "is larger than 1 MiB")
	}
	// verdict.ParseJSON refuses duplicate keys and trailing data, so the document means
	// the same to every reader.
	tree, err := verdict.ParseJSON(raw)
	if err != nil {
		return nil, one("", "malformed json: "+err.Error())
	}
	s, err := Schema()
	if err != nil {
		return nil, err
	}
	var ps []Problem
	if err := s.Validate(tree); err != nil {
		ve, ok := err.(*jsonschema.ValidationError)
		if !ok {
			return nil, one("", err.Error())
		}
		ps = schemaProblems(ve)
	}
	// The rules the schema cannot express run on a document the schema refused too, so that
	// every problem is reported at once; a field the schema refused is not reported twice.
	if m, ok := tree.(map[string]any); ok {
		ps = append(ps, notUnder(semantic(m), ps)...)
	}
	if len(ps) > 0 {
		return nil, finish(ps)
	}
	var doc Document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, one("", "cannot be read: "+err.Error())
	}
	return &doc, nil
}

// notUnder returns the problems of ps whose field is neither a field of reported nor
// inside one.
func notUnder(ps, reported []Problem) []Problem {
	var out []Problem
	for _, p := range ps {
		inside := false
		for _, r := range reported {
			if p.Field == r.Field || strings.HasPrefix(p.Field, r.Field+".") {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

func one(field, problem string) *Errors {
	return &Errors{Problems: []Problem{{Field: field, Problem: problem}}}
}

// finish sorts and deduplicates problems and bounds their number.
func finish(ps []Problem) *Errors {
	slices.SortFunc(ps, func(a, b Problem) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Problem, b.Problem)
	})
	ps = slices.Compact(ps)
	if len(ps) > maxProblems {
		ps = append(ps[:maxProblems], Problem{Field: "", Problem: fmt.Sprintf("and %d more problems", len(ps)-maxProblems)})
	}
	return &Errors{Problems: ps}
}

var printer = message.NewPrinter(language.English)

// DottedPath turns a schema instance location (the tokens of /a/b/0) into the dotted path
// a.b.0 that names a policy member (docs/policy.md#validation).
func DottedPath(loc []string) string { return strings.Join(loc, ".") }

func join(base, name string) string {
	if base == "" {
		return name
	}
	return base + "." + name
}

// schemaProblems flattens a validation error tree into one problem per failed leaf,
// each at the member at fault: an unknown or missing member is named by its own path.
func schemaProblems(e *jsonschema.ValidationError) []Problem {
	var out []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		at := DottedPath(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				out = append(out, Problem{Field: join(at, p), Problem: "is not a member of the policy document here"})
			}
			return
		case *kind.Required:
			for _, p := range k.Missing {
				out = append(out, Problem{Field: join(at, p), Problem: "is required"})
			}
			return
		case *kind.PropertyNames:
			out = append(out, Problem{Field: join(at, k.Property), Problem: "is not a valid name here: " + leafText(e)})
			return
		case *kind.AnyOf, *kind.OneOf:
			out = append(out, Problem{Field: at, Problem: leafText(e)})
			return
		}
		if len(e.Causes) == 0 {
			out = append(out, Problem{Field: at, Problem: clip(e.ErrorKind.LocalizedString(printer))})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	if len(out) == 0 {
		out = append(out, Problem{Field: "", Problem: "does not match the policy schema"})
	}
	return out
}

// leafText joins the messages of e's failed leaves with "or": the alternatives of an anyOf,
// or the reasons a member name was refused.
func leafText(e *jsonschema.ValidationError) string {
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			msgs = append(msgs, e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	if len(msgs) == 0 {
		return clip(e.ErrorKind.LocalizedString(printer))
	}
	return clip(strings.Join(msgs, ", or "))
}

// clip bounds a message that may quote a long value of the document.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// semantic applies the rules the schema cannot express (docs/policy.md#validation) to a
// document the schema accepted.
func semantic(doc map[string]any) []Problem {
	var ps []Problem
	bad := func(field, problem string) { ps = append(ps, Problem{Field: field, Problem: problem}) }
	addrList := func(base string, v any, allowSelf bool) {
		arr, _ := v.([]any)
		seen := make(map[common.Address]int, len(arr))
		for i, item := range arr {
			s, _ := item.(string)
			f := join(base, strconv.Itoa(i))
			if allowSelf && s == Self {
				continue
			}
			a, problem := address(s)
			if problem != "" {
				bad(f, problem)
				continue
			}
			if j, dup := seen[a]; dup {
				bad(f, "repeats item "+strconv.Itoa(j))
				continue
			}
			seen[a] = i
		}
	}
	chainKey := func(f, key string) {
		if n, err := strconv.ParseInt(key, 10, 64); err != nil || n <= 0 {
			bad(f, "is not a chain id: a positive integer below 2^63")
		}
	}
	integer := func(f string, v any) {
		if n, ok := v.(json.Number); ok {
			if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
				bad(f, "must be written as an integer")
			}
		}
	}
	if c, ok := section(doc, "chains"); ok {
		arr, _ := c["allowed"].([]any)
		for i, v := range arr {
			integer(join("chains.allowed", strconv.Itoa(i)), v)
		}
	}
	// Both name contracts by chain and address: each address once per chain.
	for _, name := range []string{FieldContracts, FieldKnownContracts} {
		c, ok := doc[name].(map[string]any)
		if !ok {
			continue
		}
		for chain, v := range c {
			chainKey(join(name, chain), chain)
			byAddr, _ := v.(map[string]any)
			seen := map[common.Address]string{}
			for addr := range byAddr {
				f := join(join(name, chain), addr)
				a, problem := address(addr)
				if problem != "" {
					bad(f, problem)
					continue
				}
				if other, dup := seen[a]; dup {
					bad(f, "is the same contract as "+other)
				}
				seen[a] = addr
			}
		}
	}
	if a, ok := section(doc, "assets"); ok {
		if u, ok := a["universe"].(map[string]any); ok {
			for chain, v := range u {
				f := join("assets.universe", chain)
				chainKey(f, chain)
				addrList(f, v, false)
			}
		}
	}
	if r, ok := section(doc, "recipients"); ok {
		addrList(FieldRecipients, r["allowed"], true)
	}
	if s, ok := section(doc, "sinks"); ok {
		addrList(FieldSinksExtra, s["extra"], false)
	}
	if s, ok := section(doc, "swaps"); ok {
		integer(FieldMaxSlippage, s["maxSlippageBps"])
	}
	if o, ok := section(doc, "orders"); ok {
		integer(FieldMaxDeviation, o["maxPriceDeviationBps"])
	}
	return append(ps, windowProblems(doc)...)
}

func section(doc map[string]any, name string) (map[string]any, bool) {
	m, ok := doc[name].(map[string]any)
	return m, ok
}

// address reads a 20-byte hex address; a mixed-case one must carry its EIP-55 checksum.
// problem is "" when s is an address.
func address(s string) (a common.Address, problem string) {
	if len(s) != 42 || s[0] != '0' || s[1] != 'x' || !common.IsHexAddress(s) {
		return a, "must be a 20-byte address: 0x and 40 hex digits"
	}
	a = common.HexToAddress(s)
	hex := s[2:]
	if hex != strings.ToLower(hex) && hex != strings.ToUpper(hex) && a.Hex() != s {
		return a, "has a wrong EIP-55 checksum (write it in lower case, or with its checksum)"
	}
	return a, ""
}

// Address reads a policy address the way Parse accepts it (docs/policy.md#validation).
func Address(s string) (common.Address, bool) {
	a, problem := address(s)
	return a, problem == ""
}
