package engine

import (
	"context"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// sourcesOf maps dataFreshness sources to "asOf status".
func sourcesOf(v *verdict.Verdict) map[string]string {
	out := map[string]string{}
	for _, s := range v.DataFreshness.Sources {
		out[s["name"].(string)] = s["asOf"].(string) + " " + s["status"].(string)
	}
	return out
}

const feedPolicy = `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "limits": {"perTxUsd": 5}}`

// TestPricesFromFeedsOnChain prices payments in tokens the static table does not list from our
// Chainlink-style aggregator on anvil (docs/policy.md#price-feeds): a fresh round prices and
// caps them; a stale round gives per_tx_cap data_unavailable with the feed listed as cached
// and trust medium; the table wins over a feed for an asset it lists.
func TestPricesFromFeedsOnChain(t *testing.T) {
	chain, usdt := testenv.StartChainWithToken(t)
	clk := testenv.NewClock(clock)
	stale := chain.DeployToken(t, "STALE", "1")
	usdtFeed := chain.DeployPriceFeed(t, 8, "USDT / USD")
	usdtFeed.SetRound(t, big.NewInt(2e8), clk.Now().Add(-time.Minute)) // 2 USD, a minute ago
	staleFeed := chain.DeployPriceFeed(t, 8, "STALE / USD")
	staleFeed.SetRound(t, big.NewInt(1e8), clk.Now().Add(-2*time.Hour))
	tableFeed := chain.DeployPriceFeed(t, 8, "USDC / USD")
	tableFeed.SetRound(t, big.NewInt(100e8), clk.Now()) // would make USDC 100 USD
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{84532: chain.Client}, Now: clk.Now},
		prices.Feed{ChainID: 84532, Asset: usdt.Address, Address: usdtFeed.Address},
		prices.Feed{ChainID: 84532, Asset: stale.Address, Address: staleFeed.Address, MaxAge: time.Hour},
		prices.Feed{ChainID: 84532, Asset: usdc, Address: tableFeed.Address},
	)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Config{}, Deps{PriceFeeds: feeds, Now: clk.Now})
	pol := mustPolicy(t, 1, feedPolicy)
	usdtSource := "price-feed:84532:" + usdt.Address.Hex()
	staleSource := "price-feed:84532:" + stale.Address.Hex()
	for _, tc := range []struct {
		name      string
		tx        map[string]any
		outcome   verdict.Outcome
		reason    verdict.ReasonCode
		usd       float64 // -1: null
		sources   map[string]string
		overall   verdict.Freshness
		trust     verdict.TrustLevel
		trustNote string
	}{
		{"a fresh round prices the token: 1.5 tokens at 2 USD", payment(set("asset", usdt.Address.Hex()), set("amount", "1500000")),
			verdict.OutcomeApproved, verdict.ReasonAllowed, 3,
			map[string]string{usdtSource: "2026-11-20T11:59:00Z fresh"}, verdict.FreshnessFresh, verdict.TrustHigh, ""},
		{"the feed's price is held to the cap: 3 tokens at 2 USD > 5", payment(set("asset", usdt.Address.Hex()), set("amount", "3000000")),
			verdict.OutcomeRejected, verdict.ReasonPerTxCapExceeded, 6,
			map[string]string{usdtSource: "2026-11-20T11:59:00Z fresh"}, verdict.FreshnessFresh, verdict.TrustHigh, ""},
		{"a stale round prices nothing: data_unavailable", payment(set("asset", stale.Address.Hex()), set("amount", "1")),
			verdict.OutcomeRejected, verdict.ReasonDataUnavailable, -1,
			map[string]string{staleSource: "2026-11-20T10:00:00Z cached"}, verdict.FreshnessMixed, verdict.TrustMedium, "is stale"},
		{"the static table wins over a feed", payment(set("amount", "2000000")),
			verdict.OutcomeApproved, verdict.ReasonAllowed, 2,
			map[string]string{"prices": "2026-11-20T11:00:00Z fresh"}, verdict.FreshnessFresh, verdict.TrustHigh, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tc.tx, Policy: pol})
			mustBeValid(t, v)
			if v.Outcome != tc.outcome || v.ReasonCode != tc.reason {
				t.Fatalf("%s %s (%s), want %s %s", v.Outcome, v.ReasonCode, v.HumanReason, tc.outcome, tc.reason)
			}
			if tc.usd < 0 && v.USDNotional != nil || tc.usd >= 0 && (v.USDNotional == nil || *v.USDNotional != tc.usd) {
				t.Errorf("usdNotional %v, want %v", v.USDNotional, tc.usd)
			}
			for _, s := range v.Evidence.Sources {
				m := s.(map[string]any)
				switch m["name"] {
				case "sanctions:sdn_advanced.xml":
					if m["format"] != "ofac-sdn-xml" || m["entries"] != 3 {
						t.Errorf("list evidence %v", m)
					}
				case usdtSource:
					if m["feed"] != usdtFeed.Address.Hex() || m["usd"] != "2.00000000" {
						t.Errorf("feed evidence %v", m)
					}
				}
			}
			got := sourcesOf(v)
			if got["sanctions:sdn_advanced.xml"] != "2026-11-20T00:00:00Z fresh" {
				t.Errorf("the sanctions list source is %q", got["sanctions:sdn_advanced.xml"])
			}
			delete(got, "sanctions:sdn_advanced.xml")
			if len(got) != len(tc.sources) {
				t.Errorf("sources %v, want %v", got, tc.sources)
			}
			for k, want := range tc.sources {
				if got[k] != want {
					t.Errorf("source %s = %q, want %q", k, got[k], want)
				}
			}
			if v.DataFreshness.Overall != tc.overall || v.Trust.Level != tc.trust {
				t.Errorf("overall %s, trust %s %v; want %s, %s", v.DataFreshness.Overall, v.Trust.Level, v.Trust.Notes, tc.overall, tc.trust)
			}
			if tc.trustNote != "" && (v.Trust.Notes == nil || !strings.Contains(*v.Trust.Notes, tc.trustNote)) {
				t.Errorf("trust notes %v, want %q", v.Trust.Notes, tc.trustNote)
			}
		})
	}
}

