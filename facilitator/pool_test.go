package facilitator

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// ether is 10^18 wei.
var ether = big.NewInt(1e18)

// poolConfig is env's Config with a pool of n signer lanes, each a fresh account funded
// with 1 ETH, the primary first.
func (v *testEnv) poolConfig(t testing.TB, n int) (Config, []testenv.Account) {
	t.Helper()
	cfg := v.config(t)
	var accs []testenv.Account
	for range n {
		a := testenv.NewAccount(t)
		v.chain.SetBalance(t, a.Address, ether)
		accs = append(accs, a)
	}
	cfg.Signer, cfg.Signers = accs[0].Key, nil
	for _, a := range accs[1:] {
		cfg.Signers = append(cfg.Signers, a.Key)
	}
	return cfg, accs
}

// settleOK settles a fresh payment from payer and fails t unless it succeeds; it returns
// the journal row.
func (v *testEnv) settleOK(t *testing.T, e *Service, cfg Config, payer testenv.Account) journal.Settlement {
	t.Helper()
	p, r := v.pay(t, x402.Version2, payer, v.chain.Accounts[9].Address)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	row, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey())
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// TestPoolPicksTheLeastBusyLane: a settle takes the lane in the pool with the fewest
// settlements in flight; a lane out of the pool or full is passed over; ties take turns.
func TestPoolPicksTheLeastBusyLane(t *testing.T) {
	lanes := []*lane{{pending: 3}, {pending: 1}, {pending: 2}, {pending: 0, out: true}}
	p := &pool{lanes: lanes, max: 3}
	for i := range 3 {
		ln, funded := p.pick(nil)
		if ln != lanes[1] || !funded {
			t.Fatalf("pick %d = lane %v, want the lane with 1 in flight", i, ln)
		}
	}
	lanes[1].pending, lanes[2].pending = 3, 3
	if ln, funded := p.pick(nil); ln != nil || !funded {
		t.Fatalf("every lane in the pool full: pick = %v, %v; want none, funded", ln, funded)
	}
	for _, ln := range lanes {
		ln.pending = 0
	}
	seen := map[*lane]int{}
	for range 6 {
		ln, _ := p.pick(nil)
		seen[ln]++
	}
	if seen[lanes[0]] != 2 || seen[lanes[1]] != 2 || seen[lanes[2]] != 2 || seen[lanes[3]] != 0 {
		t.Fatalf("idle lanes picked %v times; want 2 each and none for the lane out of the pool", seen)
	}
	if ln, _ := p.pick(lanes[3]); ln != nil {
		t.Fatal("picked the only lane allowed although it is out of the pool")
	}
}

// TestPoolSpreadsSettlements: settlements go out on every lane of the pool, each lane with
// its own consecutive nonces, and the journal row of each names the lane that sent it.
func TestPoolSpreadsSettlements(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 3)
	e := env.engine(t, cfg)
	var wg sync.WaitGroup
	rows := make([]journal.Settlement, 9)
	for i := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i] = env.settleOK(t, e, cfg, env.chain.Accounts[1+i%8])
		}()
	}
	wg.Wait()
	sent := map[common.Address]int{}
	for _, row := range rows {
		from, err := types.Sender(types.LatestSignerForChainID(env.chain.ChainID), decodeTx(t, row.RawTx))
		if err != nil || from != row.Sender {
			t.Fatalf("row sender %s, transaction signed by %s (%v)", row.Sender.Hex(), from.Hex(), err)
		}
		sent[row.Sender]++
	}
	for _, a := range accs {
		if sent[a.Address] == 0 {
			t.Errorf("lane %s sent nothing: %v", a.Address.Hex(), sent)
		}
		if n := env.signerNonce(t, a.Address); n != uint64(sent[a.Address]) {
			t.Errorf("lane %s: %d mined, %d journaled", a.Address.Hex(), n, sent[a.Address])
		}
	}
}

