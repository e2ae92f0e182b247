package actions

import (
	"encoding/hex"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// Scratch is memory for the Actions a decoder builds, which it takes instead of
// allocating them when the engine decodes: the evaluation that owns the scratch drops the
// action when it ends (the verdict copies what it reports), and the next evaluation reuses
// the structs and the Fields maps, cleared (bench/engine.md#the-margin-2026-11-23-session-7). Only those are
// reused, never a value stored in them. The first scratchActions actions of a decode come
// from it, any further ones are allocated.
type Scratch struct {
	acts   [scratchActions]Action
	to     [scratchActions]common.Address
	trades [scratchActions]Trade
	fields [scratchActions]map[string]any
	n      int // actions handed out
	nt     int // trades handed out
	// calldata is the decoded call data of an EVM call: no Action keeps a part of it (they
	// hold addresses, integers and strings, copied out of it).
	calldata []byte
	// Added are the contracts the evaluation's policy adds to the registry (knownContracts),
	// or nil: read only, the policy's own.
	Added map[string]map[string]string
}

// maxScratchCalldata bounds the call data buffer a scratch keeps.
const maxScratchCalldata = 4 << 10

// HexBytes decodes the hex digits h, into scratch's buffer when scratch is not nil and the
// bytes fit maxScratchCalldata.
func HexBytes(h string, scratch *Scratch) ([]byte, error) {
	n := len(h) / 2
	if scratch == nil || n > maxScratchCalldata {
		return hex.DecodeString(h)
	}
	if cap(scratch.calldata) < n {
		scratch.calldata = make([]byte, n, max(n, 512))
	}
	b := scratch.calldata[:n]
	for i := range b {
		hi, ok1 := intern.Unhex(h[2*i])
		lo, ok2 := intern.Unhex(h[2*i+1])
		if !ok1 || !ok2 {
			return nil, hex.InvalidByteError(h[2*i])
		}
		b[i] = hi<<4 | lo
	}
	return b, nil
}

const (
	// scratchActions is the actions a scratch holds: a call, or an order and its leg, and
	// the legs of a small bundle.
	scratchActions = 4
	// maxScratchFields bounds the Fields map a scratch keeps for the next evaluation.
	maxScratchFields = 16
)

// Action is a cleared Action with an empty Fields map, and where its To may point: s's
// memory, or new memory when s is nil or used up.
func (s *Scratch) Action() (*Action, *common.Address) {
	if s == nil || s.n == scratchActions {
		return &Action{Fields: make(map[string]any, 8)}, new(common.Address)
	}
	i := s.n
	s.n++
	if s.fields[i] == nil {
		s.fields[i] = make(map[string]any, 8)
	}
	clear(s.fields[i]) // empty already when the evaluation released it
	s.acts[i] = Action{Fields: s.fields[i]}
	return &s.acts[i], &s.to[i]
}

// CallAction is an Action of protocol on chainID calling selector on to, with an empty
// Fields map (Action).
func (s *Scratch) CallAction(protocol string, chainID int64, to common.Address, selector string) *Action {
	act, at := s.Action()
	*at = to
	act.Protocol, act.ChainID, act.To, act.Selector = protocol, chainID, at, selector
	return act
}

// Trade is a zero Trade: s's memory, or new memory when s is nil or used up.
func (s *Scratch) Trade() *Trade {
	if s == nil || s.nt == scratchActions {
		return new(Trade)
	}
	t := &s.trades[s.nt]
	s.nt++
	*t = Trade{}
	return t
}

// Reset drops what the scratch's actions refer to, for the next evaluation: a Fields map
// that grew past maxScratchFields is let go.
func (s *Scratch) Reset() {
	for i := range s.n {
		if len(s.fields[i]) > maxScratchFields {
			s.fields[i] = nil
		}
		clear(s.fields[i])
	}
	clear(s.acts[:s.n])
	clear(s.trades[:s.nt])
	s.n, s.nt, s.Added = 0, 0, nil
}
