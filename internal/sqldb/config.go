package sqldb

import "context"

// Config selects a SQL database, as a JSON config states it: an embedded SQLite file, or
// PostgreSQL for several instances. The facilitator's settlement journal and the verdict
// service's store use it.
type Config struct {
	// Type is SQLite.Name or Postgres.Name. Default: sqlite.
	Type string `json:"type,omitempty"`
	// Path is the SQLite file. Default: chosen by the user of the config.
	Path string `json:"path,omitempty"`
	// DSN is the PostgreSQL DSN (it holds a password). Required for postgres.
	DSN string `json:"dsn,omitempty"`
}

// Open opens the database c selects; defaultPath is the SQLite file when c is nil or names
// none.
func (c *Config) Open(ctx context.Context, defaultPath string) (*DB, error) {
	if c != nil && c.Type == Postgres.Name {
		return OpenPostgres(ctx, c.DSN)
	}
	if c == nil || c.Path == "" {
		return OpenSQLite(ctx, defaultPath)
	}
	return OpenSQLite(ctx, c.Path)
}
