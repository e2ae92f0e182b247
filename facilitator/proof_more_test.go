package facilitator

import (
	"context"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// proofEnv: an engine with a skewable clock, counting token state reads and recoveries.
func proofEnv(t *testing.T, mod func(*Config, *atomic.Int64)) (*testEnv, *Service, *testenv.CallCounter, *atomic.Int64, *atomic.Int64) {
	env := newTestEnv(t)
	node := testenv.CountCalls(t, env.chain.RPCURL, authorizationStateSelector)
	cfg := env.config(t)
	cfg.Networks[0].RPC = node.URL
	skew := new(atomic.Int64)
	cfg.Now = func() time.Time { return env.now.Add(time.Duration(skew.Load())) }
	if mod != nil {
		mod(&cfg, skew)
	}
	e := env.engine(t, cfg)
	return env, e, node, countRecoveries(t), skew
}

// Mutations of the very same payment/requirements values after Verify: every one must be
// refused at settle, before anything is sent, and the proof must not stand for them.
func TestProofMutationsAfterVerifyAreRefused(t *testing.T) {
	env, e, _, recoveries, _ := proofEnv(t, nil)
	payer, payee, other := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[3]
	cases := []struct {
		name   string
		mutate func(p *x402.Payment, r *x402.Requirements)
	}{
		{"value raised in place (payment and requirements kept matching)", func(p *x402.Payment, r *x402.Requirements) {
			p.Authorization.Value.SetInt64(20_000)
			r.Amount.SetInt64(20_000)
			p.Accepted.Amount.SetInt64(20_000)
		}},
		{"recipient changed (payment and requirements kept matching)", func(p *x402.Payment, r *x402.Requirements) {
			p.Authorization.To, r.PayTo, p.Accepted.PayTo = other.Address, other.Address, other.Address
		}},
		{"validBefore extended in place", func(p *x402.Payment, r *x402.Requirements) {
			p.Authorization.ValidBefore.Add(p.Authorization.ValidBefore, big.NewInt(3600))
		}},
		{"validAfter moved in place", func(p *x402.Payment, r *x402.Requirements) {
			p.Authorization.ValidAfter.Sub(p.Authorization.ValidAfter, big.NewInt(1))
		}},
		{"nonce changed", func(p *x402.Payment, r *x402.Requirements) { p.Authorization.Nonce[0] ^= 1 }},
		{"payer changed", func(p *x402.Payment, r *x402.Requirements) { p.Authorization.From = other.Address }},
		{"signature slice replaced by other bytes", func(p *x402.Payment, r *x402.Requirements) {
			s := append([]byte(nil), p.Signature...)
			s[5] ^= 1
			p.Signature = s
		}},
		{"requirement asset changed", func(p *x402.Payment, r *x402.Requirements) {
			r.Asset = common.HexToAddress("0x1234")
			p.Accepted.Asset = r.Asset
		}},
		{"requirement network changed", func(p *x402.Payment, r *x402.Requirements) {
			r.Network, p.Network, p.Accepted.Network = "eip155:1", "eip155:1", "eip155:1"
		}},
		{"requirement amount changed only", func(p *x402.Payment, r *x402.Requirements) { r.Amount.SetInt64(5) }},
		{"domain extra changed", func(p *x402.Payment, r *x402.Requirements) {
			r.Extra = map[string]any{"name": "Other", "version": "9"}
			p.Accepted.Extra = r.Extra
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
				t.Fatalf("verify = %+v, %v", v, err)
			}
			recoveries.Store(0)
			tc.mutate(p, r)
			before := env.pendingNonce(t, env.chain.FacilitatorAccount().Address)
			res, err := e.InProcess().Settle(context.Background(), p, r)
			if err != nil || res.Success {
				t.Fatalf("settle = %+v, %v; want a refusal", res, err)
			}
			if res.Transaction != "" || env.pendingNonce(t, env.chain.FacilitatorAccount().Address) != before {
				t.Errorf("something was broadcast: %+v", res)
			}
			t.Logf("refused: %s (%d recoveries)", res.ErrorReason, recoveries.Load())
			if res.ErrorReason == x402.ReasonInvalidSignature.V2() && recoveries.Load() != 1 {
				t.Errorf("a changed payment was refused by the token, not by the facilitator's own recovery (%d recoveries): the proof stood for it", recoveries.Load())
			}
		})
	}
}