// TestSupportedListsEverySigner: /supported lists every lane of the pool, the primary
// first, and names the primary as upto's facilitator.
func TestSupportedListsEverySigner(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 3)
	e := env.engine(t, cfg)
	got, err := e.Supported(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := got.Signers["eip155:*"]
	if len(s) != 3 || s[0] != accs[0].Address.Hex() || s[1] != accs[1].Address.Hex() || s[2] != accs[2].Address.Hex() {
		t.Fatalf("signers = %v, want the three lanes, primary first", s)
	}
	for _, k := range got.Kinds {
		if k.Scheme == x402.SchemeUpto && k.Extra[x402.ExtraFacilitatorAddress] != accs[0].Address.Hex() {
			t.Errorf("upto facilitator = %v, want the primary signer", k.Extra)
		}
	}
	info := e.Info(context.Background())
	b, _ := json.Marshal(info)
	if len(info.Lanes) != 3 || info.Lanes[2].Address != accs[2].Address.Hex() || !info.Lanes[2].InPool || info.Lanes[2].Balance != ether.String() {
		t.Fatalf("detailed health lanes = %s, want the three lanes in the pool with their balances", b)
	}
	for _, a := range accs {
		if strings.Contains(string(b), hex.EncodeToString(crypto.FromECDSA(a.Key))) {
			t.Fatal("detailed health carries a signer key")
		}
	}
}

// laneEvents records Config.OnLaneFunds calls.
type laneEvents struct {
	mu  sync.Mutex
	got []string
}

func (l *laneEvents) record(network string, signer common.Address, funded bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	state := "out"
	if funded {
		state = "in"
	}
	l.got = append(l.got, signer.Hex()+" "+state)
}

func (l *laneEvents) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.got, ", ")
}

// TestPoolTakesALaneShortOfGasOut: a lane whose receipt leaves its gas balance under
// min_gas_balance leaves the pool at once (before the next balance check), so the next
// settles go to the other lane; with every lane short, a settle is refused with
// relayer_insufficient_funds before anything is claimed or sent, and the same payment
// settles once the periodic check finds a lane funded again.
func TestPoolTakesALaneShortOfGasOut(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 2)
	a, b := accs[0], accs[1]
	minGas := new(big.Int).Div(ether, big.NewInt(10))
	cfg.MinGasBalance = minGas.String()
	cfg.BalanceCheckInterval = Duration(20 * time.Millisecond)
	events := &laneEvents{}
	cfg.OnLaneFunds = events.record
	core, logs := observer.New(zap.DebugLevel)
	cfg.Logger = zap.New(core)
	// b holds enough for one settlement above the threshold, not for two
	env.chain.SetBalance(t, b.Address, new(big.Int).Add(minGas, big.NewInt(1e12)))
	e := env.engine(t, cfg)

	first, second := env.settleOK(t, e, cfg, env.chain.Accounts[1]), env.settleOK(t, e, cfg, env.chain.Accounts[2])
	if first.Sender != a.Address || second.Sender != b.Address {
		t.Fatalf("senders %s, %s; want a then b", first.Sender.Hex(), second.Sender.Hex())
	}
	if got := events.String(); got != b.Address.Hex()+" out" {
		t.Fatalf("lane events %q, want b out", got)
	}
	for i := range 3 {
		if row := env.settleOK(t, e, cfg, env.chain.Accounts[3+i]); row.Sender != a.Address {
			t.Fatalf("settle %d went to %s with b out of the pool", i, row.Sender.Hex())
		}
	}

	env.chain.SetBalance(t, a.Address, big.NewInt(1e15))
	e.CheckBalances(context.Background())
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[6], env.chain.Accounts[9].Address)
	nonces := []uint64{env.pendingNonce(t, a.Address), env.pendingNonce(t, b.Address)}
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonChainUnavailable.V2() ||
		!strings.Contains(res.ErrorMessage, "relayer_insufficient_funds") || res.Transaction != "" {
		t.Fatalf("settle with every lane short of gas = %+v, %v; want chain_unavailable, relayer_insufficient_funds, nothing sent", res, err)
	}
	if env.pendingNonce(t, a.Address) != nonces[0] || env.pendingNonce(t, b.Address) != nonces[1] {
		t.Fatal("a lane sent a transaction while out of the pool")
	}

	env.chain.SetBalance(t, b.Address, ether)
	ctx, cancel := context.WithCancel(context.Background())
	wait := e.Start(ctx, nil)
	defer func() { cancel(); wait() }()
	for deadline := time.Now().Add(time.Minute); !e.Lanes()[1].InPool; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lane b is not back in the pool: %+v", e.Lanes())
		}
	}
	res, err = e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("the refused payment, once b is funded: %+v, %v", res, err)
	}
	want := b.Address.Hex() + " out, " + a.Address.Hex() + " out, " + b.Address.Hex() + " in"
	if got := events.String(); got != want {
		t.Fatalf("lane events %q, want %q", got, want)
	}
	// the log names the lane by its address, never by its key
	warned := 0
	for _, entry := range logs.All() {
		line := fmt.Sprint(entry.Message, entry.ContextMap())
		for _, acc := range accs {
			if strings.Contains(line, hex.EncodeToString(crypto.FromECDSA(acc.Key))) {
				t.Fatalf("a signer key in the log: %s", entry.Message)
			}
		}
		if strings.Contains(entry.Message, "relayer_insufficient_funds") {
			warned++
		}
	}
	if warned != 2 {
		t.Fatalf("%d relayer_insufficient_funds log lines, want 2", warned)
	}
}

