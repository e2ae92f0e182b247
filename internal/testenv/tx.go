package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// receiptPoll is how often WaitReceipt asks for a receipt.
const receiptPoll = 10 * time.Millisecond

// ErrReverted is matched (errors.Is) by every error of a call, estimation or mined transaction
// that the EVM reverted.
var ErrReverted = errors.New("execution reverted")

// RevertError is a revert seen by the harness. errors.Is(err, ErrReverted) holds for it.
type RevertError struct {
	// Reason is the decoded Error(string) message, e.g. "FiatTokenV2: authorization is
	// used or canceled"; empty when the revert carried none.
	Reason string
	// Receipt is set when the transaction was mined and reverted (status 0); nil when the
	// revert came from eth_call or gas estimation and nothing was broadcast.
	Receipt *types.Receipt
	// Err is the underlying RPC error, if any.
	Err error
}

// Error implements error.
func (e *RevertError) Error() string {
	msg := "execution reverted"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Receipt != nil {
		msg += " (mined in tx " + e.Receipt.TxHash.Hex() + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrReverted) true.
func (e *RevertError) Is(target error) bool { return target == ErrReverted }

// Unwrap returns the underlying RPC error.
func (e *RevertError) Unwrap() error { return e.Err }

// RevertReason returns the Error(string) reason of a revert carried by err: a *RevertError,
// or an RPC error of eth_call / eth_estimateGas with revert data.
func RevertReason(err error) (string, bool) {
	var re *RevertError
	if errors.As(err, &re) {
		return re.Reason, re.Reason != ""
	}
	var de rpc.DataError
	if errors.As(err, &de) {
		if s, ok := de.ErrorData().(string); ok {
			if data, derr := hexutil.Decode(s); derr == nil {
				if reason, uerr := abi.UnpackRevert(data); uerr == nil {
					return reason, true
				}
			}
		}
	}
	return "", false
}

// asRevert turns an RPC error that carries revert data (or says "execution reverted") into a
// *RevertError, and returns other errors unchanged.
func asRevert(err error) error {
	if err == nil {
		return nil
	}
	if reason, ok := RevertReason(err); ok {
		return &RevertError{Reason: reason, Err: err}
	}
	var de rpc.DataError
	if errors.As(err, &de) || strings.Contains(strings.ToLower(err.Error()), "revert") {
		return &RevertError{Err: err}
	}
	return err
}

// Call runs data against to with eth_call from from at the latest block. A revert returns a
// *RevertError with its reason.
func (c *Chain) Call(ctx context.Context, from, to common.Address, data []byte) ([]byte, error) {
	out, err := c.Client.CallContract(ctx, ethereum.CallMsg{From: from, To: &to, Data: data}, nil)
	return out, asRevert(err)
}

// Send signs and broadcasts a dynamic-fee transaction from from to to (nil deploys data as
// contract creation code), and returns it without waiting. With gas 0 the gas is estimated, so
// a transaction that would revert fails here with a *RevertError and nothing is broadcast; with
// a fixed gas it is broadcast regardless and reverts on chain (receipt status 0).
func (c *Chain) Send(ctx context.Context, from Account, to *common.Address, data []byte, gas uint64) (*types.Transaction, error) {
	// One sender at a time: the nonce is read from the node and must not be handed out twice.
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if gas == 0 {
		est, err := c.Client.EstimateGas(ctx, ethereum.CallMsg{From: from.Address, To: to, Data: data})
		if err != nil {
			return nil, fmt.Errorf("estimate gas: %w", asRevert(err))
		}
		gas = est + est/5
	}
	nonce, err := c.Client.PendingNonceAt(ctx, from.Address)
	if err != nil {
		return nil, fmt.Errorf("pending nonce of %s: %w", from.Address, err)
	}
	head, err := c.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("latest header: %w", err)
	}
	tip, err := c.Client.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, fmt.Errorf("suggest gas tip: %w", err)
	}
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip)
	tx, err := types.SignNewTx(from.Key, types.LatestSignerForChainID(c.ChainID), &types.DynamicFeeTx{
		ChainID:   c.ChainID,
		Nonce:     nonce,
		GasTipCap: tip,
		GasFeeCap: feeCap,
		Gas:       gas,
		To:        to,
		Data:      data,
	})
	if err != nil {
		return nil, fmt.Errorf("sign transaction: %w", err)
	}
	if err := c.Client.SendTransaction(ctx, tx); err != nil {
		return nil, fmt.Errorf("send transaction: %w", asRevert(err))
	}
	return tx, nil
}

// WaitReceipt polls for the receipt of hash until it exists or ctx ends. It does not judge the
// receipt's status. With automine off, a receipt appears only after Mine.
func (c *Chain) WaitReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	tick := time.NewTicker(receiptPoll)
	defer tick.Stop()
	for {
		r, err := c.Client.TransactionReceipt(ctx, hash)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ethereum.NotFound) {
			return nil, fmt.Errorf("receipt of %s: %w", hash, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", hash, ctx.Err())
		case <-tick.C:
		}
	}
}

// SendAndWait is Send followed by WaitReceipt. A mined transaction that reverted returns its
// receipt and a *RevertError whose Reason is recovered by replaying the call on the block it
// was mined in.
func (c *Chain) SendAndWait(ctx context.Context, from Account, to *common.Address, data []byte, gas uint64) (*types.Receipt, error) {
	tx, err := c.Send(ctx, from, to, data, gas)
	if err != nil {
		return nil, err
	}
	r, err := c.WaitReceipt(ctx, tx.Hash())
	if err != nil {
		return nil, err
	}
	if r.Status == types.ReceiptStatusSuccessful {
		return r, nil
	}
	re := &RevertError{Receipt: r}
	// Replaying on the block's own state and header reproduces the revert when the transaction
	// was alone in its block (automine); otherwise the reason may be empty.
	_, callErr := c.Client.CallContract(ctx, ethereum.CallMsg{From: from.Address, To: to, Data: data, Gas: gas}, r.BlockNumber)
	if reason, ok := RevertReason(callErr); ok {
		re.Reason = reason
	}
	return r, re
}

// Transact sends data from from to to, estimating gas, waits for the receipt, and fails the
// test unless it succeeded.
func (c *Chain) Transact(t testing.TB, from Account, to common.Address, data []byte) *types.Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	r, err := c.SendAndWait(ctx, from, &to, data, 0)
	if err != nil {
		t.Fatalf("testenv: transaction from %s to %s: %v", from.Address, to, err)
	}
	return r
}

// Deploy deploys creation code (with its ABI-encoded constructor arguments appended) from the
// harness's deployer account and returns the contract address.
func (c *Chain) Deploy(t testing.TB, code []byte) common.Address {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	r, err := c.SendAndWait(ctx, c.deployer, nil, code, 0)
	if err != nil {
		t.Fatalf("testenv: deploy: %v", err)
	}
	if r.ContractAddress == (common.Address{}) {
		t.Fatalf("testenv: deploy: receipt %s has no contract address", r.TxHash)
	}
	return r.ContractAddress
}
