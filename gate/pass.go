package gate

import (
	"github.com/x402gate/x402gate/gate/pass"
)

// An access pass lets one settled payment buy access, for a while, to every path under a
// scope of one site (docs/gate.md#access-passes); gate/pass signs and checks it, and keeps
// the pass book. These names are gate/pass's, as the gate has always offered them.

// HeaderPass carries a pass (pass.HeaderPass).
const HeaderPass = pass.HeaderPass

// CookiePass is the name of the pass cookie (pass.CookiePass).
const CookiePass = pass.CookiePass

// HeaderPassRefused names why a pass or a sign-in-with-x proof was not honoured
// (pass.HeaderPassRefused).
const HeaderPassRefused = pass.HeaderPassRefused

// MinPassKeyBytes is the shortest pass key New accepts (pass.MinKeyBytes).
const MinPassKeyBytes = pass.MinKeyBytes

// PassRefusal is the machine-readable reason a pass was not honoured.
type PassRefusal = pass.Refusal

// Refusal reasons of a pass (HeaderPassRefused), checked in this order.
const (
	PassInvalid          = pass.Invalid
	PassKeyRetired       = pass.KeyRetired
	PassOtherSite        = pass.OtherSite
	PassOtherScope       = pass.OtherScope
	PassExpired          = pass.Expired
	PassStoreUnavailable = pass.StoreUnavailable
)

// PassConfig makes one settled payment buy access for a while (pass.Config).
type PassConfig = pass.Config

// Pass is how a request was let in by a pass, as the upstream sees it in Paid.Pass.
type Pass = pass.Pass

// Ways a pass is presented (Pass.Via).
const (
	PassViaCookie = pass.ViaCookie
	PassViaHeader = pass.ViaHeader
	PassViaSIWX   = pass.ViaSIWX
)

// PassBook remembers what sign-in-with-x needs (pass.Book). MemoryLedger and
// redisretry.Store implement it; a gate whose Ledger does not gets an in-process
// MemoryPassBook.
type PassBook = pass.Book

// MemoryPassBook is the in-process PassBook of one instance (pass.MemoryBook).
type MemoryPassBook = pass.MemoryBook

// DefaultMemoryPassEntries bounds a MemoryPassBook made with NewMemoryPassBook(0).
const DefaultMemoryPassEntries = pass.DefaultMemoryEntries

// NewMemoryPassBook returns an empty book holding at most maxEntries passes and as many
// nonces (0 means DefaultMemoryPassEntries).
func NewMemoryPassBook(maxEntries int) *MemoryPassBook { return pass.NewMemoryBook(maxEntries) }

// PassDescription says what one payment buys on this route for a request to resource:
// "24 hours of /premium/"; "" without passes.
func (g *Gate) PassDescription(resource string) string {
	if g.pass == nil {
		return ""
	}
	s, ok := pass.SiteOf(resource)
	if !ok {
		return ""
	}
	return g.pass.Describe(s.Path)
}