// TestFeedRPCDown: once the node is gone, a round read before still prices while it is within
// the feed's max age, marked cached (overall mixed, trust medium); after that, and with a
// node that never answers, per_tx_cap is data_unavailable. No verdict waits past the deadline.
func TestFeedRPCDown(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	clk := testenv.NewClock(clock)
	feed := chain.DeployPriceFeed(t, 8, "T / USD")
	feed.SetRound(t, big.NewInt(1e8), clk.Now())
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{84532: chain.Client}, Now: clk.Now, TTL: time.Minute},
		prices.Feed{ChainID: 84532, Asset: tok.Address, Address: feed.Address, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Config{}, Deps{PriceFeeds: feeds, Now: clk.Now})
	pol := mustPolicy(t, 1, feedPolicy)
	tx := payment(set("asset", tok.Address.Hex()), set("amount", "1000000"))
	eval := func() *verdict.Verdict {
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
		mustBeValid(t, v)
		return v
	}
	if v := eval(); v.Outcome != verdict.OutcomeApproved || v.Trust.Level != verdict.TrustHigh {
		t.Fatalf("node up: %s %s trust %s", v.Outcome, v.HumanReason, v.Trust.Level)
	}
	chain.Stop()
	clk.Add(10 * time.Minute)
	v := eval()
	if v.Outcome != verdict.OutcomeApproved || v.DataFreshness.Overall != verdict.FreshnessMixed || v.Trust.Level != verdict.TrustMedium {
		t.Errorf("node down, round 10 minutes old: %s %s, overall %s, trust %s", v.Outcome, v.HumanReason, v.DataFreshness.Overall, v.Trust.Level)
	}
	if s := sourcesOf(v)["price-feed:84532:"+tok.Address.Hex()]; s != "2026-11-20T12:00:00Z cached" {
		t.Errorf("feed source %q, want cached", s)
	}
	clk.Add(time.Hour)
	if v := eval(); v.ReasonCode != verdict.ReasonDataUnavailable || checkOf(v, verdict.CheckPerTxCap).Status != verdict.CheckFailed {
		t.Errorf("node down, round past max age: %s %s", v.ReasonCode, v.HumanReason)
	}

	hung, err := ethclient.Dial(testenv.HungRPC(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hung.Close)
	feeds, err = prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{84532: hung}, Deadline: 100 * time.Millisecond},
		prices.Feed{ChainID: 84532, Asset: tok.Address, Address: feed.Address})
	if err != nil {
		t.Fatal(err)
	}
	e = newEngine(t, Config{}, Deps{PriceFeeds: feeds})
	v = e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
	mustBeValid(t, v)
	if v.ReasonCode != verdict.ReasonDataUnavailable || v.Trust.Notes == nil || !strings.Contains(*v.Trust.Notes, "timed out") {
		t.Errorf("a node that never answers: %s, trust %v", v.ReasonCode, v.Trust.Notes)
	}
}

