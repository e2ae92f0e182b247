package prices

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
)

// Defaults of the on-chain feeds (docs/policy.md#price-feeds).
const (
	// DefaultMaxAge is how old a feed's latest round may be and still price an action.
	DefaultMaxAge = time.Hour
	// DefaultFeedTTL is how long a read of a feed is reused before the feed is read again.
	DefaultFeedTTL = 15 * time.Second
	// DefaultDeadline bounds one read of a feed (its eth_calls together).
	DefaultDeadline = 2 * time.Second
	// maxFutureSkew is how far ahead of our clock a round's updatedAt may be: more is a
	// broken feed, not clock skew.
	maxFutureSkew = 10 * time.Minute
)

// NativeAsset is the sentinel address of a chain's native coin (18 decimals), which has no
// decimals() to read.
var NativeAsset = common.HexToAddress("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")

// Feed configures one Chainlink-style price feed: the aggregator that prices Asset on
// ChainID in USD (its latestRoundData answer, scaled by its decimals()).
type Feed struct {
	// ChainID is the chain of the asset and of the aggregator, > 0.
	ChainID int64
	// Asset is the token the feed prices; its decimals() is read once from the chain
	// (NativeAsset: 18).
	Asset common.Address
	// Address is the aggregator contract.
	Address common.Address
	// MaxAge is how old the latest round's updatedAt may be; default DefaultMaxAge.
	MaxAge time.Duration
}

// FeedOptions configures Feeds.
type FeedOptions struct {
	// Callers reach each chain's RPC (eth_call; *ethclient.Client is one; feeds never send
	// transactions); every feed's chain needs one.
	Callers map[int64]ethereum.ContractCaller
	// TTL is how long a read is reused; default DefaultFeedTTL.
	TTL time.Duration
	// Deadline bounds one read; default DefaultDeadline.
	Deadline time.Duration
	// Now is the clock rounds are aged against; default time.Now.
	Now func() time.Time
}

// Status says how current a quote is: fresh, or cached (docs/policy.md#data-freshness).
type Status string

// Quote statuses.
const (
	// StatusFresh is a round no older than the feed's MaxAge, read within the TTL.
	StatusFresh Status = "fresh"
	// StatusCached is a round from an earlier read, used because the feed could not be read
	// now, or a round older than MaxAge (then Quote returns ErrStale).
	StatusCached Status = "cached"
)

// Errors of Feeds.Quote. The engine turns each into data_unavailable.
var (
	// ErrNoFeed: no feed is configured for the chain and asset.
	ErrNoFeed = errors.New("no price feed")
	// ErrStale: the feed's latest round is older than its MaxAge; the Quote says which round.
	ErrStale = errors.New("the price feed's latest round is older than its max age")
	// ErrUnavailable: the feed could not be read and no earlier round is young enough.
	ErrUnavailable = errors.New("the price feed could not be read")
)

// Quote is a feed's price of one whole token.
type Quote struct {
	Price
	// Feed is the aggregator read.
	Feed common.Address
	// UpdatedAt is the round's updatedAt.
	UpdatedAt time.Time
	// Status is fresh or cached.
	Status Status
}

// Feeds reads Chainlink-style aggregators with a cache and a deadline per read. It is safe
// for concurrent use; concurrent quotes of one feed share one read.
type Feeds struct {
	callers  map[int64]ethereum.ContractCaller
	ttl      time.Duration
	deadline time.Duration
	now      func() time.Time
	feeds    map[key]*feedState
}

type round struct {
	answer    *big.Rat // USD per whole token
	updatedAt time.Time
}

type feedState struct {
	cfg    Feed
	caller ethereum.ContractCaller

	mu       sync.Mutex
	feedDec  int // -1 until read
	tokenDec int // -1 until read
	last     *round
	readAt   time.Time
	lastErr  error // of the latest read; nil after a good one
	inflight chan struct{}
}

