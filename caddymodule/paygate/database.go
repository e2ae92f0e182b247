package paygate

import "github.com/x402gate/x402gate/caddymodule/internal/caddyconf"

// DatabaseConfig selects the SQL database of a facilitator's settlement journal: an
// embedded SQLite file, or PostgreSQL for several instances.
type DatabaseConfig = caddyconf.DatabaseConfig
