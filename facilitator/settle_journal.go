package facilitator

import (
	"context"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/faults"
	"go.uber.org/zap"
)

// The journal rows of a settlement (docs/facilitator.md#settlement-journal): written before the
// broadcast, updated once the receipt decides.

// journaled is how the settlement transaction of c, signed by the lane sender, is
// journaled: its row is written before it is broadcast (with the other sends of its batch,
// in one transaction), then the crash test seam runs.
func (e *Service) journaled(c *checked, sender common.Address) *txsender.Journaled {
	jn := &txsender.Journaled{Journal: e.cfg.Journal, Row: func(tx *types.Transaction) (journal.Settlement, error) {
		raw, err := tx.MarshalBinary()
		if err != nil {
			return journal.Settlement{}, fmt.Errorf("encode transaction: %w", err)
		}
		now := e.now()
		return journal.Settlement{
			AuthorizationKey: c.key.AuthorizationKey(),
			PaymentKey:       c.key.String(),
			Network:          c.key.Network,
			Asset:            c.key.Asset,
			Payer:            c.key.Payer,
			PayTo:            c.key.PayTo,
			Amount:           c.r.Amount,
			Nonce:            c.key.Nonce,
			TxHash:           tx.Hash(),
			RawTx:            raw,
			SenderNonce:      tx.Nonce(),
			Sender:           sender,
			State:            journal.StatePrepared,
			CreatedAt:        now,
			UpdatedAt:        now,
		}, nil
	}}
	jn.After = func(s journal.Settlement) error {
		faults.Point("settle.after-journal")
		if e.cfg.beforeBroadcast != nil {
			return e.cfg.beforeBroadcast(s)
		}
		return nil
	}
	return jn
}

// journalSettled is journalUpdate for a state decided by the receipt of attempt txHash,
// recorded as the row's settling attempt.
func (e *Service) journalSettled(ctx context.Context, c *checked, state journal.State, reason string, txHash common.Hash) {
	if err := e.cfg.Journal.UpdateSettled(ctx, c.key.AuthorizationKey(), state, reason, txHash); err != nil {
		e.log.Error("journal update", zap.String("payer", c.auth.From.Hex()), zap.String("state", string(state)), zap.Error(err))
	}
}

// journalLater records a move a crash may lose, to broadcast or to confirmed by the
// receipt of txHash, without waiting for it: the journal commits it with its next write,
// or on its own a few milliseconds later (journal.DB.UpdateLater). A failure is logged;
// the row is left to Reconcile, which decides it by the chain.
func (e *Service) journalLater(c *checked, state journal.State, txHash *common.Hash) {
	payer := c.auth.From.Hex()
	e.cfg.Journal.UpdateLater(c.key.AuthorizationKey(), state, "", txHash, func(err error) {
		if err != nil {
			e.log.Error("journal update", zap.String("payer", payer), zap.String("state", string(state)), zap.Error(err))
		}
	})
}

// journalUpdate records a state change; a failure is logged, since the chain stays the
// truth and Reconcile repairs the row.
func (e *Service) journalUpdate(ctx context.Context, c *checked, state journal.State, reason string) {
	if err := e.cfg.Journal.Update(ctx, c.key.AuthorizationKey(), state, reason); err != nil {
		e.log.Error("journal update", zap.String("payer", c.auth.From.Hex()), zap.String("state", string(state)), zap.Error(err))
	}
}
