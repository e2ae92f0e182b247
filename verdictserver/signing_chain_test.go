package verdictserver

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
)

// approval is GuardedAccount.execute's Approval tuple.
type approval struct {
	PolicyVersion uint64
	Outcome       uint8
	Nonce         [32]byte
	Expiry        uint64
}

// guarded is a GuardedAccount on a chain, owned by the agent's key, trusting testSignerKey.
type guarded struct {
	chain *testenv.Chain
	addr  common.Address
	owner testenv.Account
}

// deployGuarded deploys a GuardedAccount from deployer (its first transaction, so the
// account has the same address on every fresh chain).
func deployGuarded(t *testing.T, chain *testenv.Chain, signer common.Address, owner, deployer testenv.Account) *guarded {
	t.Helper()
	args, err := contracts.GuardedAccountABI.Pack("", signer, owner.Address)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := chain.SendAndWait(ctx, deployer, nil, append(append([]byte{}, contracts.GuardedAccount.Bytecode...), args...), 0)
	if err != nil {
		t.Fatalf("deploy GuardedAccount: %v", err)
	}
	return &guarded{chain: chain, addr: r.ContractAddress, owner: owner}
}

// execCall is one execute of a signed verdict's call: what the agent sends.
type execCall struct {
	to    common.Address
	value *big.Int
	data  []byte
	ap    approval
	sig   []byte
}

// callOf is the call a signed verdict approves, with its signature.
func callOf(s *verdict.Signature, to common.Address, data []byte) execCall {
	m := s.Message
	return execCall{to: to, value: m.Value, data: data, sig: s.Sig,
		ap: approval{PolicyVersion: uint64(m.PolicyVersion), Outcome: m.Outcome, Nonce: m.Nonce, Expiry: uint64(m.Expiry)}}
}

func (g *guarded) input(t *testing.T, c execCall) []byte {
	t.Helper()
	in, err := contracts.GuardedAccountABI.Pack("execute", c.to, c.value, c.data, c.ap, c.sig)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// execute sends c from the owner and waits for it to be mined; a revert is an error.
func (g *guarded) execute(t *testing.T, c execCall) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := g.chain.SendAndWait(ctx, g.owner, &g.addr, g.input(t, c), 0)
	return err
}

// wantRevert checks that c reverts with the custom error name.
func (g *guarded) wantRevert(t *testing.T, c execCall, name string) {
	t.Helper()
	err := g.execute(t, c)
	if !errors.Is(err, testenv.ErrReverted) {
		t.Fatalf("execute = %v, want a revert %s", err, name)
	}
	var de rpc.DataError
	if !errors.As(err, &de) {
		t.Fatalf("execute reverted without revert data: %v", err)
	}
	s, _ := de.ErrorData().(string)
	data, _ := hexutil.Decode(s)
	want := contracts.GuardedAccountABI.Errors[name].ID
	if len(data) < 4 || !bytes.Equal(data[:4], want[:4]) {
		t.Fatalf("execute reverted with %s, want %s", s, name)
	}
}

// signedFor submits the agent's ERC-20 transfer of amount to payTo through the verdict
// service and returns its terminal verdict, signed.
func signedFor(t *testing.T, e *env, ag agent, token, payTo common.Address, amount int64) (*verdict.Verdict, []byte) {
	t.Helper()
	data := calldataBytes(t, payTo, amount)
	sub := e.submit(ag.Key, map[string]any{"escrowAddress": ag.Wallet.Hex(), "prompt": "pay the supplier", "arbiter": "policy",
		"proposedTx": map[string]any{"protocol": "evm", "chainId": testChain, "to": token.Hex(), "data": hexutil.Encode(data), "value": "0"}})
	if sub.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", sub.status, sub.raw)
	}
	v := e.await(ag.Key, sub.body["requestHash"].(string))
	if v.Signature == nil {
		t.Fatal("the verdict is not signed")
	}
	return v, data
}

