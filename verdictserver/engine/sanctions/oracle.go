package sanctions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
)

// Defaults of an Oracle (docs/policy.md#sanctions-oracle).
const (
	// DefaultOracleTTL is how long an oracle's answer about an address is reused.
	DefaultOracleTTL = 10 * time.Minute
	// DefaultOracleDeadline bounds one screening (its eth_calls run at once).
	DefaultOracleDeadline = 2 * time.Second
	// maxOracleCache bounds the cached answers; past it the cache starts over.
	maxOracleCache = 100_000
	// maxOracleCalls bounds the eth_calls of one screening in flight at once.
	maxOracleCalls = 8
)

// IsSanctionedSelector is the selector of isSanctioned(address), Chainalysis's oracle method.
var IsSanctionedSelector = [4]byte{0xdf, 0x59, 0x2f, 0x7d}

// ErrOracleUnavailable: the oracle did not answer about every address; the screening must
// not pass (docs/policy.md#sanctions-oracle: fail closed).
var ErrOracleUnavailable = errors.New("the sanctions oracle did not answer")

// OracleOptions configures an Oracle.
type OracleOptions struct {
	// ChainID is the chain the oracle is on, > 0; it screens actions of that chain.
	ChainID int64
	// Address is the oracle contract (Chainalysis: 0x40C57923924B5c5c5455c48D93317139ADDaC8fb
	// on most chains, 0x3A91A31cB3dC49b4db9Ce721F50a9D076c8D739B on Base).
	Address common.Address
	// Caller reaches the chain's RPC (eth_call; *ethclient.Client is one). Required.
	Caller ethereum.ContractCaller
	// TTL is how long an answer is reused; default DefaultOracleTTL.
	TTL time.Duration
	// Deadline bounds one screening; default DefaultOracleDeadline.
	Deadline time.Duration
	// Now is the clock of the cache; default time.Now.
	Now func() time.Time
}

// Oracle asks a Chainalysis-style sanctions oracle, isSanctioned(address), with a cache. It
// is safe for concurrent use.
type Oracle struct {
	o     OracleOptions
	mu    sync.Mutex
	cache map[common.Address]answer
}

type answer struct {
	listed bool
	at     time.Time
}

// NewOracle checks o and fills its defaults.
func NewOracle(o OracleOptions) (*Oracle, error) {
	switch {
	case o.ChainID <= 0:
		return nil, errors.New("sanctions oracle: chain id must be positive")
	case o.Address == (common.Address{}):
		return nil, errors.New("sanctions oracle: address is the zero address")
	case o.Caller == nil:
		return nil, fmt.Errorf("sanctions oracle: no rpc for chain %d", o.ChainID)
	}
	if o.TTL <= 0 {
		o.TTL = DefaultOracleTTL
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultOracleDeadline
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Oracle{o: o, cache: map[common.Address]answer{}}, nil
}

// ChainID is the chain the oracle screens.
func (o *Oracle) ChainID() int64 { return o.o.ChainID }

// Address is the oracle contract.
func (o *Oracle) Address() common.Address { return o.o.Address }

// Name is the oracle's source name in evidence: "sanctions-oracle:<chain id>:<address>".
func (o *Oracle) Name() string {
	return fmt.Sprintf("sanctions-oracle:%d:%s", o.o.ChainID, o.o.Address.Hex())
}

// Screen asks the oracle about addrs: cached answers younger than the TTL are reused, the
// others are asked at once under the deadline and ctx. It returns the listed addresses and the
// time of the oldest answer used. If any address is left unanswered (timeout, RPC error, a
// malformed answer, no contract at the address) it returns ErrOracleUnavailable: nothing may
// be approved on a partial screening.
func (o *Oracle) Screen(ctx context.Context, addrs []common.Address) (listed []common.Address, asOf time.Time, err error) {
	now := o.o.Now()
	asOf = now
	var ask []common.Address
	o.mu.Lock()
	for _, a := range addrs {
		if an, ok := o.cache[a]; ok && now.Sub(an.at) < o.o.TTL {
			if an.listed {
				listed = append(listed, a)
			}
			if an.at.Before(asOf) {
				asOf = an.at
			}
			continue
		}
		ask = append(ask, a)
	}
	o.mu.Unlock()
	if len(ask) == 0 {
		return listed, asOf, nil
	}

	ctx, cancel := context.WithTimeout(ctx, o.o.Deadline)
	defer cancel()
	results := make([]answer, len(ask))
	errs := make([]error, len(ask))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxOracleCalls)
	for i, a := range ask {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i].listed, errs[i] = o.isSanctioned(ctx, a)
			results[i].at = o.o.Now()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %v", ErrOracleUnavailable, errs[firstErr(errs)])
	}
	o.mu.Lock()
	if len(o.cache)+len(ask) > maxOracleCache {
		o.cache = map[common.Address]answer{}
	}
	for i, a := range ask {
		o.cache[a] = results[i]
		if results[i].listed {
			listed = append(listed, a)
		}
	}
	o.mu.Unlock()
	return listed, asOf, nil
}

func firstErr(errs []error) int {
	for i, e := range errs {
		if e != nil {
			return i
		}
	}
	return 0
}

// isSanctioned makes one eth_call. Its errors never carry the RPC's text, which may quote the
// RPC URL and its key.
func (o *Oracle) isSanctioned(ctx context.Context, a common.Address) (bool, error) {
	data := make([]byte, 4+32)
	copy(data, IsSanctionedSelector[:])
	copy(data[4+12:], a[:])
	to := o.o.Address
	ret, err := o.o.Caller.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
	var de rpc.DataError
	switch {
	case err != nil && ctx.Err() != nil:
		return false, errors.New("isSanctioned timed out")
	case errors.As(err, &de):
		return false, errors.New("isSanctioned reverted")
	case err != nil:
		return false, errors.New("isSanctioned: the rpc call failed")
	case len(ret) == 0:
		return false, errors.New("isSanctioned: no answer (no contract at the oracle address?)")
	case len(ret) != 32:
		return false, errors.New("isSanctioned: malformed answer")
	}
	for _, b := range ret[:31] {
		if b != 0 {
			return false, errors.New("isSanctioned: malformed answer")
		}
	}
	switch ret[31] {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, errors.New("isSanctioned: malformed answer")
}
