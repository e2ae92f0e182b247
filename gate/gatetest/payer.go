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
// Its payments carry real EIP-3009 or Permit2 signatures, so they also pass a real facilitator's
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
	if req.Transfer() == x402.TransferPermit2 {
		return p.permit2Payment(version, req, n)
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
	return p.payment(version, req, n, hash, a)
}

// payment signs hash and wraps the signature in the payment of req that a authorizes.
func (p *Payer) payment(version int, req *x402.Requirements, n x402.Network, hash common.Hash, a x402.Authorization) (*x402.Payment, error) {
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

// permit2Payment signs req as @x402/evm's Permit2 clients do (exact, and upto for req's
// amount as the maximum, bound to its extra.facilitatorAddress): a
// PermitWitnessTransferFrom for the scheme's x402 proxy, valid from 0 until req's timeout,
// with a random 256-bit nonce. It is x402 v2 only.
func (p *Payer) permit2Payment(version int, req *x402.Requirements, n x402.Network) (*x402.Payment, error) {
	a := &x402.Permit2Authorization{From: p.Address, Token: req.Asset, Amount: new(big.Int).Set(req.Amount), To: req.PayTo,
		ValidAfter: new(big.Int), Deadline: big.NewInt(time.Now().Unix() + int64(req.MaxTimeoutSeconds)), Upto: req.Scheme == x402.SchemeUpto}
	if a.Upto {
		f, ok := req.FacilitatorAddress()
		if !ok {
			return nil, errors.New("gatetest: an upto requirement without extra.facilitatorAddress")
		}
		a.Facilitator = f
	}
	a.Spender = a.Proxy()
	var nonce [32]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	a.Nonce = new(big.Int).SetBytes(nonce[:])
	hash, err := x402.Permit2Hash(n.ChainID, a)
	if err != nil {
		return nil, err
	}
	pay, err := p.payment(version, req, n, hash,
		x402.Authorization{From: a.From, To: a.To, Value: a.Amount, ValidAfter: a.ValidAfter, ValidBefore: a.Deadline, Nonce: nonce})
	if err == nil {
		pay.Permit2 = a
	}
	return pay, err
}
