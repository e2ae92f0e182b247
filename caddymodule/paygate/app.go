// Package paygate is the Caddy runtime of the x402 payment gate: the x402 app (bundled
// facilitators), the http.handlers.x402 gate and the http.handlers.x402_facilitator API
// handler, their Caddyfile, and their metrics. It parses configuration, provisions and calls
// into the plain packages gate, facilitator and verdictclient; it holds no payment logic.
package paygate

import (
	"errors"
	"fmt"
	"sort"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
)

func init() {
	caddy.RegisterModule(App{})
}

// DefaultFacilitatorName is the name of a facilitator declared without one, and the one a
// handler uses when it names none.
const DefaultFacilitatorName = "default"

// App is the x402 app: the bundled facilitators that handlers refer to by name. Each
// facilitator's engine, approval store, journal and verdict client live in a package-level
// caddy.UsagePool keyed by name and configuration fingerprint, so a config reload that
// keeps a facilitator's configuration reuses them: approvals in flight survive, and the
// signer's nonce manager is never duplicated.
type App struct {
	// Facilitators are the bundled facilitators by name. Default: none.
	Facilitators map[string]*facilitator.Config `json:"facilitators,omitempty"`

	bundles map[string]*bundle
	keys    []string // pool keys loaded by this instance, deleted in Cleanup
	log     *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "x402",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision resolves every facilitator's secrets and opens (or reuses across a reload)
// its engine, stores and journal. It contacts no chain: Start brings the networks up.
// Under `caddy validate` it checks each network's chain id (checkChainIDs).
func (a *App) Provision(ctx caddy.Context) error {
	a.log = ctx.Logger()
	a.bundles = map[string]*bundle{}
	if err := registerMetrics(ctx); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	names := make([]string, 0, len(a.Facilitators))
	for name := range a.Facilitators {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fc := a.Facilitators[name]
		if fc == nil {
			return fmt.Errorf("facilitator %q: empty configuration", name)
		}
		rc, err := expand(name, fc)
		if err != nil {
			return fmt.Errorf("facilitator %q: %w", name, err)
		}
		key, err := poolKey(name, rc)
		if err != nil {
			return fmt.Errorf("facilitator %q: %w", name, err)
		}
		v, loaded, err := bundles.LoadOrNew(key, func() (caddy.Destructor, error) {
			return openBundle(name, rc, a.log.With(zap.String("facilitator", name)))
		})
		if err != nil {
			return fmt.Errorf("facilitator %q: %w", name, err)
		}
		a.keys = append(a.keys, key)
		b := v.(*bundle)
		a.bundles[name] = b
		a.log.Info("x402 facilitator open",
			zap.String("facilitator", name),
			zap.String("signer", b.engine.Address().Hex()),
			zap.Bool("reused", loaded))
	}
	return nil
}

// Validate checks every facilitator's configuration (validateFacilitator), as the
// Caddyfile adapter does.
func (a *App) Validate() error {
	for name, fc := range a.Facilitators {
		if fc == nil {
			return fmt.Errorf("facilitator %q: empty configuration", name)
		}
		if err := validateFacilitator(fc); err != nil {
			return fmt.Errorf("facilitator %q: %w", name, err)
		}
	}
	return nil
}

// Start implements caddy.App: it brings each facilitator's networks up in the background
// and starts its periodic reconcile, once per facilitator however many configs share it.
// It returns at once: a route whose network is not ready answers 503
// network_unavailable meanwhile (docs/facilitator.md#start-up).
func (a *App) Start() error {
	for _, b := range a.bundles {
		b.start()
	}
	return nil
}

// Stop implements caddy.App; the shared state is released in Cleanup.
func (a *App) Stop() error { return nil }

// Cleanup releases this config's hold on the shared facilitators. The last config that
// holds one closes its engine, stores and journal.
func (a *App) Cleanup() error {
	var errs []error
	for _, k := range a.keys {
		if _, err := bundles.Delete(k); err != nil {
			errs = append(errs, err)
		}
	}
	a.keys = nil
	return errors.Join(errs...)
}

// bundle returns the named facilitator.
func (a *App) bundle(name string) (*bundle, error) {
	if name == "" {
		name = DefaultFacilitatorName
	}
	b, ok := a.bundles[name]
	if !ok {
		return nil, fmt.Errorf("no bundled facilitator named %q: declare it in the global option `x402 { facilitator %s { ... } }`", name, name)
	}
	return b, nil
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