// TestSanctionsOracleOnChain screens with our isSanctioned oracle on anvil beside the list
// (docs/policy.md#sanctions-oracle): an address the oracle lists is rejected, an oracle that
// does not answer fails the check closed with data_unavailable (but a list hit still says
// sanctioned_address), and an oracle alone screens with trust high.
func TestSanctionsOracleOnChain(t *testing.T) {
	chain := testenv.StartAnvil(t)
	or := chain.DeploySanctionsOracle(t)
	flagged := common.HexToAddress("0xf1a9000000000000000000000000000000000001")
	or.Add(t, flagged)
	oracle, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: 84532, Address: or.Address, Caller: chain.Client, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	hungClient, err := ethclient.Dial(testenv.HungRPC(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hungClient.Close)
	down, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: 84532, Address: or.Address, Caller: hungClient, Deadline: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	withList := newEngine(t, Config{}, Deps{SanctionsOracles: []*sanctions.Oracle{oracle}})
	oracleOnly, err := New(Config{}, Deps{SanctionsOracles: []*sanctions.Oracle{oracle}, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	listAndDown := newEngine(t, Config{}, Deps{SanctionsOracles: []*sanctions.Oracle{down}})
	otherChain, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: 8453, Address: or.Address, Caller: hungClient})
	if err != nil {
		t.Fatal(err)
	}
	onlyOtherChain, err := New(Config{}, Deps{SanctionsOracles: []*sanctions.Oracle{otherChain}, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`)
	oracleSource := oracle.Name()
	for _, tc := range []struct {
		name     string
		e        *Evaluator
		payTo    common.Address
		reason   verdict.ReasonCode
		check    verdict.CheckStatus
		code     verdict.ReasonCode
		trust    verdict.TrustLevel
		inSource bool // the oracle is a source of the verdict
	}{
		{"an address only the oracle lists is rejected", withList, flagged, verdict.ReasonSanctionedAddress, verdict.CheckFailed, verdict.ReasonSanctionedAddress, verdict.TrustHigh, true},
		{"an address neither lists passes", withList, payee, verdict.ReasonAllowed, verdict.CheckPassed, "", verdict.TrustHigh, true},
		{"the oracle alone screens, trust high", oracleOnly, payee, verdict.ReasonAllowed, verdict.CheckPassed, "", verdict.TrustHigh, true},
		{"the oracle alone finds a listed address", oracleOnly, flagged, verdict.ReasonSanctionedAddress, verdict.CheckFailed, verdict.ReasonSanctionedAddress, verdict.TrustHigh, true},
		{"an oracle that does not answer fails closed", listAndDown, payee, verdict.ReasonDataUnavailable, verdict.CheckFailed, verdict.ReasonDataUnavailable, verdict.TrustMedium, false},
		{"a list hit stands when the oracle does not answer", listAndDown, listed, verdict.ReasonSanctionedAddress, verdict.CheckFailed, verdict.ReasonSanctionedAddress, verdict.TrustMedium, false},
		{"an oracle of another chain does not screen", onlyOtherChain, flagged, verdict.ReasonAllowed, verdict.CheckNotChecked, "", verdict.TrustMedium, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(set("payTo", tc.payTo.Hex())), Policy: pol})
			mustBeValid(t, v)
			c := checkOf(v, verdict.CheckSanctions)
			if v.ReasonCode != tc.reason || c.Status != tc.check {
				t.Fatalf("%s, sanctions %s (%s); want %s, %s", v.ReasonCode, c.Status, c.HumanReason, tc.reason, tc.check)
			}
			if tc.code != "" && (c.Code == nil || *c.Code != tc.code) {
				t.Errorf("sanctions code %v, want %s", c.Code, tc.code)
			}
			if v.Trust.Level != tc.trust {
				t.Errorf("trust %s %v, want %s", v.Trust.Level, v.Trust.Notes, tc.trust)
			}
			if _, has := sourcesOf(v)[oracleSource]; has != tc.inSource {
				t.Errorf("sources %v: oracle present %v, want %v", sourcesOf(v), has, tc.inSource)
			}
			for _, s := range v.Evidence.Sources {
				if m := s.(map[string]any); m["name"] == oracleSource && (m["address"] != or.Address.Hex() || m["chainId"] != int64(84532)) {
					t.Errorf("oracle evidence %v", m)
				}
			}
		})
	}
	if _, err := New(Config{}, Deps{SanctionsOracles: []*sanctions.Oracle{oracle, oracle}}); err == nil {
		t.Error("two oracles for one chain were accepted")
	}
}

// TestRefreshSanctions: a scheduled refresh reloads the list file when it changed, keeps the
// list in use when the new file does not parse, and the list's date follows the file.
func TestRefreshSanctions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "list.txt")
	write := func(body string, mod time.Time) { // atomically, as docs/policy.md#refreshing-the-list asks
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mod, mod); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	first := common.HexToAddress("0x5a1e0000000000000000000000000000000000a1")
	second := common.HexToAddress("0x5a1e0000000000000000000000000000000000a2")
	write("# generatedAt: 2026-11-20T00:00:00Z\n"+first.Hex()+"\n", clock.Add(-time.Hour))
	e := newEngine(t, Config{Sanctions: path}, Deps{})
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`)
	screen := func(a common.Address) (verdict.ReasonCode, string) {
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(set("payTo", a.Hex())), Policy: pol})
		mustBeValid(t, v)
		return v.ReasonCode, sourcesOf(v)["sanctions:list.txt"]
	}
	if r, _ := screen(first); r != verdict.ReasonSanctionedAddress {
		t.Fatalf("first list: %s", r)
	}
	if changed, err := e.RefreshSanctions(); changed || err != nil {
		t.Errorf("an unchanged file: changed %v, %v", changed, err)
	}

	write("# generatedAt: 2026-11-20T06:00:00Z\n"+second.Hex()+"\n", clock)
	if changed, err := e.RefreshSanctions(); !changed || err != nil {
		t.Fatalf("a changed file: changed %v, %v", changed, err)
	}
	if r, src := screen(second); r != verdict.ReasonSanctionedAddress || src != "2026-11-20T06:00:00Z fresh" {
		t.Errorf("after the refresh: %s, source %q", r, src)
	}
	if r, _ := screen(first); r != verdict.ReasonAllowed {
		t.Errorf("an address taken off the list: %s", r)
	}

	write("not an address\n", clock.Add(time.Minute))
	if changed, err := e.RefreshSanctions(); changed || err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a broken file: changed %v, %v", changed, err)
	}
	if r, src := screen(second); r != verdict.ReasonSanctionedAddress || src != "2026-11-20T06:00:00Z fresh" {
		t.Errorf("after a failed refresh the list in use must stay: %s, %q", r, src)
	}
	write("# generatedAt: 2026-11-20T07:00:00Z\n", clock.Add(90*time.Second))
	if changed, err := e.RefreshSanctions(); changed || err == nil || !strings.Contains(err.Error(), "no addresses") {
		t.Errorf("an empty file: changed %v, %v", changed, err)
	}
	if r, _ := screen(second); r != verdict.ReasonSanctionedAddress {
		t.Errorf("an empty file replaced the list: %s", r)
	}
	write("not an address\n", clock.Add(time.Minute))

	// On a schedule: each tick reports; a fixed file is picked up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan error, 100)
	changedCh := make(chan struct{}, 100)
	go e.RefreshSanctionsEvery(ctx, 5*time.Millisecond, func(changed bool, err error) {
		if changed {
			changedCh <- struct{}{}
		}
		select {
		case reports <- err:
		default:
		}
	})
	if err := <-reports; err == nil {
		t.Error("the scheduled refresh of the broken file reported no error")
	}
	write("# generatedAt: 2026-11-20T09:00:00Z\n"+first.Hex()+"\n", clock.Add(2*time.Minute))
	select {
	case <-changedCh:
	case <-time.After(30 * time.Second): // turns a hang into a failure; not a timing assertion
		t.Fatal("the scheduled refresh never picked up the fixed file")
	}
	if r, src := screen(first); r != verdict.ReasonSanctionedAddress || src != "2026-11-20T09:00:00Z fresh" {
		t.Errorf("after the scheduled refresh: %s, %q", r, src)
	}
}

