package facilitator

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// permit2Env is a testEnv whose chain has our Permit2 and x402 proxies at the canonical
// addresses (docs/payments.md#permit2) and plain, an 18-decimal ERC-20 without EIP-3009
// that accounts 1..6 hold and have approved Permit2 for, and account 8 holds without an
// approval. Account 9 is the payee.
type permit2Env struct {
	*testEnv
	plain *testenv.PlainToken
	payee common.Address
}

// permit2Price is the price of the Permit2 payments: 1.5 tokens of 18 decimals, past the
// 18 digits of an EIP-3009 value.
var permit2Price, _ = new(big.Int).SetString("1500000000000000000", 10)

func newPermit2Env(t testing.TB) *permit2Env {
	t.Helper()
	env := newTestEnv(t)
	env.chain.InstallPermit2(t)
	plain := env.chain.DeployPlainToken(t, "TDAI", 18)
	funds := new(big.Int).Mul(big.NewInt(1000), big.NewInt(1e18))
	for i, a := range env.chain.Accounts[1:9] {
		plain.Mint(t, a.Address, funds)
		if i < 6 {
			plain.ApprovePermit2(t, a)
		}
	}
	return &permit2Env{testEnv: env, plain: plain, payee: env.chain.Accounts[9].Address}
}

// config is testEnv.config with plain among the network's Permit2 tokens.
func (v *permit2Env) config(t testing.TB) Config {
	cfg := v.testEnv.config(t)
	cfg.Networks[0].Permit2Tokens = []string{v.plain.Address.Hex()}
	return cfg
}

// permit2Requirements asks amount of plain for the payee: exact over Permit2, or upto
// with e's signer as the facilitator a payer's witness names.
func (v *permit2Env) permit2Requirements(e *Service, scheme string, amount *big.Int) *x402.Requirements {
	extra := map[string]any{x402.ExtraAssetTransferMethod: x402.TransferPermit2}
	if scheme == x402.SchemeUpto {
		extra = map[string]any{x402.ExtraFacilitatorAddress: e.Address().Hex()}
	}
	return &x402.Requirements{Scheme: scheme, Network: v.net.CAIP2, Amount: new(big.Int).Set(amount), Asset: v.plain.Address,
		PayTo: v.payee, MaxTimeoutSeconds: 600, Extra: extra}
}

// payPermit2 has the real @x402/evm 2.27 client pay each of rs as payer (one node process
// for them all) and returns the decoded payments, in order.
func payPermit2(t testing.TB, payer testenv.Account, rs ...*x402.Requirements) []*x402.Payment {
	t.Helper()
	required := make([]any, len(rs))
	for i, r := range rs {
		required[i] = x402.PaymentRequiredV2{X402Version: x402.Version2, Resource: &x402.ResourceInfo{URL: "http://api.test/metered"},
			Accepts: []x402.RequirementsV2{r.V2()}}
	}
	ps := make([]*x402.Payment, len(rs))
	for i, h := range testenv.SignPermit2(t, payer, required...) {
		p, err := x402.DecodePaymentHeader(x402.HeaderPaymentSignature, h, nil)
		if err != nil || p.Permit2 == nil {
			t.Fatalf("the client's payment %d: %+v, %v", i, p, err)
		}
		ps[i] = p
	}
	return ps
}

func (v *permit2Env) received(t testing.TB, before *big.Int) *big.Int {
	return new(big.Int).Sub(v.plain.BalanceOf(t, v.payee), before)
}

