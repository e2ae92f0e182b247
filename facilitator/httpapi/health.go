package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
)

// healthInfoTimeout bounds the HealthInfo callback. The engine answers it from cached
// balances, so this only guards against a stuck implementation.
const healthInfoTimeout = 5 * time.Second

// HealthDetails is what GET /health adds to {"status":"ok"} when detailed health is
// explicitly enabled (docs/facilitator.md#api: network, chain, scheme, asset,
// facilitator address and balances, and the verdict service URL; the JSON names are ours).
// It carries no secret: no RPC URL (which often embeds a provider key), no API key.
// Example:
//
//	{"status":"ok","facilitatorAddress":"0xf39F…","guardianMode":"off",
//	 "verdictServiceUrl":"https://verdict.example",
//	 "networks":[{"network":"eip155:84532","name":"base-sepolia","chainId":84532,"scheme":"exact",
//	   "asset":"0x036C…","balances":{"native":"1000000000000000000","asset":"0"}}]}
type HealthDetails struct {
	// FacilitatorAddress is the address that signs and pays gas for settlements.
	FacilitatorAddress string `json:"facilitatorAddress"`
	// VerdictMode is GUARDIAN_MODE: off, optional or required.
	VerdictMode string `json:"guardianMode,omitempty"`
	// VerdictServiceURL is the verdict service base URL, empty when none is configured.
	VerdictServiceURL string `json:"verdictServiceUrl,omitempty"`
	// Networks lists every chain the facilitator settles on.
	Networks []HealthNetwork `json:"networks"`
}

// HealthNetwork is one chain of HealthDetails.
type HealthNetwork struct {
	// Network is the CAIP-2 id, e.g. "eip155:84532".
	Network string `json:"network"`
	// Name is the v1 name, e.g. "base-sepolia".
	Name string `json:"name"`
	// ChainID is the EVM chain id.
	ChainID uint64 `json:"chainId"`
	// Scheme is the x402 scheme, "exact".
	Scheme string `json:"scheme"`
	// Asset is the EIP-3009 token address (0x-hex).
	Asset string `json:"asset"`
	// Balances are the facilitator account's balances there, read from a cache
	// (docs/facilitator.md#api).
	Balances HealthBalances `json:"balances"`
}

// HealthBalances are the cached balances of the facilitator account, as decimal strings in
// base units; a balance that could not be read is empty.
type HealthBalances struct {
	// Native is the gas token balance in wei.
	Native string `json:"native,omitempty"`
	// Asset is the EIP-3009 token balance in its base units.
	Asset string `json:"asset,omitempty"`
}

// ServiceHealthInfo adapts e.Info to HandlerOptions.HealthInfo. Info answers from the
// engine's balance cache, so a detailed health request reads the chain at most once per
// Config.BalanceCacheTTL.
func ServiceHealthInfo(e *facilitator.Service) func(context.Context) (HealthDetails, error) {
	return func(ctx context.Context) (HealthDetails, error) {
		info := e.Info(ctx)
		d := HealthDetails{
			FacilitatorAddress: info.Address,
			VerdictMode:        info.VerdictMode,
			VerdictServiceURL:  info.VerdictURL,
			Networks:           make([]HealthNetwork, 0, len(info.Networks)),
		}
		for _, n := range info.Networks {
			id, _ := strconv.ParseUint(n.ChainID, 10, 64)
			d.Networks = append(d.Networks, HealthNetwork{
				Network: n.CAIP2, Name: n.Name, ChainID: id, Scheme: n.Scheme, Asset: n.Asset,
				Balances: HealthBalances{Native: n.Balance, Asset: n.AssetBalance},
			})
		}
		return d, nil
	}
}

// healthBody is the JSON of GET /health: {"status":"ok"} and, when detailed health is on,
// the HealthDetails fields flattened beside it.
type healthBody struct {
	Status string `json:"status"`
	*HealthDetails
}

// serveHealth answers GET /health (docs/facilitator.md#api). The default answer is
// {"status":"ok"} and touches nothing else: no RPC, no store, no callback. Detailed health,
// when explicitly enabled, adds HealthInfo's answer; when the callback fails, the answer is
// 503 {"status":"degraded"} with no detail (the error is logged).
func (h *apiHandler) serveHealth(w http.ResponseWriter, r *http.Request) {
	if !h.opts.HealthDetailed || h.opts.HealthInfo == nil {
		writeJSON(w, http.StatusOK, healthBody{Status: "ok"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), healthInfoTimeout)
	defer cancel()
	d, err := h.opts.HealthInfo(ctx)
	if err != nil {
		h.log.Warn("health details unavailable", zap.Error(err))
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "degraded"})
		return
	}
	writeJSON(w, http.StatusOK, healthBody{Status: "ok", HealthDetails: &d})
}