// BenchmarkEvaluateWithFeedAndOracle is one payment priced by an on-chain feed and screened
// by the list and an on-chain oracle, both answers in their caches: what the network adds to
// an evaluation once warm (docs/policy.md#price-feeds).
func BenchmarkEvaluateWithFeedAndOracle(b *testing.B) {
	chain, tok := testenv.StartChainWithToken(b)
	feed := chain.DeployPriceFeed(b, 8, "T / USD")
	feed.SetRound(b, big.NewInt(1e8), clock)
	or := chain.DeploySanctionsOracle(b)
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{84532: chain.Client}, TTL: time.Hour, Now: func() time.Time { return clock }},
		prices.Feed{ChainID: 84532, Asset: tok.Address, Address: feed.Address})
	if err != nil {
		b.Fatal(err)
	}
	oracle, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: 84532, Address: or.Address, Caller: chain.Client, TTL: time.Hour, Now: func() time.Time { return clock }})
	if err != nil {
		b.Fatal(err)
	}
	e := newEngine(b, Config{}, Deps{PriceFeeds: feeds, SanctionsOracles: []*sanctions.Oracle{oracle}})
	in := Input{Escrow: escrow, ProposedTx: payment(set("asset", tok.Address.Hex()), set("amount", "1000000")), Policy: mustPolicy(b, 1, feedPolicy)}
	if v := e.Evaluate(context.Background(), in); v.Outcome != verdict.OutcomeApproved || v.Trust.Level != verdict.TrustHigh {
		b.Fatalf("%s %s, trust %s", v.Outcome, v.HumanReason, v.Trust.Level)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.Evaluate(context.Background(), in)
	}
}