// NewFeeds validates feeds (positive chain, non-zero addresses, one feed per chain and asset,
// a caller for every chain) and returns their reader.
func NewFeeds(o FeedOptions, feeds ...Feed) (*Feeds, error) {
	f := &Feeds{callers: o.Callers, ttl: o.TTL, deadline: o.Deadline, now: o.Now, feeds: map[key]*feedState{}}
	if f.ttl <= 0 {
		f.ttl = DefaultFeedTTL
	}
	if f.deadline <= 0 {
		f.deadline = DefaultDeadline
	}
	if f.now == nil {
		f.now = time.Now
	}
	for i, fd := range feeds {
		switch {
		case fd.ChainID <= 0:
			return nil, fmt.Errorf("price feed %d: chain id must be positive", i)
		case fd.Asset == (common.Address{}):
			return nil, fmt.Errorf("price feed %d: asset is the zero address", i)
		case fd.Address == (common.Address{}):
			return nil, fmt.Errorf("price feed %d: feed is the zero address", i)
		case fd.MaxAge < 0:
			return nil, fmt.Errorf("price feed %d: max age is negative", i)
		}
		c := o.Callers[fd.ChainID]
		if c == nil {
			return nil, fmt.Errorf("price feed %d: no rpc for chain %d", i, fd.ChainID)
		}
		k := key{fd.ChainID, fd.Asset}
		if _, dup := f.feeds[k]; dup {
			return nil, fmt.Errorf("price feed %d: a second feed for %s on chain %d", i, fd.Asset.Hex(), fd.ChainID)
		}
		if fd.MaxAge == 0 {
			fd.MaxAge = DefaultMaxAge
		}
		st := &feedState{cfg: fd, caller: c, feedDec: -1, tokenDec: -1}
		if fd.Asset == NativeAsset {
			st.tokenDec = 18
		}
		f.feeds[k] = st
	}
	return f, nil
}

// Has reports whether a feed prices asset on chainID.
func (f *Feeds) Has(chainID int64, asset common.Address) bool {
	if f == nil {
		return false
	}
	_, ok := f.feeds[key{chainID, asset}]
	return ok
}

// Quote returns the price of one whole asset on chainID (docs/policy.md#price-feeds): the
// last read when it is younger than the TTL, else a new read bounded by the deadline and by
// ctx. When the read fails, an earlier round still within MaxAge is returned as cached. A
// round older than MaxAge returns its Quote (status cached) and ErrStale; it must not price
// anything. Quote never waits past ctx or the deadline.
func (f *Feeds) Quote(ctx context.Context, chainID int64, asset common.Address) (Quote, error) {
	if f == nil {
		return Quote{}, ErrNoFeed
	}
	st, ok := f.feeds[key{chainID, asset}]
	if !ok {
		return Quote{}, ErrNoFeed
	}
	st.mu.Lock()
	if st.last != nil && f.now().Sub(st.readAt) < f.ttl {
		q, err := f.quote(st, StatusFresh)
		st.mu.Unlock()
		return q, err
	}
	done := st.inflight
	if done == nil {
		done = make(chan struct{})
		st.inflight = done
		go f.read(st, done)
	}
	st.mu.Unlock()

	select {
	case <-done:
	case <-ctx.Done():
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	status := StatusFresh
	if st.last == nil {
		if st.lastErr != nil {
			return Quote{}, fmt.Errorf("%w: %v", ErrUnavailable, st.lastErr)
		}
		return Quote{}, fmt.Errorf("%w: no answer within the deadline", ErrUnavailable)
	}
	if f.now().Sub(st.readAt) >= f.ttl {
		status = StatusCached // this read failed or is still running: an earlier round
	}
	return f.quote(st, status)
}

// quote builds the Quote of st's last round; st.mu is held.
func (f *Feeds) quote(st *feedState, status Status) (Quote, error) {
	q := Quote{
		Price:     Price{USD: st.last.answer, Decimals: st.tokenDec},
		Feed:      st.cfg.Address,
		UpdatedAt: st.last.updatedAt,
		Status:    status,
	}
	now := f.now()
	if now.Sub(st.last.updatedAt) > st.cfg.MaxAge {
		q.Status = StatusCached
		return q, ErrStale
	}
	if st.last.updatedAt.Sub(now) > maxFutureSkew {
		return Quote{}, fmt.Errorf("%w: the round's updatedAt %s is in the future", ErrUnavailable, st.last.updatedAt.Format(time.RFC3339))
	}
	return q, nil
}

// read reads st's feed once, under the deadline, and keeps a valid round.
func (f *Feeds) read(st *feedState, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), f.deadline)
	defer cancel()
	r, feedDec, tokenDec, err := f.fetch(ctx, st)
	st.mu.Lock()
	st.lastErr = err
	if err == nil {
		st.feedDec, st.tokenDec = feedDec, tokenDec
		st.last, st.readAt = r, f.now()
	}
	st.inflight = nil
	st.mu.Unlock()
	close(done)
}

