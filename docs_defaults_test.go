package x402gate

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/console"
	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
	"github.com/x402gate/x402gate/x402"
)

// docClaim is a sentence of a page of docs/ that states a default, a limit or a name the
// code holds: says is the text the page must contain, written from the code's value, so a
// changed default fails here until the page says the new one.
type docClaim struct {
	page string
	says string
}

// docClaims are the defaults, limits and names docs/ (and README.md) state, each read from
// the code.
var docClaims = []docClaim{
	// docs/verdict-api.md
	{"docs/verdict-api.md", fmt.Sprintf("a bounded queue (`Queue`, default %d) for a pool of `Workers` (default %d)", verdictserver.DefaultQueue, verdictserver.DefaultWorkers)},
	{"docs/verdict-api.md", fmt.Sprintf("then every `SweepInterval` (default %s)", span(verdictserver.DefaultSweepInterval))},
	{"docs/verdict-api.md", fmt.Sprintf("| per client IP | the connection's address (in Caddy: the client IP after its trusted proxies) | %s |", rateComma(verdictserver.DefaultPerIP))},
	{"docs/verdict-api.md", fmt.Sprintf("| per key | the key id (`admin` for the admin key) | %s |", rateComma(verdictserver.DefaultPerKey))},
	{"docs/verdict-api.md", fmt.Sprintf("`limit` 1 to %d (default %d)", store.MaxPage, verdictserver.DefaultTransactionPage)},
	{"docs/verdict-api.md", fmt.Sprintf("at most %d KiB (`verdictserver.DefaultMaxBodyBytes`; larger is 413 `body_too_large`)", verdictserver.DefaultMaxBodyBytes>>10)},

	// docs/replay.md
	{"docs/replay.md", fmt.Sprintf("`last` defaults to\n   `verdictserver.DefaultReplayLast` (%d) and is at most `verdictserver.MaxReplayLast`\n   (%d)", verdictserver.DefaultReplayLast, verdictserver.MaxReplayLast)},
	{"docs/replay.md", fmt.Sprintf("`last` is not an integer from 1 to %d", verdictserver.MaxReplayLast)},

	// docs/console.md
	{"docs/console.md", fmt.Sprintf("how long a session lasts after sign-in, 1m to %s | %s (`console.DefaultSessionTTL`)", caddyDuration(console.MaxSessionTTL), caddyDuration(console.DefaultSessionTTL))},
	{"docs/console.md", fmt.Sprintf("use at most once per %s (`verdictserver.KeyUseInterval`)", caddyDuration(verdictserver.KeyUseInterval))},
	{"docs/console.md", fmt.Sprintf("(1 to %s; the form starts at `verdictserver.DefaultReplayLast`)", thousands(verdictserver.MaxReplayLast))},

	// docs/reliability.md#resource-limits
	{"docs/reliability.md", fmt.Sprintf("| %d KiB of base64 (%d KiB of JSON) | constant (`x402.MaxHeaderBytes`) |", x402.MaxHeaderBytes>>10, x402.MaxPayloadJSONBytes>>10)},
	{"docs/reliability.md", fmt.Sprintf("| %d KiB, else 413 | constant (`httpapi.DefaultMaxBodyBytes`) |", httpapi.DefaultMaxBodyBytes>>10)},
	{"docs/reliability.md", fmt.Sprintf("| verdict API body | %d KiB (prompt 8 KiB, calldata 128 KiB decoded), else 413 | constant (`verdictserver.DefaultMaxBodyBytes`) |", verdictserver.DefaultMaxBodyBytes>>10)},
	{"docs/reliability.md", fmt.Sprintf("| policy document | %d MiB | constant |", policy.MaxDocumentBytes>>20)},
	{"docs/reliability.md", fmt.Sprintf("| verdict service answers | %d MiB, JSON nesting depth 32, no redirects, `application/json` only | constant (`verdictclient.MaxResponseBytes`) |", verdictclient.MaxResponseBytes>>20)},
	{"docs/reliability.md", fmt.Sprintf("| remote facilitator answers | %d MiB, no redirects | constant |", httpapi.DefaultMaxResponseBytes>>20)},
	{"docs/reliability.md", fmt.Sprintf("| one verdict service request | %s | constant (`verdictclient.DefaultTimeout`) |", span(verdictclient.DefaultTimeout))},
	{"docs/reliability.md", fmt.Sprintf("`verdict_poll` (%s, %d attempts, %s max delay)", span(verdictclient.DefaultIntervalMs*time.Millisecond), verdictclient.DefaultMaxAttempts, span(verdictclient.DefaultMaxDelay))},
	{"docs/reliability.md", fmt.Sprintf("| a gate's `/verify` | %s, or the verdict poll bound", span(gate.DefaultVerifyTimeout))},
	{"docs/reliability.md", fmt.Sprintf("| a gate's `/settle` (receipt wait included) | %g s, not cancelled when the client leaves | constant (`gate.DefaultSettleTimeout`) |", gate.DefaultSettleTimeout.Seconds())},
	{"docs/reliability.md", fmt.Sprintf("| the receipt wait of a settle | %s, then `settlement_pending` | `receipt_timeout` (%[1]s) |", span(facilitator.DefaultReceiptTimeout))},
	{"docs/reliability.md", fmt.Sprintf("| %s, whatever the caller's deadline | `facilitator.Config.RPCTimeout` (%[1]s; fixed in Caddy) |", span(facilitator.DefaultRPCTimeout))},
	{"docs/reliability.md", fmt.Sprintf("| pricing service | %s | constant |", span(gate.DefaultPricingTimeout))},
	{"docs/reliability.md", fmt.Sprintf("| pricing service | %s | constant |", span(httpapi.DefaultPricingTimeout))},
	{"docs/reliability.md", fmt.Sprintf("| remote facilitator | %g s (verify), %g s (settle) | constant |", httpapi.DefaultClientTimeout.Seconds(), httpapi.DefaultSettleTimeout.Seconds())},
	{"docs/reliability.md", fmt.Sprintf("| price feeds and the sanctions oracle (verdict app) | %s per read | constant |", span(prices.DefaultDeadline))},
	{"docs/reliability.md", fmt.Sprintf("| price feeds and the sanctions oracle (verdict app) | %s per read | constant |", span(sanctions.DefaultOracleDeadline))},
	{"docs/reliability.md", fmt.Sprintf("| %s each (LRU), entries live at most %s; a full claim table refuses a settle | `store memory <n>` (%[1]s) |", thousands(approval.DefaultMemoryStoreSize), span(approval.DefaultMaxTTL))},
	{"docs/reliability.md", fmt.Sprintf("| guardian markers | %d unused per payer | constant (`facilitator.DefaultMaxMarkersPerPayer`) |", facilitator.DefaultMaxMarkersPerPayer)},
	{"docs/reliability.md", fmt.Sprintf("| %s records, each at most 24 h; a full ledger refuses a new payment (503) | constant (`payledger.DefaultMemoryEntries`) |", thousands(payledger.DefaultMemoryEntries))},
	{"docs/reliability.md", fmt.Sprintf("| in-process pass book (sign-in-with-x passes and used nonces) | %s each; a full book refuses a new entry | constant (`gate.DefaultMemoryPassEntries`) |", thousands(gate.DefaultMemoryPassEntries))},
	{"docs/reliability.md", fmt.Sprintf("| verdict requests per payer | `verdict_rate` (%g/s, burst %d)", facilitator.DefaultVerdictRate, facilitator.DefaultVerdictBurst)},
	{"docs/reliability.md", fmt.Sprintf("| verdict API rate limits | per key %s, per IP %s;", rate(verdictserver.DefaultPerKey), rate(verdictserver.DefaultPerIP))},
	{"docs/reliability.md", fmt.Sprintf("| verdict evaluations | %d workers", verdictserver.DefaultWorkers)},
	{"docs/reliability.md", fmt.Sprintf("| `workers` (%d 1024) |", verdictserver.DefaultWorkers)},
	{"docs/reliability.md", fmt.Sprintf("the default is now %d,", verdictserver.DefaultWorkers)},
	{"docs/reliability.md", fmt.Sprintf("| database connections | %d open, %d idle (closed after %d idle minutes) per SQLite or PostgreSQL handle; the verdict store keeps all of its open connections idle, %d on PostgreSQL", sqldb.MaxOpenConns, sqldb.MaxIdleConns, int(sqldb.ConnMaxIdleTime.Minutes()), sqldb.MaxOpenConns)},
	{"docs/reliability.md", fmt.Sprintf("(a third of the %s default)", span(gate.DefaultRetryLease))},

	// docs/gate.md
	{"docs/gate.md", fmt.Sprintf("`MaxTimeoutSeconds` (%d)", gate.DefaultMaxTimeoutSeconds)},
	{"docs/gate.md", fmt.Sprintf("up to %d MiB of body (`gate.MaxAuthorizedAnswer`)", gate.MaxAuthorizedAnswer>>20)},
	{"docs/gate.md", fmt.Sprintf("`RetryConfig.Lease` (default %s, at least %s)", span(gate.DefaultRetryLease), span(gate.MinRetryLease))},
	{"docs/gate.md", fmt.Sprintf("`payledger.Memory`, at most %s records", thousands(payledger.DefaultMemoryEntries))},
	{"docs/gate.md", fmt.Sprintf("at most `retry_max` (%d) times", gate.DefaultRetryMax)},
	{"docs/gate.md", fmt.Sprintf("Keys are at least %d bytes", gate.MinPassKeyBytes)},

	// docs/facilitator.md
	{"docs/facilitator.md", fmt.Sprintf("`ApprovalTTL` (default %s)", span(facilitator.DefaultApprovalTTL))},
	{"docs/facilitator.md", fmt.Sprintf("**Memory**: one process; %s approvals and claims", thousands(approval.DefaultMemoryStoreSize))},
	{"docs/facilitator.md", fmt.Sprintf("keys under `%s`", approval.DefaultRedisKeyPrefix)},
	{"docs/facilitator.md", fmt.Sprintf("at most `MaxMarkersPerPayer` (%d) markers", facilitator.DefaultMaxMarkersPerPayer)},
	{"docs/facilitator.md", fmt.Sprintf("with fewer than `max_pending_per_signer` (default %d) in flight", facilitator.DefaultMaxPendingPerSigner)},
	{"docs/facilitator.md", fmt.Sprintf("every `balance_check_interval` (default %s)", span(facilitator.DefaultBalanceCheckInterval))},
	{"docs/facilitator.md", fmt.Sprintf("`min_gas_balance` (wei; default 10^%d,", len(facilitator.DefaultMinGasBalance.String())-1)},
	{"docs/facilitator.md", fmt.Sprintf("(`verdict_rate <per second> <burst>`, default %g/s and %d)", facilitator.DefaultVerdictRate, facilitator.DefaultVerdictBurst)},
	{"docs/facilitator.md", fmt.Sprintf("`ApprovalTTL` (%s), `ReceiptTimeout` (%s), verdict polling (%s, %d attempts, %s max delay), `StuckAfter`, `TakeoverAfter` (%s,", span(facilitator.DefaultApprovalTTL), span(facilitator.DefaultReceiptTimeout), span(verdictclient.DefaultIntervalMs*time.Millisecond), verdictclient.DefaultMaxAttempts, span(verdictclient.DefaultMaxDelay), span(facilitator.DefaultTakeoverAfter))},
	{"docs/facilitator.md", fmt.Sprintf("unchanged for `TakeoverAfter` (%s; negative: never)", span(facilitator.DefaultTakeoverAfter))},

	// docs/caddy.md
	{"docs/caddy.md", fmt.Sprintf("rate_limit key %g %d # per API key: per second, burst (the defaults)", verdictserver.DefaultPerKey.Rate, verdictserver.DefaultPerKey.Burst)},
	{"docs/caddy.md", fmt.Sprintf("rate_limit ip %g %d # per client IP (the defaults)", verdictserver.DefaultPerIP.Rate, verdictserver.DefaultPerIP.Burst)},
	{"docs/caddy.md", fmt.Sprintf("a round older than its max age (default %s)", caddyDuration(prices.DefaultMaxAge))},
	{"docs/caddy.md", fmt.Sprintf("every `reconcile_interval` (default %s)", span(facilitator.DefaultReconcileInterval))},
	{"docs/caddy.md", fmt.Sprintf("each expanding to at least %d bytes", gate.MinPassKeyBytes)},

	// docs/policy.md
	{"docs/policy.md", fmt.Sprintf("no older than the TTL (default %s, `engine.Config.SanctionsTTL`)", span(engine.DefaultSanctionsTTL))},
	{"docs/policy.md", fmt.Sprintf("under one deadline (default %s); each answer is cached for %d minutes", span(sanctions.DefaultOracleDeadline), int(sanctions.DefaultOracleTTL.Minutes()))},
	{"docs/policy.md", fmt.Sprintf("reused for at most their TTL (%d minutes)", int(sanctions.DefaultOracleTTL.Minutes()))},
	{"docs/policy.md", fmt.Sprintf("older than the feed's max age (default %s;", span(prices.DefaultMaxAge))},

	// docs/protocol.md
	{"docs/protocol.md", fmt.Sprintf("defaults to version `%s`, %d decimals, symbol `%s`", x402.DefaultAssetVersion, x402.DefaultAssetDecimals, x402.DefaultAssetSymbol)},
	{"docs/protocol.md", fmt.Sprintf("| any payment header (base64) | %d KiB |", x402.MaxHeaderBytes>>10)},
	{"docs/protocol.md", fmt.Sprintf("| payload JSON | %d KiB (decoded size of a full header) |", x402.MaxPayloadJSONBytes>>10)},
	{"docs/protocol.md", fmt.Sprintf("| one requirement's JSON | %d KiB |", x402.MaxRequirementsJSONBytes>>10)},
	{"docs/protocol.md", fmt.Sprintf("| integer strings | %d digits (largest uint256) |", x402.MaxIntegerDigits)},
	{"docs/protocol.md", fmt.Sprintf("| authorization `value` | %d digits (v1 SDK bound) |", x402.MaxValueDigits)},
	{"docs/protocol.md", fmt.Sprintf("| amount text / decimals | 100 characters / %d decimals |", x402.MaxDecimals)},

	// README.md: the Caddyfile reference and the packages' defaults
	{"README.md", fmt.Sprintf("store memory [<max entries>] | redis <url> # default memory (%d entries)", approval.DefaultMemoryStoreSize)},
	{"README.md", fmt.Sprintf("approval_ttl <duration> # default %s", caddyDuration(facilitator.DefaultApprovalTTL))},
	{"README.md", fmt.Sprintf("receipt_timeout <duration> # default %s", caddyDuration(facilitator.DefaultReceiptTimeout))},
	{"README.md", fmt.Sprintf("verdict_poll <interval> <max attempts> [<max delay>] # default %s %d %s", caddyDuration(verdictclient.DefaultIntervalMs*time.Millisecond), verdictclient.DefaultMaxAttempts, caddyDuration(verdictclient.DefaultMaxDelay))},
	{"README.md", fmt.Sprintf("verdict_rate <per second> <burst> # default %g %d", facilitator.DefaultVerdictRate, facilitator.DefaultVerdictBurst)},
	{"README.md", fmt.Sprintf("reconcile_interval <duration> # default %s", caddyDuration(facilitator.DefaultReconcileInterval))},
	{"README.md", fmt.Sprintf("max_timeout <duration> # default %ds", gate.DefaultMaxTimeoutSeconds)},
	{"README.md", fmt.Sprintf("retry_max <n> # paid-but-upstream-failed retries, default %d", gate.DefaultRetryMax)},
	{"README.md", fmt.Sprintf("at most `retry.max` times (default %d;", gate.DefaultRetryMax)},
	{"README.md", fmt.Sprintf("`ApprovalTTL` (default %s)", span(facilitator.DefaultApprovalTTL))},
	{"README.md", fmt.Sprintf("every `reconcile_interval` (default %s)", span(facilitator.DefaultReconcileInterval))},
	{"README.md", fmt.Sprintf("`Config.StuckAfter` (default %s;", span(facilitator.DefaultStuckAfter))},
	{"README.md", fmt.Sprintf("(default nil: %dx the settlement's first fee cap)", facilitator.DefaultMaxFeeFactor)},
	{"README.md", fmt.Sprintf("(`Timeout`, default %s)", span(verdictclient.DefaultTimeout))},
	{"README.md", fmt.Sprintf("`IntervalMs` is %d and `MaxAttempts` is %d. `MaxDelay` is %s;", verdictclient.DefaultIntervalMs, verdictclient.DefaultMaxAttempts, span(verdictclient.DefaultMaxDelay))},
	{"README.md", fmt.Sprintf("the delays are %s s.", pollDelays())},

	// docs/verdict.md
	{"docs/verdict.md", fmt.Sprintf("then %s s with jitter, %d attempts by default", pollDelays(), verdictclient.DefaultMaxAttempts)},
}

