// Package docs carries the machine-readable parts of our documentation, embedded so that the
// code validates against exactly what the pages describe.
package docs

import _ "embed"

// PolicySchema is docs/policy.schema.json, the JSON Schema (2020-12) of the policy document
// (docs/policy.md#sections).
//
//go:embed policy.schema.json
var PolicySchema []byte