// TestPermit2ExactPaysExactlyThePriceOnce: an exact payment over Permit2 from the real
// client verifies, settles through the exact proxy with the payee receiving exactly the
// price, and is journaled under its Permit2 nonce; the same payment is never broadcast
// again, by this engine or by another one with its own store and journal: the nonce is
// spent on chain (permit2_invalid_nonce).
func TestPermit2ExactPaysExactlyThePriceOnce(t *testing.T) {
	env := newPermit2Env(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	payer := env.chain.Accounts[1]
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	p := payPermit2(t, payer, r)[0]
	ctx := context.Background()
	before := env.plain.BalanceOf(t, env.payee)

	if v, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid || v.Payer != payer.Address.Hex() {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	res, err := e.Settle(ctx, p, r)
	if err != nil || !res.Success || res.Amount != permit2Price.String() || res.Transaction == "" {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if got := env.received(t, before); got.Cmp(permit2Price) != 0 {
		t.Fatalf("payee received %s, want %s", got, permit2Price)
	}
	if !env.chain.Permit2NonceUsed(t, payer.Address, p.Permit2.Nonce) {
		t.Fatal("the Permit2 nonce is not spent")
	}
	key := x402.KeyOf(p, r)
	row, err := decidedRow(t, cfg.Journal, key.AuthorizationKey())
	if err != nil || row.State != journal.StateConfirmed || !x402.IsPermit2Key(row.PaymentKey) || row.Asset != env.plain.Address || row.Amount.Cmp(permit2Price) != 0 {
		t.Fatalf("journal row = %+v, %v", row, err)
	}

	refusedSettle(t, e, p, r, x402.ReasonPermit2InvalidNonce)
	other := env.engine(t, env.config(t))
	refusedVerify(t, other, p, r, x402.ReasonPermit2InvalidNonce)
	refusedSettle(t, other, p, r, x402.ReasonPermit2InvalidNonce)
	if got := env.received(t, before); got.Cmp(permit2Price) != 0 {
		t.Fatalf("after the replays the payee has received %s, want %s", got, permit2Price)
	}
}

// TestPermit2WithoutAllowanceIsRefusedWith412Reason: a payer that holds the token but has
// not approved Permit2 is refused permit2_allowance_required at verify and at settle, and
// nothing moves; after its one-time approval the same payment settles.
func TestPermit2WithoutAllowanceIsRefusedWith412Reason(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	payer := env.chain.Accounts[8]
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	p := payPermit2(t, payer, r)[0]
	ctx := context.Background()
	before := env.plain.BalanceOf(t, env.payee)

	refusedVerify(t, e, p, r, x402.ReasonPermit2AllowanceRequired)
	refusedSettle(t, e, p, r, x402.ReasonPermit2AllowanceRequired)
	if got := env.received(t, before); got.Sign() != 0 {
		t.Fatalf("payee received %s without an allowance", got)
	}
	env.plain.ApprovePermit2(t, payer)
	if res, err := e.Settle(ctx, p, r); err != nil || !res.Success {
		t.Fatalf("settle after the approval = %+v, %v", res, err)
	}
}

// TestUptoSettlesTheMeteredAmountAndNeverMore: an upto payment verifies for its maximum,
// refuses a settle above it before anything is touched, and settles exactly the metered
// amount (37% of the maximum), which the settle response's amount carries. An upto
// settle of 0 succeeds, moves nothing, broadcasts nothing and spends the authorization.
func TestUptoSettlesTheMeteredAmountAndNeverMore(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	payer := env.chain.Accounts[2]
	max := new(big.Int).Mul(big.NewInt(2), big.NewInt(1e18))
	r := env.permit2Requirements(e, x402.SchemeUpto, max)
	ps := payPermit2(t, payer, r, r)
	p, zero := ps[0], ps[1]
	ctx := context.Background()
	before := env.plain.BalanceOf(t, env.payee)
	signer := env.chain.FacilitatorAccount().Address

	if v, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	less := env.permit2Requirements(e, x402.SchemeUpto, big.NewInt(1))
	refusedVerify(t, e, p, less, x402.ReasonPermit2AmountMismatch)
	above := env.permit2Requirements(e, x402.SchemeUpto, new(big.Int).Add(max, big.NewInt(1)))
	refusedSettle(t, e, p, above, x402.ReasonUptoSettlementExceedsAmount)
	if n := env.signerNonce(t, signer); n != 0 {
		t.Fatalf("a refused settle sent %d transactions", n)
	}
	metered := new(big.Int).Div(new(big.Int).Mul(max, big.NewInt(37)), big.NewInt(100))
	res, err := e.Settle(ctx, p, env.permit2Requirements(e, x402.SchemeUpto, metered))
	if err != nil || !res.Success || res.Amount != metered.String() {
		t.Fatalf("settle of the metered amount = %+v, %v", res, err)
	}
	if got := env.received(t, before); got.Cmp(metered) != 0 {
		t.Fatalf("payee received %s, want the metered %s", got, metered)
	}

	res, err = e.Settle(ctx, zero, env.permit2Requirements(e, x402.SchemeUpto, new(big.Int)))
	if err != nil || !res.Success || res.Amount != "0" || res.Transaction != "" {
		t.Fatalf("settle of 0 = %+v, %v; want success with no transaction", res, err)
	}
	if n := env.signerNonce(t, signer); n != 1 || env.chain.Permit2NonceUsed(t, payer.Address, zero.Permit2.Nonce) {
		t.Fatalf("a settle of 0 broadcast: signer nonce %d", n)
	}
	refusedSettle(t, e, zero, r, x402.ReasonDuplicateSettlement)
	if got := env.received(t, before); got.Cmp(metered) != 0 {
		t.Fatalf("payee received %s in all, want %s", got, metered)
	}
}

// TestPermit2StaticRefusals: what the facilitator refuses before any chain state, with the
// reference's reasons: a token it does not settle, a Permit2 payment for an EIP-3009
// requirement, a witness naming another facilitator, a deadline past, a payload altered
// after signing.
func TestPermit2StaticRefusals(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	payer := env.chain.Accounts[3]
	exact := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	upto := env.permit2Requirements(e, x402.SchemeUpto, permit2Price)
	elsewhere := env.permit2Requirements(e, x402.SchemeUpto, permit2Price)
	elsewhere.Extra = map[string]any{x402.ExtraFacilitatorAddress: env.chain.Accounts[5].Address.Hex()}
	ps := payPermit2(t, payer, exact, upto, elsewhere)
	ctx := context.Background()

	unlisted := env.testEnv.engine(t, env.testEnv.config(t)) // plain is not among its Permit2 tokens
	eip3009 := *exact
	eip3009.Asset, eip3009.Extra = env.token.Address, map[string]any{"name": env.token.Name, "version": env.token.Version}
	tampered := *ps[0]
	tp := *tampered.Permit2
	tp.Amount = new(big.Int).Add(tp.Amount, big.NewInt(1))
	tampered.Permit2, tampered.Authorization.Value = &tp, tp.Amount
	tamperedReq := env.permit2Requirements(e, x402.SchemeExact, tp.Amount)
	acc := *tamperedReq
	tampered.Accepted = &acc
	lateCfg := env.config(t)
	lateCfg.Now = func() time.Time { return env.now.Add(time.Hour) }
	late := env.engine(t, lateCfg)

	for _, c := range []struct {
		name string
		e    *Service
		p    *x402.Payment
		r    *x402.Requirements
		want x402.Reason
	}{
		{"a token the network does not list", unlisted, ps[0], exact, x402.ReasonAssetMismatch},
		{"an EIP-3009 requirement", e, ps[0], &eip3009, x402.ReasonUnsupportedPayloadType},
		{"a witness naming another facilitator", e, ps[2], elsewhere, x402.ReasonUptoFacilitatorMismatch},
		{"an amount altered after signing", e, &tampered, tamperedReq, x402.ReasonPermit2InvalidSignature},
		{"a deadline past", late, ps[0], exact, x402.ReasonPermit2DeadlineExpired},
	} {
		t.Run(c.name, func(t *testing.T) { refusedVerify(t, c.e, c.p, c.r, c.want) })
	}
	if v, err := e.Verify(ctx, x402.VerifyInput{Payment: ps[1], Requirements: upto}); err != nil || !v.IsValid {
		t.Fatalf("the valid upto payment: %+v, %v", v, err)
	}
}

// TestPermit2SixtyFourConcurrentDistinctPaymentsAllSettle: 64 distinct Permit2 payments
// settled at once through one engine all settle, each once, and the payee receives 64
// prices.
func TestPermit2SixtyFourConcurrentDistinctPaymentsAllSettle(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	rs := make([]*x402.Requirements, 64)
	for i := range rs {
		rs[i] = r
	}
	ps := payPermit2(t, env.chain.Accounts[4], rs...)
	before := env.plain.BalanceOf(t, env.payee)
	for i, res := range settleAtOnce(e, ps, r) {
		if res.err != nil || !res.Success {
			t.Errorf("payment %d: %+v, %v", i, res.SettleResponse, res.err)
		}
	}
	want := new(big.Int).Mul(permit2Price, big.NewInt(int64(len(ps))))
	if got := env.received(t, before); got.Cmp(want) != 0 {
		t.Fatalf("payee received %s, want %s", got, want)
	}
}

// TestPermit2ReconcileKnowsPermit2Payments: reconcile reads a Permit2 row's nonce in
// Permit2's bitmap. A row journaled before a crash, whose payment another caller then
// settled through the proxy, closes as settled elsewhere; one journaled and never sent is
// sent again, its journaled bytes, and confirmed.
func TestPermit2ReconcileKnowsPermit2Payments(t *testing.T) {
	env := newPermit2Env(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	crashing := cfg
	crashing.beforeBroadcast = func(journal.Settlement) error { return errors.New("simulated crash") }
	c := env.engine(t, crashing)
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	ps := payPermit2(t, env.chain.Accounts[5], r, r)
	ctx := context.Background()
	before := env.plain.BalanceOf(t, env.payee)

	if _, err := c.Settle(ctx, ps[0], r); err == nil {
		t.Fatal("want the simulated crash")
	}
	data, err := e.abi.proxySettleCalldata(ps[0].Permit2, permit2Price, ps[0].Signature)
	if err != nil {
		t.Fatal(err)
	}
	env.chain.Transact(t, env.chain.Accounts[8], x402.ExactPermit2ProxyAddress, data)
	rep, err := e.Reconcile(ctx)
	if err != nil || rep.Failed != 1 || len(rep.Outcomes) != 1 || rep.Outcomes[0].Reason != ReconcileSettledElsewhere {
		t.Fatalf("reconcile = %+v, %v; want the row settled elsewhere", rep, err)
	}

	if _, err := c.Settle(ctx, ps[1], r); err == nil {
		t.Fatal("want the simulated crash")
	}
	rep, err = e.Reconcile(ctx)
	if err != nil || rep.Resent != 1 || rep.Confirmed != 1 {
		t.Fatalf("reconcile = %+v, %v; want the journaled transaction resent and confirmed", rep, err)
	}
	want := new(big.Int).Mul(permit2Price, big.NewInt(2))
	if got := env.received(t, before); got.Cmp(want) != 0 {
		t.Fatalf("payee received %s, want %s", got, want)
	}
}

// TestPermit2TwentyConcurrentSettlesOfOnePaymentBroadcastOnce: twenty settles of one
// Permit2 payment at once make one broadcast: the claim on (network, Permit2, payer,
// nonce) lets one through; the others are refused and nothing moves twice.
func TestPermit2TwentyConcurrentSettlesOfOnePaymentBroadcastOnce(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	p := payPermit2(t, env.chain.Accounts[6], r)[0]
	before := env.plain.BalanceOf(t, env.payee)
	won := 0
	for _, res := range settleAtOnce(e, slices.Repeat([]*x402.Payment{p}, 20), r) {
		if res.err == nil && res.Success {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d settles succeeded, want 1", won)
	}
	if n := env.signerNonce(t, env.chain.FacilitatorAccount().Address); n != 1 {
		t.Fatalf("signer sent %d transactions, want 1", n)
	}
	if got := env.received(t, before); got.Cmp(permit2Price) != 0 {
		t.Fatalf("payee received %s, want %s", got, permit2Price)
	}
}

// settled is one settle's answer.
type settled struct {
	x402.SettleResponse
	err error
}

// settleAtOnce settles every payment of ps for r, each in its own goroutine, all at once.
func settleAtOnce(e *Service, ps []*x402.Payment, r *x402.Requirements) []settled {
	out := make([]settled, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { out[i].SettleResponse, out[i].err = e.Settle(context.Background(), p, r) })
	}
	wg.Wait()
	return out
}

// refusedVerify fails t unless e refuses to verify p for r, with want.
func refusedVerify(t *testing.T, e *Service, p *x402.Payment, r *x402.Requirements, want x402.Reason) {
	t.Helper()
	if v, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || v.IsValid || v.InvalidReason != string(want) {
		t.Fatalf("verify = %+v, %v; want %s", v, err, want)
	}
}

// refusedSettle fails t unless e refuses to settle p for r, with want.
func refusedSettle(t *testing.T, e *Service, p *x402.Payment, r *x402.Requirements, want x402.Reason) {
	t.Helper()
	if res, err := e.Settle(context.Background(), p, r); err != nil || res.Success || res.ErrorReason != string(want) {
		t.Fatalf("settle = %+v, %v; want %s", res, err, want)
	}
}

// TestPermit2FromAContractWalletIsCheckedByERC1271: a Permit2 payment from a contract
// wallet (TestWallet1271, which approved Permit2 through a call of its own) verifies by the
// wallet's isValidSignature over Permit2's digest, as Permit2 checks it, and settles; the
// same payment signed by another key than the wallet's owner is invalid_permit2_signature.
func TestPermit2FromAContractWalletIsCheckedByERC1271(t *testing.T) {
	env := newPermit2Env(t)
	e := env.engine(t, env.config(t))
	owner := env.chain.Accounts[7]
	wallet := env.chain.DeployWallet1271(t, owner)
	env.plain.Mint(t, wallet.Address, permit2Price)
	approve, err := contracts.PlainTokenABI.Pack("approve", x402.Permit2Address, permit2Price)
	if err != nil {
		t.Fatal(err)
	}
	wallet.Execute(t, env.plain.Address, approve)
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	authorization := func() *x402.Permit2Authorization {
		nonce := testenv.RandomNonce(t)
		return &x402.Permit2Authorization{From: wallet.Address, Token: env.plain.Address, Amount: permit2Price,
			Spender: x402.ExactPermit2ProxyAddress, Nonce: new(big.Int).SetBytes(nonce[:]),
			Deadline: big.NewInt(env.now.Unix() + 600), To: env.payee, ValidAfter: big.NewInt(0)}
	}
	forged := permit2Payment(t, env.chain.ChainID, authorization(), r, env.chain.Accounts[6].Key)
	refusedVerify(t, e, forged, r, x402.ReasonPermit2InvalidSignature)
	p := permit2Payment(t, env.chain.ChainID, authorization(), r, owner.Key)
	before := env.plain.BalanceOf(t, env.payee)
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if got := env.received(t, before); got.Cmp(permit2Price) != 0 {
		t.Fatalf("payee received %s, want %s", got, permit2Price)
	}
}
