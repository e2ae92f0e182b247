package prices_test

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
)

// hungRPC is a client of a node that hangs.
func hungRPC(t *testing.T) *ethclient.Client {
	t.Helper()
	cl, err := ethclient.Dial(testenv.HungRPC(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// usd8 is a USD price with 8 decimals, as Chainlink's USD feeds answer.
func usd8(s string) *big.Int {
	r, _ := new(big.Rat).SetString(s)
	r.Mul(r, new(big.Rat).SetInt64(1e8))
	return new(big.Int).Quo(r.Num(), r.Denom())
}

// TestFeedQuote reads our Chainlink-style aggregator on anvil: a fresh round prices the token
// (its decimals read from the token), a round older than the max age is stale, and a feed
// that has no round, answers a non-positive price or is not a contract prices nothing.
func TestFeedQuote(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	clk := testenv.NewClock(time.Now().UTC().Truncate(time.Second))
	fresh := chain.DeployPriceFeed(t, 8, "USDC / USD")
	fresh.SetRound(t, usd8("0.9998"), clk.Now().Add(-time.Minute))
	old := chain.DeployPriceFeed(t, 8, "OLD / USD")
	old.SetRound(t, usd8("2"), clk.Now().Add(-2*time.Hour))
	empty := chain.DeployPriceFeed(t, 8, "EMPTY / USD")
	zero := chain.DeployPriceFeed(t, 8, "ZERO / USD")
	zero.SetRound(t, big.NewInt(0), clk.Now())
	negative := chain.DeployPriceFeed(t, 8, "NEG / USD")
	negative.SetRound(t, big.NewInt(-5), clk.Now())
	future := chain.DeployPriceFeed(t, 8, "FUTURE / USD")
	future.SetRound(t, usd8("1"), clk.Now().Add(time.Hour))
	eth := chain.DeployPriceFeed(t, 8, "ETH / USD")
	eth.SetRound(t, usd8("3000.5"), clk.Now())

	tokens := map[byte]common.Address{}
	asset := func(i byte) common.Address {
		if _, ok := tokens[i]; !ok && i < 9 {
			tokens[i] = chain.DeployToken(t, "T", "1").Address
		}
		if i >= 9 {
			return common.BytesToAddress([]byte{0xa5, i})
		}
		return tokens[i]
	}
	chainID := chain.ChainID.Int64()
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{chainID: chain.Client}, Now: clk.Now},
		prices.Feed{ChainID: chainID, Asset: tok.Address, Address: fresh.Address},
		prices.Feed{ChainID: chainID, Asset: asset(1), Address: old.Address, MaxAge: time.Hour},
		prices.Feed{ChainID: chainID, Asset: asset(2), Address: empty.Address},
		prices.Feed{ChainID: chainID, Asset: asset(3), Address: zero.Address},
		prices.Feed{ChainID: chainID, Asset: asset(4), Address: negative.Address},
		prices.Feed{ChainID: chainID, Asset: asset(5), Address: common.HexToAddress("0x000000000000000000000000000000000000c0de")},
		prices.Feed{ChainID: chainID, Asset: prices.NativeAsset, Address: eth.Address},
		prices.Feed{ChainID: chainID, Asset: asset(6), Address: future.Address},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		asset    common.Address
		chain    int64
		wantErr  error
		wantMsg  string
		wantUSD  string // of the base units below
		units    int64
		wantStat prices.Status
	}{
		{"a fresh round prices the token with the token's decimals", tok.Address, chainID, nil, "", "0.9998", 1_000_000, prices.StatusFresh},
		{"the native coin has 18 decimals", prices.NativeAsset, chainID, nil, "", "3000.5", 1e18, prices.StatusFresh},
		{"a round older than the max age is stale", asset(1), chainID, prices.ErrStale, "", "", 0, prices.StatusCached},
		{"a feed without a round (latestRoundData reverts) is unavailable", asset(2), chainID, prices.ErrUnavailable, "reverted", "", 0, ""},
		{"a zero answer is unavailable", asset(3), chainID, prices.ErrUnavailable, "the answer is not positive", "", 0, ""},
		{"a negative answer is unavailable", asset(4), chainID, prices.ErrUnavailable, "the answer is not positive", "", 0, ""},
		{"a feed address without code is unavailable", asset(5), chainID, prices.ErrUnavailable, "no contract there", "", 0, ""},
		{"a round dated an hour ahead is unavailable", asset(6), chainID, prices.ErrUnavailable, "in the future", "", 0, ""},
		{"an asset without a feed", asset(9), chainID, prices.ErrNoFeed, "", "", 0, ""},
		{"a chain without feeds", tok.Address, 1, prices.ErrNoFeed, "", "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := feeds.Quote(context.Background(), tc.chain, tc.asset)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err %v does not say %q", err, tc.wantMsg)
			}
			if q.Status != tc.wantStat {
				t.Errorf("status %q, want %q", q.Status, tc.wantStat)
			}
			if tc.wantUSD == "" {
				return
			}
			want, _ := new(big.Rat).SetString(tc.wantUSD)
			if got := q.Value(big.NewInt(tc.units)); got.Cmp(want) != 0 {
				t.Errorf("value %s, want %s", got.FloatString(8), tc.wantUSD)
			}
		})
	}
	// The stale quote says which round it saw.
	q, _ := feeds.Quote(context.Background(), chainID, asset(1))
	if !q.UpdatedAt.Equal(clk.Now().Add(-2 * time.Hour)) {
		t.Errorf("stale round updatedAt %s", q.UpdatedAt)
	}
}

