package facilitator

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402gate/x402gate/facilitator/txsender"
)

// txSender is what the engine needs of the transaction sender of one chain
// (txsender.Sender): it owns the signer's nonce, journals each transaction before
// broadcasting it, and waits for receipts (docs/facilitator.md#settle-order).
type txSender interface {
	// Estimate and Simulate price a call for sending; a revert is txsender.ErrCallReverted.
	Estimate(ctx context.Context, to common.Address, data []byte) (txsender.Call, error)
	Simulate(ctx context.Context, to common.Address, data []byte) (txsender.Call, error)
	// Send signs cl with the next nonce, journals it through jn and broadcasts it.
	Send(ctx context.Context, cl txsender.Call, jn *txsender.Journaled) (*types.Transaction, error)
	// SendReplacement signs and sends a fee-bumped replacement of old.
	SendReplacement(ctx context.Context, old *types.Transaction, tip, feeCap *big.Int, prepare func(*types.Transaction) error) (*types.Transaction, error)
	// Resend sends a signed transaction again, the same bytes.
	Resend(ctx context.Context, tx *types.Transaction) error
	// BaseFee is the base fee a transaction must pay to be mined now.
	BaseFee(ctx context.Context) (*big.Int, error)
	// WaitReceipt waits for tx's receipt; WaitReceipts for the first receipt of any of
	// hashes, the attempts of one settlement.
	WaitReceipt(ctx context.Context, tx *types.Transaction, timeout time.Duration) (*types.Receipt, error)
	WaitReceipts(ctx context.Context, hashes []common.Hash, latest *types.Transaction, timeout time.Duration) (*types.Receipt, error)
}

var _ txSender = (*txsender.Sender)(nil)