func calldataBytes(t *testing.T, to common.Address, amount int64) []byte {
	t.Helper()
	b, err := hexutil.Decode(calldata(t, "transfer(address,uint256)", []string{"address", "uint256"}, to, big.NewInt(amount)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGuardedAccountExecutesOnlyWhatWasApproved: a GuardedAccount on anvil, the agent's
// wallet at the verdict service, makes the ERC-20 transfer a signed verdict approved, once;
// it refuses a rejected verdict, a replay, an expired approval, another call's signature,
// a signature for another account or another chain, any field changed, and a sender
// other than its owner
// (docs/verdict-signing.md#the-guarded-account).
func TestGuardedAccountExecutesOnlyWhatWasApproved(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	if chain.ChainID.Int64() != testChain {
		t.Fatalf("anvil runs chain %d, the policy allows %d", chain.ChainID, testChain)
	}
	owner, deployer := chain.Accounts[1], chain.Accounts[2]
	acct := deployGuarded(t, chain, testSigner(t), owner, deployer)
	tok.Mint(t, acct.addr, big.NewInt(100e6))
	payTo, stranger := testenv.NewAccount(t).Address, testenv.NewAccount(t).Address

	e := newEnv(t, nil, func(c *Config, _ *Deps) { c.SignerKey = testSignerKey })
	ag := e.agent("guarded", acct.addr, `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]},
		"assets": {"universe": {"84532": ["`+tok.Address.Hex()+`"]}}, "recipients": {"allowed": ["`+payTo.Hex()+`"]}}`)

	ok, okData := signedFor(t, e, ag, tok.Address, payTo, 5e6)
	if !ok.Approved() {
		t.Fatalf("the transfer to the payee is %s: %s", ok.Outcome, ok.HumanReason)
	}
	approved := callOf(ok.Signature, tok.Address, okData)

	// The Go digest is the contract's.
	var onChain [32]byte
	in, _ := contracts.GuardedAccountABI.Pack("digest", approved.to, approved.value, approved.data, approved.ap)
	out, err := chain.Call(context.Background(), owner.Address, acct.addr, in)
	if err != nil {
		t.Fatal(err)
	}
	copy(onChain[:], out)
	if d, _ := ok.Signature.Message.Digest(); d != onChain {
		t.Fatalf("the contract's digest %x is not the verdict's %x", onChain, d)
	}

	t.Run("sent by another than the owner", func(t *testing.T) {
		(&guarded{chain: chain, addr: acct.addr, owner: chain.Accounts[4]}).wantRevert(t, approved, "NotOwner")
	})
	t.Run("another account's signature", func(t *testing.T) {
		other := deployGuarded(t, chain, testSigner(t), owner, chain.Accounts[3])
		other.wantRevert(t, approved, "BadSignature")
	})
	t.Run("another chain's signature", func(t *testing.T) {
		chainB := testenv.StartAnvil(t, testenv.WithChainID(8453))
		onB := deployGuarded(t, chainB, testSigner(t), owner, deployer)
		if onB.addr != acct.addr {
			t.Fatalf("the account is %s on chain B, %s on chain A", onB.addr, acct.addr)
		}
		onB.wantRevert(t, approved, "BadSignature")
	})
	for name, change := range map[string]func(c *execCall){
		"to":            func(c *execCall) { c.to = stranger },
		"value":         func(c *execCall) { c.value = big.NewInt(1) },
		"data":          func(c *execCall) { c.data = calldataBytes(t, payTo, 5e6+1) },
		"policyVersion": func(c *execCall) { c.ap.PolicyVersion++ },
		"nonce":         func(c *execCall) { c.ap.Nonce[0] ^= 1 },
		"expiry":        func(c *execCall) { c.ap.Expiry++ },
		"signature":     func(c *execCall) { c.sig = append([]byte{}, c.sig...); c.sig[10] ^= 1 },
	} {
		t.Run("a changed "+name, func(t *testing.T) {
			c := approved
			change(&c)
			acct.wantRevert(t, c, "BadSignature")
		})
	}

	t.Run("rejected", func(t *testing.T) {
		no, noData := signedFor(t, e, ag, tok.Address, stranger, 5e6)
		if no.Approved() {
			t.Fatal("the transfer to a stranger is approved")
		}
		c := callOf(no.Signature, tok.Address, noData)
		acct.wantRevert(t, c, "NotApproved")
		c.ap.Outcome = verdict.SignedApproved // the signature says rejected
		acct.wantRevert(t, c, "BadSignature")
	})

	before := tok.BalanceOf(t, payTo)
	if err := acct.execute(t, approved); err != nil {
		t.Fatalf("executing the approved transfer: %v", err)
	}
	if got := new(big.Int).Sub(tok.BalanceOf(t, payTo), before); got.Cmp(big.NewInt(5e6)) != 0 {
		t.Fatalf("the payee received %s, want 5000000", got)
	}
	t.Run("replayed", func(t *testing.T) { acct.wantRevert(t, approved, "AlreadyUsed") })

	t.Run("expired", func(t *testing.T) {
		late, lateData := signedFor(t, e, ag, tok.Address, payTo, 1e6)
		c := callOf(late.Signature, tok.Address, lateData)
		chain.SetNextBlockTimestamp(t, c.ap.Expiry+1)
		acct.wantRevert(t, c, "Expired")
		if late.Signature.Message.Expiry-late.Timestamp.Unix() > int64(verdict.MaxSignatureTTL/time.Second) {
			t.Fatalf("the signature outlives the verdict by more than %s", verdict.MaxSignatureTTL)
		}
	})
}
