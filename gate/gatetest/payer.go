package gatetest

import (
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/x402"
)

// Payer is a wallet that signs payments as an x402 client does, with a key of its own.
// Its payments carry real EIP-3009 signatures, so they also pass a real facilitator's
// signature check; no chain holds its funds.
type Payer struct {
	Key     *ecdsa.PrivateKey
	Address common.Address
}

// NewPayer returns a Payer with a fresh key.
func NewPayer() (*Payer, error) {
	k, err := crypto.GenerateKey()
	if err != nil {
		return nil, err
	}
	return &Payer{Key: k, Address: crypto.PubkeyToAddress(k.PublicKey)}, nil
}

// Pay answers req with a payment header in x402 version (x402.Version1 or
// x402.Version2), as the reference clients do: v2 copies req and its resource into
// PAYMENT-SIGNATURE, v1 names the network in X-PAYMENT. The authorization pays exactly
// req's amount to its payee, valid from a minute ago for req's timeout, with a random
// nonce. reg resolves req's network (nil: the built-in networks).
func (p *Payer) Pay(version int, req *x402.Requirements, reg *x402.Registry) (name, value string, err error) {
	pay, err := p.Payment(version, req, reg)
	if err != nil {
		return "", "", err
	}
	var body any = pay.PayloadV2()
	name = x402.HeaderPaymentSignature
	if version == x402.Version1 {
		name = x402.HeaderPayment
		if body, err = pay.PayloadV1(reg); err != nil {
			return "", "", err
		}
	}
	value, err = x402.EncodeHeader(body)
	return name, value, err
}

// Payment is the signed payment Pay encodes.
func (p *Payer) Payment(version int, req *x402.Requirements, reg *x402.Registry) (*x402.Payment, error) {
	if reg == nil {
		reg = x402.NewRegistry()
	}
	n, ok := reg.Lookup(req.Network)
	if !ok {
		return nil, fmt.Errorf("gatetest: network %q is not in the registry", req.Network)
	}
	name, ver, ok := req.Domain()
	if !ok {
		return nil, errors.New("gatetest: the requirement names no EIP-712 domain")
	}
	now := time.Now().Unix()
	a := x402.Authorization{
		From: p.Address, To: req.PayTo, Value: new(big.Int).Set(req.Amount),
		ValidAfter: big.NewInt(now - 60), ValidBefore: big.NewInt(now + int64(req.MaxTimeoutSeconds)),
	}
	if _, err := rand.Read(a.Nonce[:]); err != nil {
		return nil, err
	}
	hash, err := x402.TransferWithAuthorizationHash(n.ChainID, req.Asset, name, ver, a)
	if err != nil {
		return nil, err
	}
	sig, err := crypto.Sign(hash[:], p.Key)
	if err != nil {
		return nil, err
	}
	sig[64] += 27
	pay := &x402.Payment{Version: version, Scheme: req.Scheme, Network: n.CAIP2, Signature: sig, Authorization: a}
	if version == x402.Version2 {
		acc := *req
		acc.Resource = x402.ResourceInfo{}
		res := req.Resource
		pay.Accepted, pay.Resource = &acc, &res
	}
	return pay, nil
}
