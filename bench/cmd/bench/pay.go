package main

import (
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"runtime"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
)

// payer is a funded account that signs EIP-3009 authorizations.
type payer struct {
	key  *ecdsa.PrivateKey
	addr common.Address
}

// signer signs x402 v1 "exact" payments of price base units of token to payTo.
type signer struct {
	chainID *big.Int
	token   common.Address
	payTo   common.Address
	price   *big.Int
	payers  []payer
	domain  common.Hash
}

var (
	domainTypeHash = crypto.Keccak256Hash([]byte("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"))
	transferType   = crypto.Keccak256Hash([]byte("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"))
)

func newSigner(chainID *big.Int, token, payTo common.Address, price *big.Int, payers []payer) *signer {
	s := &signer{chainID: chainID, token: token, payTo: payTo, price: price, payers: payers}
	s.domain = crypto.Keccak256Hash(
		domainTypeHash[:],
		crypto.Keccak256([]byte("USDC")),
		crypto.Keccak256([]byte("2")),
		math.U256Bytes(new(big.Int).Set(chainID)),
		common.LeftPadBytes(token[:], 32),
	)
	return s
}

// payment is one signed payment: its v1 payload (for /verify bodies) and its X-PAYMENT header,
// or a v2 payment's header value and name (PAYMENT-SIGNATURE).
type payment struct {
	payload json.RawMessage
	header  string
	name    string // the header's name; empty: X-Payment
}

type authorizationJSON struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`
}

// sign makes a payment from payer i, with a random nonce and the x402 client's window
// (validAfter = now-600, validBefore = now+60, the default maxTimeoutSeconds).
func (s *signer) sign(i int) payment {
	p := s.payers[i%len(s.payers)]
	var nonce [32]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		panic(fatalError{fmt.Sprintf("nonce: %v", err)})
	}
	now := time.Now().Unix()
	after, before := big.NewInt(now-600), big.NewInt(now+60)
	structHash := crypto.Keccak256(
		transferType[:],
		common.LeftPadBytes(p.addr[:], 32),
		common.LeftPadBytes(s.payTo[:], 32),
		math.U256Bytes(new(big.Int).Set(s.price)),
		math.U256Bytes(after),
		math.U256Bytes(before),
		nonce[:],
	)
	digest := crypto.Keccak256([]byte{0x19, 0x01}, s.domain[:], structHash)
	sig, err := crypto.Sign(digest, p.key)
	if err != nil {
		panic(fatalError{fmt.Sprintf("sign: %v", err)})
	}
	sig[64] += 27
	payload, err := json.Marshal(map[string]any{
		"x402Version": 1,
		"scheme":      "exact",
		"network":     "base-sepolia",
		"payload": map[string]any{
			"signature": hexutil.Encode(sig),
			"authorization": authorizationJSON{
				From:        p.addr.Hex(),
				To:          s.payTo.Hex(),
				Value:       s.price.String(),
				ValidAfter:  after.String(),
				ValidBefore: before.String(),
				Nonce:       hexutil.Encode(nonce[:]),
			},
		},
	})
	if err != nil {
		panic(fatalError{fmt.Sprintf("payload: %v", err)})
	}
	return payment{payload: payload, header: base64.StdEncoding.EncodeToString(payload)}
}

// pool signs n payments on every core, spread over the payers round-robin.
func (s *signer) pool(n int) []payment {
	out := make([]payment, n)
	var wg sync.WaitGroup
	workers := runtime.NumCPU()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				out[i] = s.sign(i)
			}
		}()
	}
	wg.Wait()
	return out
}

// requirements is the v1 PaymentRequirements both gates advertise for resource, in the
// shape the reference facilitator's zod schema accepts.
func (s *signer) requirements(resource string) map[string]any {
	return map[string]any{
		"scheme":            "exact",
		"network":           "base-sepolia",
		"maxAmountRequired": s.price.String(),
		"resource":          resource,
		"description":       "bench",
		"mimeType":          "application/json",
		"payTo":             s.payTo.Hex(),
		"maxTimeoutSeconds": 60,
		"asset":             s.token.Hex(),
		"extra":             map[string]string{"name": "USDC", "version": "2"},
	}
}

// verifyBody is the facilitator /verify request for p.
func (s *signer) verifyBody(p payment, resource string) []byte {
	b, err := json.Marshal(map[string]any{
		"x402Version":         1,
		"paymentPayload":      p.payload,
		"paymentRequirements": s.requirements(resource),
	})
	if err != nil {
		panic(fatalError{fmt.Sprintf("verify body: %v", err)})
	}
	return b
}
