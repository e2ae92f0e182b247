package verdictapp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/console"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
)

// consoleSessions are the console's sessions in this process: they outlive a config
// reload, which rebuilds the console (docs/console.md#sessions).
var consoleSessions = console.NewSessions()

// parseConsole reads the console block of verdict_api (docs/console.md#configuration):
//
//	console {
//		explorer <url with {tx}>
//		journal sqlite [<path>] | postgres <dsn placeholder>
//		session_ttl <duration>
//	}
func parseConsole(d *caddyfile.Dispenser) (*console.Config, error) {
	if d.NextArg() {
		return nil, caddyconf.ArgErr(d, nil)
	}
	c := new(console.Config)
	lines := caddyconf.OptionTokens{"": d.Token()}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		lines.Set(opt, d)
		switch opt {
		case "explorer":
			if err := caddyconf.OneArg(d, &c.Explorer); err != nil {
				return nil, err
			}
		case "journal":
			j, err := caddyconf.ParseDatabase(d, "journal")
			if err != nil {
				return nil, err
			}
			c.Journal = j
		case "session_ttl":
			var v string
			if err := caddyconf.OneArg(d, &v); err != nil {
				return nil, err
			}
			ttl, err := caddy.ParseDuration(v)
			if err != nil {
				return nil, d.Errf("session_ttl %q is not a duration", v)
			}
			c.SessionTTL = engine.Duration(ttl)
		default:
			return nil, d.Errf("unrecognized console option %q", opt)
		}
	}
	if err := validateConsole(c); err != nil {
		var ce *verdictserver.ConfigError
		if errors.As(err, &ce) {
			return nil, lines.ErrAt(d, ce.Option, err)
		}
		return nil, d.WrapErr(err)
	}
	return c, nil
}

// validateConsole checks the console's config: its own rules, and a postgres journal's DSN
// given as a placeholder (docs/caddy.md#secrets).
func validateConsole(c *console.Config) error {
	if j := c.Journal; j != nil && j.Type == sqldb.Postgres.Name {
		if err := caddyconf.PlaceholderOnly(j.DSN); err != nil {
			return &verdictserver.ConfigError{Option: "journal", Err: err}
		}
	}
	return c.Validate()
}

// provisionConsole builds the console of v on the verdict service svc.
func (v *VerdictAPI) provisionConsole(svc *verdictService, log *zap.Logger) error {
	if err := validateConsole(v.Console); err != nil {
		return fmt.Errorf("verdict_api console: %w", err)
	}
	deps := console.Deps{Service: svc.server, Sessions: consoleSessions, Logger: log}
	if j := v.Console.Journal; j != nil {
		cfg := *j
		repl := caddy.NewReplacer()
		if cfg.Type == sqldb.Postgres.Name {
			cfg.DSN = caddyconf.ResolveSecret(repl, cfg.DSN)
		} else if cfg.Path = repl.ReplaceKnown(cfg.Path, ""); cfg.Path == "" {
			cfg.Path = filepath.Join(caddy.AppDataDir(), "x402", "journal.db") // the bundled facilitator's default
		}
		v.journal = &lazyJournal{cfg: cfg}
		deps.Journal = v.journal
	}
	c, err := console.New(*v.Console, deps)
	if err != nil {
		return fmt.Errorf("verdict_api console: %w", err)
	}
	v.console = c
	return nil
}

// lazyJournal opens the settlement journal on the Payments page's first read, so that the
// console starts whether or not the facilitator has written its journal yet. A SQLite
// journal that does not exist is not created: the page says it is unreachable.
type lazyJournal struct {
	cfg sqldb.Config // expanded: the DSN may hold a password; never logged
	mu  sync.Mutex
	db  *journal.DB
}

// errNoJournal is the Payments page's answer while the journal cannot be opened.
var errNoJournal = errors.New("the settlement journal is not reachable")

func (l *lazyJournal) open(ctx context.Context) (*journal.DB, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.db != nil {
		return l.db, nil
	}
	var err error
	if l.cfg.Type == sqldb.Postgres.Name {
		l.db, err = journal.OpenPostgres(ctx, l.cfg.DSN)
	} else if _, serr := os.Stat(l.cfg.Path); errors.Is(serr, fs.ErrNotExist) {
		return nil, errNoJournal
	} else {
		l.db, err = journal.OpenSQLite(ctx, l.cfg.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoJournal, err)
	}
	return l.db, nil
}

// Recent implements console.Journal.
func (l *lazyJournal) Recent(ctx context.Context, limit int) ([]journal.Settlement, error) {
	db, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	return db.Recent(ctx, limit)
}

// Attempts implements console.Journal.
func (l *lazyJournal) Attempts(ctx context.Context, key string) ([]journal.Attempt, error) {
	db, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	return db.Attempts(ctx, key)
}

// Close closes the journal if it was opened.
func (l *lazyJournal) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.db == nil {
		return nil
	}
	err := l.db.Close()
	l.db = nil
	return err
}
