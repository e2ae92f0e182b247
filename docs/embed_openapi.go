package docs

import _ "embed"

// OpenAPI is docs/openapi.json, the OpenAPI 3.1 document of the verdict service's public and
// admin API (docs/verdict-api.md#routes). verdictserver's tests hold it to the routes the
// server serves.
//
//go:embed openapi.json
var OpenAPI []byte
