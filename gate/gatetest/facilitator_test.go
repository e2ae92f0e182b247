package gatetest

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

func testRequirement() *x402.Requirements {
	return &x402.Requirements{
		Scheme: x402.SchemeExact, Network: x402.BaseSepolia.CAIP2, Amount: big.NewInt(10_000),
		Asset: x402.BaseSepolia.USDC.Address, PayTo: common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
		MaxTimeoutSeconds: 60, Extra: map[string]any{"name": "USDC", "version": "2"},
		Resource: x402.ResourceInfo{URL: "https://api.example.com/premium"},
	}
}

// TestFacilitatorSettlesAnAuthorizationOnce: however many callers settle the same
// authorization at once, one settles it and the others are refused as a used nonce, as
// the chain refuses them; Verify then refuses it too.
func TestFacilitatorSettlesAnAuthorizationOnce(t *testing.T) {
	payer, err := NewPayer()
	if err != nil {
		t.Fatal(err)
	}
	r := testRequirement()
	p, err := payer.Payment(x402.Version2, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFacilitator()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 16 {
		wg.Go(func() {
			sr, err := f.Settle(context.Background(), p, r)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if sr.Success {
				won++
			} else if x402.ReasonFromWire(sr.ErrorReason) != x402.ReasonNonceUsed {
				t.Errorf("refusal %q, want %s", sr.ErrorReason, x402.ReasonNonceUsed)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d settlements succeeded, want 1", won)
	}
	if vr, _ := f.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); vr.IsValid {
		t.Error("Verify approves a settled authorization")
	}
	if sr, _ := f.SettlementStatus(context.Background(), p, r); !sr.Success || sr.Transaction != f.Settled(p, r).Transaction {
		t.Errorf("SettlementStatus %+v, want the settlement", sr)
	}
	if n := f.Count(MethodSettle); n != 16 {
		t.Errorf("Count(Settle) %d, want 16", n)
	}
}

// TestFacilitatorScripts: a scripted answer replaces the default, nil restores it, and
// every call is recorded in order.
func TestFacilitatorScripts(t *testing.T) {
	payer, err := NewPayer()
	if err != nil {
		t.Fatal(err)
	}
	r := testRequirement()
	p, err := payer.Payment(x402.Version1, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFacilitator()
	down := errors.New("down")
	f.OnVerify(func(context.Context, x402.VerifyInput) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{}, down
	})
	if _, err := f.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); !errors.Is(err, down) {
		t.Errorf("scripted Verify: %v, want %v", err, down)
	}
	f.OnVerify(nil)
	if vr, err := f.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !vr.IsValid || vr.Payer != payer.Address.Hex() {
		t.Errorf("default Verify: %+v %v, want valid for %s", vr, err, payer.Address.Hex())
	}
	other := *r
	other.Amount = big.NewInt(1)
	if vr, _ := f.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: &other}); vr.IsValid || x402.ReasonFromWire(vr.InvalidReason) != x402.ReasonValueMismatch {
		t.Errorf("Verify of another amount: %+v, want %s", vr, x402.ReasonValueMismatch)
	}
	s, err := f.Supported(context.Background())
	if err != nil || len(s.Kinds) != 3 || s.Kinds[0].Network != "base-sepolia" || s.Kinds[1].Network != "eip155:84532" ||
		s.Kinds[2].Scheme != "upto" || s.Kinds[2].Extra["facilitatorAddress"] != Signer {
		t.Errorf("Supported %+v %v, want exact v1 and v2 and upto v2 with its facilitator on Base Sepolia", s, err)
	}
	var methods []string
	for _, c := range f.Calls() {
		methods = append(methods, c.Method)
	}
	if want := []string{MethodVerify, MethodVerify, MethodVerify, MethodSupported}; len(methods) != len(want) || methods[0] != want[0] || methods[3] != want[3] {
		t.Errorf("calls %v, want %v", methods, want)
	}
}