// A proof that is fresh (under proofTTL) of an authorization whose window has closed since.
func TestProofWindowClosedWithinTTL(t *testing.T) {
	env, e, node, recoveries, skew := proofEnv(t, nil)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	r := env.requirements(payee.Address, testAmount)
	a := env.authorization(t, payer.Address, payee.Address, testAmount)
	a.ValidBefore = big.NewInt(env.now.Unix() + 20)
	p := env.payment(x402.Version2, a, env.sign(t, payer.Key, a), r)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	recoveries.Store(0)
	before := node.Calls()
	skew.Add(int64(15 * time.Second))
	res, err := e.InProcess().Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonValidBefore.V2() {
		t.Fatalf("settle = %+v, %v; want valid_before", res, err)
	}
	t.Logf("recoveries %d, state reads %d", recoveries.Load(), node.Calls()-before)
}

// Same payment pointer, requirements copied: every check again (tests pr.r != r alone).
func TestProofSamePaymentOtherRequirementsPointer(t *testing.T) {
	env, e, node, recoveries, _ := proofEnv(t, nil)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	rc := *r
	recoveries.Store(0)
	before := node.Calls()
	if res, err := e.InProcess().Settle(context.Background(), p, &rc); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if recoveries.Load() != 1 || node.Calls()-before != 1 {
		t.Errorf("requirements copy: %d recoveries, %d state reads; want 1 and 1 (full checks)", recoveries.Load(), node.Calls()-before)
	}
}

// A second Verify of the same payment value drops the first Verify's proof, whatever it
// finds: after one that found the payment invalid, Settle recovers and reads again.
func TestProofSurvivesALaterFailedVerify(t *testing.T) {
	env, e, node, recoveries, _ := proofEnv(t, nil)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	pc, rc := *p, *r // settle an equal copy: the nonce is now used
	if res, err := e.InProcess().Settle(context.Background(), &pc, &rc); err != nil || !res.Success {
		t.Fatalf("settle copy = %+v, %v", res, err)
	}
	v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
	if err != nil || v.IsValid {
		t.Fatalf("second verify = %+v, %v; want invalid", v, err)
	}
	recoveries.Store(0)
	before := node.Calls()
	res, err := e.InProcess().Settle(context.Background(), p, r)
	if err != nil || res.Success {
		t.Fatalf("settle = %+v, %v; want refused", res, err)
	}
	if recoveries.Load() == 0 && node.Calls()-before == 0 {
		t.Errorf("settle refused %s with no recovery and no state read: the first Verify's proof stood after a later Verify found the payment invalid", res.ErrorReason)
	}
}

// clockVerdicts approves, advancing the engine's clock by d while it "polls".
type clockVerdicts struct {
	skew *atomic.Int64
	d    time.Duration
}

func (c *clockVerdicts) VerifyPayment(context.Context, *x402.Payment, *x402.Requirements) (verdict.GuardianResult, error) {
	c.skew.Add(int64(c.d))
	return verdict.GuardianResult{Approved: true, Status: verdict.GuardianApproved, Reason: "ok", RequestHash: "0xreq"}, nil
}

// A proof is dated when Verify's checks began, not after the verdict: a verdict that took
// 25 s and a Settle 25 s later find the checks 50 s old, past proofTTL, and check again.
func TestProofAgeStartsAfterTheVerdict(t *testing.T) {
	var cv clockVerdicts
	env, e, node, recoveries, skew := proofEnv(t, func(c *Config, skew *atomic.Int64) {
		cv = clockVerdicts{skew: skew, d: 25 * time.Second}
		c.VerdictMode, c.Verdicts = VerdictRequired, &cv
		c.ApprovalTTL = Duration(5 * time.Minute)
	})
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	checkedAt := skew.Load()
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	skew.Add(int64(25 * time.Second))
	recoveries.Store(0)
	before := node.Calls()
	res, err := e.InProcess().Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	age := time.Duration(skew.Load() - checkedAt)
	if recoveries.Load() == 0 && node.Calls()-before == 0 && age > proofTTL {
		t.Errorf("settle reused a proof whose checks ran %s before (proofTTL %s)", age, proofTTL)
	}
}

// Concurrent Verify and Settle of one payment value, and of many, under -race: one
// broadcast, no race.
func TestProofConcurrentVerifySettle(t *testing.T) {
	env, e, _, _, _ := proofEnv(t, nil)
	payee := env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], payee.Address)
	before := env.token.BalanceOf(t, payee.Address)
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		}()
		go func() {
			defer wg.Done()
			if res, err := e.InProcess().Settle(context.Background(), p, r); err == nil && res.Success {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 {
		t.Errorf("%d successful settles of one payment, want 1", ok.Load())
	}
	if got := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); got.Cmp(testAmount) != 0 {
		t.Errorf("payee got %s, want %s", got, testAmount)
	}
}