// TestDocsStateTheCodesDefaults: every default, limit and name in docClaims is what its
// page of docs/ says.
func TestDocsStateTheCodesDefaults(t *testing.T) {
	pages := map[string]string{}
	for _, c := range docClaims {
		text, ok := pages[c.page]
		if !ok {
			b, err := os.ReadFile(c.page)
			if err != nil {
				t.Fatal(err)
			}
			text = strings.Join(strings.Fields(string(b)), " ")
			pages[c.page] = text
		}
		if says := strings.Join(strings.Fields(c.says), " "); !strings.Contains(text, says) {
			t.Errorf("%s does not say %q (the code's value)", c.page, says)
		}
	}
}

// span writes d as the docs do: "30 s", "5 min", "24 h".
func span(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	default:
		return fmt.Sprintf("%g s", d.Seconds())
	}
}

// caddyDuration writes d as a Caddyfile does: "1h", "20m", "30s".
func caddyDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// thousands writes n with commas: 100,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// rate writes r as "20/s burst 40"; rateComma as "20/s, burst 40".
func rate(r verdictserver.RateConfig) string { return fmt.Sprintf("%g/s burst %d", r.Rate, r.Burst) }

func rateComma(r verdictserver.RateConfig) string {
	return fmt.Sprintf("%g/s, burst %d", r.Rate, r.Burst)
}

// pollDelays is the client's first five delays between polls in seconds, without jitter:
// "1, 2, 4, 5, 5…".
func pollDelays() string {
	var ds []string
	d := verdictclient.DefaultIntervalMs * time.Millisecond
	for range 5 {
		ds = append(ds, fmt.Sprintf("%g", min(d, verdictclient.DefaultMaxDelay).Seconds()))
		d *= 2
	}
	return strings.Join(ds, ", ") + "…"
}