// TestPoolTwoLanesNeverBroadcastOnePaymentTwice: settles of one payment racing on two
// lanes (and on two engines sharing the store and the journal, each with its own lanes)
// broadcast one transaction: the claim is per authorization, not per lane.
func TestPoolTwoLanesNeverBroadcastOnePaymentTwice(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 2)
	e := env.engine(t, cfg)
	cfg2 := cfg
	var keys2 []*ecdsa.PrivateKey
	for range 2 {
		a := testenv.NewAccount(t)
		env.chain.SetBalance(t, a.Address, ether)
		keys2 = append(keys2, a.Key)
		accs = append(accs, a)
	}
	cfg2.Signer, cfg2.Signers = keys2[0], keys2[1:]
	e2 := env.engine(t, cfg2)
	engines := []*Service{e, e, e2, e2}
	payee := env.chain.Accounts[9].Address
	for round := range 4 {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[1+round], payee)
		before := env.token.BalanceOf(t, payee)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for _, eng := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := eng.Settle(context.Background(), p, r)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && res.Success:
					won++
				case err != nil || (res.ErrorReason != x402.ReasonDuplicateSettlement.V2() && res.ErrorReason != x402.ReasonNonceUsed.V2()):
					// the claim, the journal, or (once the winner is mined) the token refuses it
					t.Errorf("round %d: a losing settle answered %+v, %v; want duplicate_settlement or nonce used", round, res, err)
				}
			}()
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("round %d: %d settles succeeded, want 1", round, won)
		}
		if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(testAmount) != 0 {
			t.Fatalf("round %d: payee received %s, want %s once", round, d, testAmount)
		}
	}
	var total uint64
	for _, a := range accs {
		total += env.pendingNonce(t, a.Address)
	}
	if total != 4 {
		t.Fatalf("the lanes sent %d transactions for 4 payments", total)
	}
}