// TestFeedCache: a read is reused within the TTL (no eth_call), read again after it; when the
// RPC is gone the last round serves as cached while it is younger than the max age, and
// then it is stale.
func TestFeedCache(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	clk := testenv.NewClock(time.Now().UTC().Truncate(time.Second))
	feed := chain.DeployPriceFeed(t, 8, "USDC / USD")
	feed.SetRound(t, usd8("1"), clk.Now())
	cc := &testenv.CountingCaller{Caller: chain.Client}
	chainID := chain.ChainID.Int64()
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{chainID: cc}, Now: clk.Now, TTL: time.Minute},
		prices.Feed{ChainID: chainID, Asset: tok.Address, Address: feed.Address, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	quote := func() (string, prices.Status, error) {
		q, err := feeds.Quote(context.Background(), chainID, tok.Address)
		if q.USD == nil {
			return "", q.Status, err
		}
		return q.USD.FloatString(4), q.Status, err
	}
	if p, st, err := quote(); err != nil || p != "1.0000" || st != prices.StatusFresh {
		t.Fatalf("first read: %s %s %v", p, st, err)
	}
	first := cc.Calls() // feed decimals, token decimals, latestRoundData
	if first != 3 {
		t.Errorf("the first read made %d eth_calls, want 3", first)
	}

	feed.SetRound(t, usd8("1.5"), clk.Now())
	clk.Add(30 * time.Second)
	if p, st, err := quote(); err != nil || p != "1.0000" || st != prices.StatusFresh {
		t.Errorf("within the TTL: %s %s %v, want the cached 1.0000 fresh", p, st, err)
	}
	if n := cc.Calls(); n != first {
		t.Errorf("within the TTL %d eth_calls were made", n-first)
	}
	clk.Add(31 * time.Second)
	if p, st, err := quote(); err != nil || p != "1.5000" || st != prices.StatusFresh {
		t.Errorf("past the TTL: %s %s %v, want the new round 1.5000", p, st, err)
	}
	if n := cc.Calls(); n != first+1 {
		t.Errorf("past the TTL %d eth_calls were made, want 1 (latestRoundData)", n-first)
	}

	chain.Stop() // the RPC node goes away
	clk.Add(2 * time.Minute)
	if p, st, err := quote(); err != nil || p != "1.5000" || st != prices.StatusCached {
		t.Errorf("rpc down, round within max age: %s %s %v, want 1.5000 cached", p, st, err)
	}
	clk.Add(time.Hour)
	if _, st, err := quote(); !errors.Is(err, prices.ErrStale) || st != prices.StatusCached {
		t.Errorf("rpc down, round past max age: %s %v, want stale", st, err)
	}
}

// TestFeedNeverWaitsPastItsDeadline: a node that never answers gives ErrUnavailable once the
// feed's deadline, or the caller's shorter context, is over.
func TestFeedNeverWaitsPastItsDeadline(t *testing.T) {
	hung := hungRPC(t)
	asset := common.HexToAddress("0x00000000000000000000000000000000000a55e7")
	feed := common.HexToAddress("0x000000000000000000000000000000000000feed")
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		ctx      time.Duration
	}{
		{"the feed's deadline", 50 * time.Millisecond, time.Hour},
		{"the caller's context", time.Hour, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{8453: hung}, Deadline: tc.deadline},
				prices.Feed{ChainID: 8453, Asset: asset, Address: feed})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctx)
			defer cancel()
			if _, err := feeds.Quote(ctx, 8453, asset); !errors.Is(err, prices.ErrUnavailable) {
				t.Fatalf("err %v, want unavailable", err)
			}
		})
	}
}

func TestNewFeedsRefusesBadFeeds(t *testing.T) {
	a := common.HexToAddress("0x00000000000000000000000000000000000a55e7")
	f := common.HexToAddress("0x000000000000000000000000000000000000feed")
	callers := map[int64]ethereum.ContractCaller{8453: &testenv.CountingCaller{}}
	for _, tc := range []struct {
		name  string
		feeds []prices.Feed
		want  string
	}{
		{"a chain without rpc", []prices.Feed{{ChainID: 1, Asset: a, Address: f}}, "no rpc for chain 1"},
		{"a zero chain id", []prices.Feed{{ChainID: 0, Asset: a, Address: f}}, "chain id must be positive"},
		{"a zero asset", []prices.Feed{{ChainID: 8453, Address: f}}, "asset is the zero address"},
		{"a zero feed", []prices.Feed{{ChainID: 8453, Asset: a}}, "feed is the zero address"},
		{"a negative max age", []prices.Feed{{ChainID: 8453, Asset: a, Address: f, MaxAge: -1}}, "max age is negative"},
		{"two feeds for one asset", []prices.Feed{{ChainID: 8453, Asset: a, Address: f}, {ChainID: 8453, Asset: a, Address: f}}, "a second feed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := prices.NewFeeds(prices.FeedOptions{Callers: callers}, tc.feeds...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestConcurrentQuotesShareOneRead: many evaluations asking a cold feed at once make one read
// (three eth_calls: the two decimals and latestRoundData), and all get its price.
func TestConcurrentQuotesShareOneRead(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	feed := chain.DeployPriceFeed(t, 8, "USDC / USD")
	feed.SetRound(t, usd8("1.25"), time.Now())
	cc := &testenv.CountingCaller{Caller: chain.Client}
	chainID := chain.ChainID.Int64()
	feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: map[int64]ethereum.ContractCaller{chainID: cc}},
		prices.Feed{ChainID: chainID, Asset: tok.Address, Address: feed.Address})
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			q, err := feeds.Quote(context.Background(), chainID, tok.Address)
			if err == nil && q.USD.FloatString(2) != "1.25" {
				err = errors.New("price " + q.USD.FloatString(2))
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.Calls(); got != 3 {
		t.Errorf("%d concurrent quotes made %d eth_calls, want 3 (one read)", n, got)
	}
}
