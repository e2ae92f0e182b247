package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// agentView is one agent on the Agents page: wallets, keys (never a secret) and spend
// windows (docs/console.md#agents).
type agentView struct {
	store.Agent
	Wallets  []store.Wallet
	Keys     []keyView
	Windows  []windowView
	NoPolicy bool
}

// keyView is one key: its id, scopes, creation, last use and revocation.
type keyView struct {
	ID       string
	Scopes   string
	Created  time.Time
	LastUsed *time.Time // nil: never (store.Key.LastUsedAt)
	Revoked  *time.Time
}

// windowView is one spend window in USD.
type windowView struct {
	Period, Asset             string
	Cap, Used, Reserved, Left string
	PolicyVersion             int64
}

// agentsPage lists every agent with its wallets, keys and windows.
func (c *Console) agentsPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	agents, err := c.op.Agents(ctx)
	if err != nil {
		c.failed(w, r, s, "listing agents", err)
		return
	}
	out := make([]agentView, 0, len(agents))
	for _, a := range agents {
		v, err := c.agentView(r, a)
		if err != nil {
			c.failed(w, r, s, "reading agent "+a.ID, err)
			return
		}
		out = append(out, v)
	}
	c.render(w, r, s, http.StatusOK, "agents", "Agents", out)
}

func (c *Console) agentView(r *http.Request, a store.Agent) (agentView, error) {
	ctx := r.Context()
	v := agentView{Agent: a}
	var err error
	if v.Wallets, err = c.op.Wallets(ctx, a.ID); err != nil {
		return v, err
	}
	keys, err := c.op.Keys(ctx, a.ID)
	if err != nil {
		return v, err
	}
	for _, k := range keys {
		v.Keys = append(v.Keys, keyView{ID: k.ID, Scopes: strings.Join(k.Scopes, " "), Created: k.CreatedAt,
			LastUsed: k.LastUsedAt, Revoked: k.RevokedAt})
	}
	ws, err := c.op.Windows(ctx, a.ID, c.now())
	if errors.Is(err, store.ErrNotFound) {
		v.NoPolicy = true
		return v, nil
	} else if err != nil {
		return v, err
	}
	for _, ws := range ws {
		v.Windows = append(v.Windows, windowOf(ws))
	}
	return v, nil
}

func windowOf(w verdictserver.WindowState) windowView {
	asset := w.Asset
	if asset == "" {
		asset = "every action"
	}
	return windowView{Period: w.Period, Asset: asset, Cap: fmt.Sprintf("%.2f", w.CapUSD),
		Used: microUSD(w.Used), Reserved: microUSD(w.Reserved), Left: microUSD(w.Left), PolicyVersion: w.PolicyVersion}
}

// microUSD formats millionths of a USD as USD with cents and the rest.
func microUSD(v int64) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	return fmt.Sprintf("%s%d.%06d", sign, v/1e6, v%1e6)
}