// fetch makes the eth_calls of one read: decimals of the feed and of the token the first
// time, latestRoundData every time.
func (f *Feeds) fetch(ctx context.Context, st *feedState) (*round, int, int, error) {
	st.mu.Lock()
	feedDec, tokenDec := st.feedDec, st.tokenDec
	st.mu.Unlock()
	var err error
	if feedDec < 0 {
		if feedDec, err = callDecimals(ctx, st.caller, st.cfg.Address); err != nil {
			return nil, 0, 0, err
		}
	}
	if tokenDec < 0 {
		if tokenDec, err = callDecimals(ctx, st.caller, st.cfg.Asset); err != nil {
			return nil, 0, 0, err
		}
	}
	out, err := call(ctx, st.caller, st.cfg.Address, "latestRoundData")
	if err != nil {
		return nil, 0, 0, err
	}
	answer, _ := out[1].(*big.Int)
	updatedAt, _ := out[3].(*big.Int)
	if answer == nil || answer.Sign() <= 0 {
		return nil, 0, 0, errors.New("latestRoundData: the answer is not positive")
	}
	if updatedAt == nil || updatedAt.Sign() <= 0 || !updatedAt.IsInt64() {
		return nil, 0, 0, errors.New("latestRoundData: the round is not complete")
	}
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(feedDec)), nil)
	return &round{answer: new(big.Rat).SetFrac(answer, scale), updatedAt: time.Unix(updatedAt.Int64(), 0).UTC()}, feedDec, tokenDec, nil
}

// aggregatorABI is the part of Chainlink's AggregatorV3Interface that Feeds reads, and ERC-20
// decimals().
const aggregatorABI = `[
{"type":"function","name":"decimals","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"uint8"}]},
{"type":"function","name":"latestRoundData","stateMutability":"view","inputs":[],"outputs":[
 {"name":"roundId","type":"uint80"},{"name":"answer","type":"int256"},{"name":"startedAt","type":"uint256"},
 {"name":"updatedAt","type":"uint256"},{"name":"answeredInRound","type":"uint80"}]}
]`

var aggregator = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(aggregatorABI))
	if err != nil {
		panic("prices: aggregator abi: " + err.Error()) // a constant: a broken build
	}
	return a
}()

func callDecimals(ctx context.Context, c ethereum.ContractCaller, to common.Address) (int, error) {
	out, err := call(ctx, c, to, "decimals")
	if err != nil {
		return 0, err
	}
	d, ok := out[0].(uint8)
	if !ok || d > 77 {
		return 0, errors.New("decimals: not 0..77")
	}
	return int(d), nil
}

// call runs a view method of aggregatorABI. Its errors never carry the RPC's own text, which
// may quote the RPC URL and its key.
func call(ctx context.Context, c ethereum.ContractCaller, to common.Address, method string) ([]any, error) {
	data, err := aggregator.Pack(method)
	if err != nil {
		return nil, err
	}
	ret, err := c.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
	if err != nil {
		var de rpc.DataError
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s on %s: timed out", method, to.Hex())
		case errors.As(err, &de):
			return nil, fmt.Errorf("%s on %s: reverted", method, to.Hex())
		}
		return nil, fmt.Errorf("%s on %s: the rpc call failed", method, to.Hex())
	}
	if len(ret) == 0 {
		return nil, fmt.Errorf("%s on %s: no answer (no contract there?)", method, to.Hex())
	}
	out, err := aggregator.Unpack(method, ret)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: malformed answer", method, to.Hex())
	}
	return out, nil
}