// TestPoolRestartResumesEachLane: settlements left pending on two lanes by an engine that
// stops are finished by the next engine's start-up reconcile, and its new settlements
// continue each lane's nonces: no gap, no nonce used twice.
func TestPoolRestartResumesEachLane(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 2)
	cfg.ReceiptTimeout = Duration(200 * time.Millisecond)
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	env.chain.SetAutomine(t, false)
	var keys []string
	for i := range 4 {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[1+i], env.chain.Accounts[9].Address)
		res, err := e.Settle(context.Background(), p, r)
		if err != nil || res.ErrorReason != x402.ReasonSettlementPending.V2() {
			t.Fatalf("settle %d = %+v, %v; want settlement_pending", i, res, err)
		}
		keys = append(keys, x402.KeyOf(p, r).AuthorizationKey())
	}
	e.Close()
	env.chain.SetAutomine(t, true)

	e2 := env.engine(t, cfg) // start-up reconcile: resend, receipt, confirmed
	if rep := e2.StartupReconcile(); rep.Confirmed != 4 {
		t.Fatalf("start-up reconcile %+v, want 4 confirmed", rep)
	}
	sent := map[common.Address]uint64{}
	for _, k := range keys {
		row, err := cfg.Journal.Get(context.Background(), k)
		if err != nil || row.State != journal.StateConfirmed {
			t.Fatalf("row %s = %+v, %v; want confirmed", k, row, err)
		}
		sent[row.Sender]++
	}
	for i := range 4 {
		row := env.settleOK(t, e2, cfg, env.chain.Accounts[5+i%3])
		if row.SenderNonce != sent[row.Sender] {
			t.Fatalf("lane %s resumed at nonce %d, want %d", row.Sender.Hex(), row.SenderNonce, sent[row.Sender])
		}
		sent[row.Sender]++
	}
	for _, a := range accs {
		if sent[a.Address] < 2 {
			t.Errorf("lane %s sent %d of 8", a.Address.Hex(), sent[a.Address])
		}
		if n := env.signerNonce(t, a.Address); n != sent[a.Address] {
			t.Errorf("lane %s: %d mined, %d journaled", a.Address.Hex(), n, sent[a.Address])
		}
	}
}

// TestPoolReconcileBumpsWithTheLaneThatSent: a stuck settlement of the second lane is
// replaced, by Reconcile, with a transaction signed by that lane's key for that lane's
// nonce, and settles once.
func TestPoolReconcileBumpsWithTheLaneThatSent(t *testing.T) {
	env := newTestEnv(t)
	cfg, accs := env.poolConfig(t, 2)
	cfg.ReceiptTimeout = Duration(300 * time.Millisecond)
	e := env.engine(t, cfg)
	if row := env.settleOK(t, e, cfg, env.chain.Accounts[1]); row.Sender != accs[0].Address {
		t.Fatalf("first settle on %s, want the primary", row.Sender.Hex())
	}
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	payee := env.chain.Accounts[9].Address
	before := env.token.BalanceOf(t, payee)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[2], payee)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.ErrorReason != x402.ReasonSettlementPending.V2() {
		t.Fatalf("settle = %+v, %v; want settlement_pending", res, err)
	}
	key := x402.KeyOf(p, r).AuthorizationKey()
	row, err := cfg.Journal.Get(context.Background(), key)
	if err != nil || row.Sender != accs[1].Address {
		t.Fatalf("row %+v, %v; want sent by the second lane", row, err)
	}
	s := &stuckSettlement{env: env, first: decodeTx(t, row.RawTx)}
	s.spikeBaseFee(t, new(big.Int).Add(s.first.GasFeeCap(), big.NewInt(1)))
	env.chain.SetAutomine(t, true)
	rep, err := e.Reconcile(context.Background())
	if err != nil || rep.Bumped != 1 || rep.Confirmed != 1 {
		t.Fatalf("reconcile = %+v, %v; want one bumped and confirmed", rep, err)
	}
	as, err := cfg.Journal.Attempts(context.Background(), key)
	if err != nil || len(as) != 2 {
		t.Fatalf("attempts = %+v, %v; want the first and one replacement", as, err)
	}
	rep2 := decodeTx(t, as[1].RawTx)
	from, err := types.Sender(types.LatestSignerForChainID(env.chain.ChainID), rep2)
	if err != nil || from != accs[1].Address || rep2.Nonce() != s.first.Nonce() {
		t.Fatalf("replacement signed by %s (%v), nonce %d; want the second lane, nonce %d", from.Hex(), err, rep2.Nonce(), s.first.Nonce())
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(testAmount) != 0 {
		t.Fatalf("payee received %s, want %s once", d, testAmount)
	}
	if n := env.signerNonce(t, accs[0].Address); n != 1 {
		t.Fatalf("the primary lane has %d mined transactions, want 1 (the stuck one was not its)", n)
	}
}
