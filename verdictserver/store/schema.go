package store

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/x402gate/x402gate/internal/sqldb"
)

// schema is the store's tables, one migration per version, shared by both engines. Times
// are unix microseconds (UTC). JSON documents are TEXT, kept byte for byte as written.
// Addresses are 0x and lower-case hex. The version table is named for the verdict
// service, so it cannot collide with the facilitator's journal in one PostgreSQL
// database; the lock key is "x402gver" in ASCII.
//
// Rules the schema holds on its own, for every instance that shares the database:
//   - agents.name, api_keys.hash, transactions.request_hash are unique;
//   - a wallet (chain, address) belongs to one agent;
//   - policy versions are keyed (agent, version); the store has no UPDATE of them;
//   - a non-empty trace id is unique per agent (a partial unique index, which both
//     engines support);
//   - a transaction's status is one of the three, and a terminal one has a verdict.
var schema = sqldb.Schema{
	Table:   "verdict_schema_migrations",
	LockKey: 0x7834303267766572,
	Migrations: []sqldb.Migration{
		{Version: 1, Statements: []string{
			`CREATE TABLE agents (
			id         TEXT PRIMARY KEY,
			name       TEXT NOT NULL UNIQUE,
			created_at BIGINT NOT NULL
		)`,
			`CREATE TABLE api_keys (
			id         TEXT PRIMARY KEY,
			agent_id   TEXT NOT NULL REFERENCES agents (id),
			hash       {{blob}} NOT NULL UNIQUE,
			scopes     TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			revoked_at BIGINT
		)`,
			`CREATE INDEX api_keys_agent ON api_keys (agent_id)`,
			`CREATE TABLE wallets (
			chain_id   BIGINT NOT NULL CHECK (chain_id > 0),
			address    TEXT NOT NULL,
			agent_id   TEXT NOT NULL REFERENCES agents (id),
			created_at BIGINT NOT NULL,
			PRIMARY KEY (chain_id, address)
		)`,
			`CREATE INDEX wallets_agent ON wallets (agent_id)`,
			`CREATE TABLE policy_versions (
			agent_id   TEXT NOT NULL REFERENCES agents (id),
			version    BIGINT NOT NULL CHECK (version > 0),
			document   TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			actor      TEXT NOT NULL,
			PRIMARY KEY (agent_id, version)
		)`,
			`CREATE TABLE transactions (
			id             TEXT PRIMARY KEY,
			request_hash   TEXT NOT NULL UNIQUE,
			agent_id       TEXT NOT NULL REFERENCES agents (id),
			escrow         TEXT NOT NULL,
			chain_id       BIGINT NOT NULL,
			prompt         TEXT NOT NULL,
			description    TEXT NOT NULL,
			proposed_tx    TEXT NOT NULL,
			metadata       TEXT,
			context_logs   TEXT,
			trace_id       TEXT NOT NULL DEFAULT '',
			status         TEXT NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'REJECTED')),
			verdict        TEXT,
			policy_version BIGINT,
			created_at     BIGINT NOT NULL,
			updated_at     BIGINT NOT NULL,
			CHECK ((status = 'PENDING') = (verdict IS NULL))
		)`,
			`CREATE UNIQUE INDEX transactions_agent_trace ON transactions (agent_id, trace_id) WHERE trace_id <> ''`,
			`CREATE INDEX transactions_pending ON transactions (created_at, id) WHERE status = 'PENDING'`,
		}},
		// An agent's transactions, newest first (AgentTransactions, the admin API's list).
		{Version: 2, Statements: []string{
			`CREATE INDEX transactions_agent_created ON transactions (agent_id, created_at, id)`,
		}},
		// Spend windows (docs/spend-windows.md): one row per approved transaction and scope
		// ('' for the agent's overall windows, else an asset), reserved with the verdict.
		{Version: 3, Statements: []string{
			`CREATE TABLE spend_reservations (
			request_hash TEXT NOT NULL REFERENCES transactions (request_hash),
			scope        TEXT NOT NULL,
			agent_id     TEXT NOT NULL REFERENCES agents (id),
			usd_micros   BIGINT NOT NULL CHECK (usd_micros >= 0),
			state        TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
			created_at   BIGINT NOT NULL,
			expires_at   BIGINT NOT NULL,
			updated_at   BIGINT NOT NULL,
			PRIMARY KEY (request_hash, scope)
		)`,
			`CREATE INDEX spend_reservations_window ON spend_reservations (agent_id, scope, created_at)`,
		}},
		// A key's last use (docs/console.md#agents), written by KeyUsed.
		{Version: 4, Statements: []string{
			`ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT`,
		}},
		// The search of the console's Verdicts page (SearchTransactions): the verdict's
		// reason code in a column of its own, filled for the verdicts stored before, and an
		// index for each filter, so that every search reads only the rows it shows. An
		// agent alone is transactions_agent_created.
		{Version: 5, Statements: []string{
			`ALTER TABLE transactions ADD COLUMN reason_code TEXT`,
			`UPDATE transactions SET reason_code = ` + reasonOf("verdict") + ` WHERE verdict IS NOT NULL`,
			`CREATE INDEX transactions_created ON transactions (created_at, id)`,
			`CREATE INDEX transactions_status ON transactions (status, created_at, id)`,
			`CREATE INDEX transactions_agent_status ON transactions (agent_id, status, created_at, id)`,
			`CREATE INDEX transactions_reason ON transactions (reason_code, created_at, id) WHERE reason_code IS NOT NULL`,
			`CREATE INDEX transactions_agent_reason ON transactions (agent_id, reason_code, created_at, id) WHERE reason_code IS NOT NULL`,
		}},
	},
}

// reasonOf is the SQL of the reasonCode member of the verdict document v (a TEXT column
// or parameter), or NULL without one. {{reason:...}} is replaced per engine by
// dialectSchema: SQLite's json_extract, PostgreSQL's ->> on json (not jsonb, which would
// refuse a \u0000 escape elsewhere in the document).
func reasonOf(v string) string { return "{{reason:" + v + "}}" }

// reasonSQL are the engines' forms of reasonOf, with %s the document.
var reasonSQL = map[string]string{
	sqldb.SQLite.Name:   "json_extract(%s, '$.reasonCode')",
	sqldb.Postgres.Name: "(CAST(%s AS TEXT)::json ->> 'reasonCode')",
}

// reasonPattern finds reasonOf's placeholders.
var reasonPattern = regexp.MustCompile(`\{\{reason:[^}]+\}\}`)

// dialectSQL is q with reasonOf's placeholders in the engine's form.
func dialectSQL(dialect, q string) string {
	return reasonPattern.ReplaceAllStringFunc(q, func(m string) string {
		return fmt.Sprintf(reasonSQL[dialect], strings.TrimSuffix(strings.TrimPrefix(m, "{{reason:"), "}}"))
	})
}

// dialectSchema is schema for one engine.
func dialectSchema(dialect string) sqldb.Schema {
	out := schema
	out.Migrations = make([]sqldb.Migration, len(schema.Migrations))
	for i, m := range schema.Migrations {
		out.Migrations[i] = sqldb.Migration{Version: m.Version, Statements: make([]string, len(m.Statements))}
		for j, q := range m.Statements {
			out.Migrations[i].Statements[j] = dialectSQL(dialect, q)
		}
	}
	return out
}
