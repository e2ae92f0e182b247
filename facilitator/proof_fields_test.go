package facilitator

import (
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/x402"
)

// TestProofComparesEverySignedField: each signed field of a payment (EIP-3009's
// authorization; Permit2's, its witness included, and the same facts the payment carries
// as an authorization) and its signature bytes, changed in place between an in-process
// Verify and its Settle, makes the proof not stand, so the Settle checks everything
// again. The fields are found by reflection: a field that the comparison (seenOf) does
// not copy, or one added to x402.Authorization or x402.Permit2Authorization without it,
// fails here.
func TestProofComparesEverySignedField(t *testing.T) {
	authorization := func(p *x402.Payment) reflect.Value { return reflect.ValueOf(&p.Authorization).Elem() }
	permit2 := func(p *x402.Payment) reflect.Value { return reflect.ValueOf(p.Permit2).Elem() }
	for _, kind := range []struct {
		name   string
		sign   signPayment
		signed map[string]func(*x402.Payment) reflect.Value
	}{
		{"EIP-3009", signedPayment, map[string]func(*x402.Payment) reflect.Value{"authorization": authorization}},
		{"Permit2", signedPermit2Payment, map[string]func(*x402.Payment) reflect.Value{"authorization": authorization, "permit2": permit2}},
	} {
		for part, fields := range kind.signed {
			for _, f := range reflect.VisibleFields(fields(&x402.Payment{Permit2: &x402.Permit2Authorization{}}).Type()) {
				t.Run(kind.name+"/"+part+"."+f.Name, func(t *testing.T) {
					e, p, r, now := provedPayment(t, kind.sign)
					change(t, fields(p).FieldByIndex(f.Index))
					if c, fl := e.checkStatic(p, r, now, e.proofs.take(p, r, now)); fl == nil && c.proven {
						t.Errorf("the proof stood for a payment whose %s.%s changed after Verify", part, f.Name)
					}
				})
			}
		}
		t.Run(kind.name+"/signature", func(t *testing.T) {
			e, p, r, now := provedPayment(t, kind.sign)
			p.Signature[5] ^= 1
			if c, fl := e.checkStatic(p, r, now, e.proofs.take(p, r, now)); fl == nil && c.proven {
				t.Errorf("the proof stood for a payment whose signature bytes changed after Verify")
			}
		})
	}
}

// provedPayment is an offline Service and a payment signed by sign, which its Verify's
// static checks passed and kept a proof of, as InProcess.Verify does.
func provedPayment(t *testing.T, sign signPayment) (*Service, *x402.Payment, *x402.Requirements, time.Time) {
	e := offlineService(t, x402.BaseSepolia)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, r := sign(t, x402.BaseSepolia, key, common.HexToAddress("0x000000000000000000000000000000000000beef"), big.NewInt(10_000), now)
	c, f := e.checkStatic(p, r, now, nil)
	if f != nil || !c.eoa {
		t.Fatalf("verify: checkStatic = %+v, %v", c, f)
	}
	e.proofs.put(c, now)
	return e, p, r, now
}

// change changes the field v in place: a pointer's value, not the pointer.
func change(t *testing.T, v reflect.Value) {
	switch x := v.Addr().Interface().(type) {
	case *common.Address:
		x[19] ^= 1
	case **big.Int:
		(*x).Add(*x, big.NewInt(1))
	case *[32]byte:
		x[31] ^= 1
	case *bool:
		*x = !*x
	default:
		t.Fatalf("no change for a field of type %s: add one", v.Type())
	}
}