// The cache: many verifies without a settle fill it; the sweep keeps it at maxProofs.
func TestProofCacheBound(t *testing.T) {
	var ps proofs
	now := time.Unix(1_000_000, 0)
	for i := range maxProofs + 100 {
		ps.put(&checked{p: &x402.Payment{Signature: []byte{byte(i)}}, sig: []byte{byte(i)}, r: &x402.Requirements{}}, now)
	}
	if len(ps.m) != maxProofs {
		t.Errorf("%d proofs kept, want %d", len(ps.m), maxProofs)
	}
	ps.put(&checked{p: &x402.Payment{}, r: &x402.Requirements{}}, now.Add(proofTTL+time.Second))
	if len(ps.m) != 1 {
		t.Errorf("%d proofs after the sweep, want 1", len(ps.m))
	}
}

// Service's own Verify keeps no proof, and its Settle of a payment that InProcess verified
// takes none: the facilitator API serves Service as it is, so a remote /settle runs every
// check whatever wraps it.
func TestProofServiceNeverReuses(t *testing.T) {
	env, e, node, recoveries, _ := proofEnv(t, nil)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if v, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	if len(e.proofs.m) != 0 {
		t.Errorf("Service.Verify kept %d proofs", len(e.proofs.m))
	}
	p2, r2 := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p2, Requirements: r2}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	recoveries.Store(0)
	before := node.Calls()
	if res, err := e.Settle(context.Background(), p2, r2); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if recoveries.Load() != 1 || node.Calls()-before != 1 {
		t.Errorf("Service.Settle: %d recoveries, %d state reads; want 1 and 1", recoveries.Load(), node.Calls()-before)
	}
}

// An undeployed ERC-6492 wallet proved at Verify, then deployed by someone else before
// Settle: the settle must see the code and not deploy again (22dec40).
func TestProofERC6492DeployedBetweenVerifyAndSettle(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.ERC6492Factories = []string{create2Deployer.Hex()}
	cfg.SkipStartupReconcile = true
	e := env.engine(t, cfg)
	owner, payee := env.chain.Accounts[4], env.chain.Accounts[5]
	w := newCounterfactual(t, env, owner)
	env.token.Mint(t, w.address, big.NewInt(1_000_000))
	r := env.requirements(payee.Address, testAmount)
	a := env.authorization(t, w.address, payee.Address, testAmount)
	p := env.payment(x402.Version2, a, wrap6492(t, create2Deployer, w.calldata, env.sign(t, owner.Key, a)), r)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	env.chain.Transact(t, env.chain.Accounts[6], create2Deployer, w.calldata) // someone deploys it
	res, err := e.InProcess().Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
}

// TestProofStandsForAnUptoSettleOfLess: the gate settles an upto payment for its metered
// cost in a copy of the verified requirements (docs/gate.md#metering). That copy, for at most
// the proved maximum, reuses Verify's proof: one signature recovery and one read of the
// Permit2 state per paid request, as for exact. A copy for more than the maximum, or that
// differs in anything else, gets every check again.
func TestProofStandsForAnUptoSettleOfLess(t *testing.T) {
	env := newPermit2Env(t)
	node := testenv.CountCalls(t, env.chain.RPCURL, crypto.Keccak256([]byte("nonceBitmap(address,uint256)"))[:4])
	cfg := env.config(t)
	cfg.Networks[0].RPC = node.URL
	e := env.engine(t, cfg)
	recoveries := countRecoveries(t)
	max := big.NewInt(1_000_000)
	for _, tc := range []struct {
		name            string
		settle          func(r *x402.Requirements) *x402.Requirements
		recover, states int64
	}{
		{"a copy for half the maximum: the proof stands", func(r *x402.Requirements) *x402.Requirements {
			c := *r
			c.Amount = big.NewInt(500_000)
			return &c
		}, 1, 1},
		{"a copy for the maximum: the proof stands", func(r *x402.Requirements) *x402.Requirements {
			c := *r
			c.Amount = new(big.Int).Set(max)
			return &c
		}, 1, 1},
		{"a copy for half, with another timeout: every check again", func(r *x402.Requirements) *x402.Requirements {
			c := *r
			c.Amount, c.MaxTimeoutSeconds = big.NewInt(500_000), r.MaxTimeoutSeconds+1
			return &c
		}, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := env.permit2Requirements(e, x402.SchemeUpto, max)
			p := payPermit2(t, env.chain.Accounts[1], r)[0]
			recoveries.Store(0)
			before := node.Calls()
			if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
				t.Fatalf("verify = %+v, %v", v, err)
			}
			_, _ = e.InProcess().Settle(context.Background(), p, tc.settle(r))
			if recoveries.Load() != tc.recover || node.Calls()-before != tc.states {
				t.Errorf("%d recoveries, %d Permit2 state reads; want %d and %d", recoveries.Load(), node.Calls()-before, tc.recover, tc.states)
			}
		})
	}
}
