package caddyconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/internal/sqldb"
)

// ErrNotPlaceholder refuses a secret written into the config itself: it would land in the
// adapted JSON, the admin API (GET /config/) and autosave.json. Secrets are {env.*} or
// {file.*} placeholders, expanded at provision (docs/caddy.md#secrets).
var ErrNotPlaceholder = errors.New("must be an {env.*} or {file.*} placeholder, never the secret itself")

// PlaceholderOnly is ErrNotPlaceholder for a value v that is set and not a placeholder.
func PlaceholderOnly(v string) error {
	if v = strings.TrimSpace(v); v != "" && !redact.IsPlaceholder(v) {
		return ErrNotPlaceholder
	}
	return nil
}

// ResolveSecret expands {env.*} and {file.*} placeholders. A file's trailing newline is
// not part of a secret.
func ResolveSecret(repl *caddy.Replacer, s string) string {
	return strings.TrimSpace(repl.ReplaceKnown(s, ""))
}

// placeholderRef matches the {env.NAME} and {file.PATH} placeholders of a value.
var placeholderRef = regexp.MustCompile(`\{(env|file)\.([^{}]+)\}`)

// Expanded refuses a value that was given (raw) but expanded to nothing, naming each
// placeholder of raw and why it gave nothing: an environment variable that is not set or is
// empty, a file that does not exist, cannot be read or is empty. A placeholder's text is a
// name or a path, never the secret; a value without placeholders is not quoted.
func Expanded(option, raw, value string) error {
	if value != "" || raw == "" {
		return nil
	}
	var causes []string
	for _, m := range placeholderRef.FindAllStringSubmatch(raw, -1) {
		causes = append(causes, placeholderCause(m[1], m[2]))
	}
	if len(causes) == 0 {
		return fmt.Errorf("%s: is empty", option)
	}
	return fmt.Errorf("%s: is empty: %s", option, strings.Join(causes, "; "))
}

// placeholderCause says why the placeholder {kind.arg} expands to nothing.
func placeholderCause(kind, arg string) string {
	ref := "{" + kind + "." + arg + "}"
	if kind == "env" {
		if _, ok := os.LookupEnv(arg); !ok {
			return ref + ": the environment variable " + arg + " is not set"
		}
		return ref + ": the environment variable " + arg + " is empty"
	}
	fi, err := os.Stat(arg)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ref + ": the file " + arg + " does not exist"
	case err != nil:
		return ref + ": the file " + arg + " cannot be read (" + errors.Unwrap(err).Error() + ")"
	case fi.IsDir():
		return ref + ": " + arg + " is a directory"
	}
	f, err := os.Open(arg)
	if err != nil {
		return ref + ": the file " + arg + " cannot be read (" + errors.Unwrap(err).Error() + ")"
	}
	f.Close()
	return ref + ": the file " + arg + " is empty"
}

// DatabaseConfig selects a SQL database: an embedded SQLite file, or PostgreSQL for several
// instances. The facilitator's settlement journal and the verdict app's store use it; its DSN
// is an {env.*} or {file.*} placeholder.
type DatabaseConfig = sqldb.Config

// ParseDatabase reads `<what> sqlite [<path>] | postgres <dsn>`: the settlement journal of
// a facilitator, or the verdict app's store.
func ParseDatabase(d *caddyfile.Dispenser, what string) (*DatabaseConfig, error) {
	args, err := KindArgs(d, what, sqldb.SQLite.Name, sqldb.Postgres.Name)
	if err != nil {
		return nil, err
	}
	db := &DatabaseConfig{Type: args[0]}
	switch {
	case args[0] == sqldb.Postgres.Name:
		db.DSN = args[1]
	case len(args) == 2:
		db.Path = args[1]
	}
	return db, nil
}

// KindArgs reads the arguments of a `<what> <local> [<arg>] | <remote> <arg>` option (store,
// journal): the kind, then an argument that the local kind may leave out and the remote
// kind requires. args[0] is the kind, args[1] the argument when there is one.
func KindArgs(d *caddyfile.Dispenser, what, local, remote string) ([]string, error) {
	args := d.RemainingArgs()
	switch {
	case len(args) == 0:
		return nil, ArgErr(d, nil)
	case args[0] == local && len(args) <= 2, args[0] == remote && len(args) == 2:
		return args, nil
	case args[0] == local || args[0] == remote:
		return nil, ArgErr(d, nil)
	case !redact.PlainWord(args[0]):
		// a URL or DSN without its type: never echo it, it may hold a password
		// (docs/caddy.md#secrets)
		return nil, d.Errf("%s wants a type first, %s or %s (then its path, URL or DSN)", what, local, remote)
	default:
		return nil, d.Errf("unknown %s %q (want %s or %s)", what, args[0], local, remote)
	}
}
