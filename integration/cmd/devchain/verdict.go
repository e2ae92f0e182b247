package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// demoAgent is the agent the demo's facilitator asks verdicts for.
const demoAgent = "demo"

// tipToAddress is a payee the demo policy does not allow: anvil's development account 3. The
// demo's /api/tip route pays it, so its payments are rejected with recipient_not_allowed.
var tipToAddress = common.HexToAddress("0x90F79bf6EB2c4f870365E785982E1f101E93b906")

// demoPolicy lets the demo agent pay the demo payee, in the demo token, on the demo chain, at
// most 1 USD a payment (docs/policy.md).
func demoPolicy(chainID int64, token, payTo common.Address) []byte {
	return fmt.Appendf(nil, `{
  "description": "x402gate demo: pay the demo payee in the demo token, at most 1 USD a payment",
  "venues": { "allowed": ["payment"] },
  "chains": { "allowed": [%d] },
  "assets": { "universe": { "%d": [%q] } },
  "recipients": { "allowed": [%q] },
  "limits": { "perTxUsd": 1 }
}
`, chainID, chainID, token.Hex(), payTo.Hex())
}

// setUpVerdicts makes a fresh verdict store at dbPath for the demo's verdict app, with the
// operator functions `caddy verdict` uses: the agent "demo", its key (written to keyFile), the
// payer's wallet on the chain, and the demo policy (also written to policyFile, for
// `caddy verdict policy validate`).
func setUpVerdicts(ctx context.Context, dbPath, keyFile, policyFile string, chainID int64, token, payer, payTo common.Address) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(dbPath + suffix); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	db, err := sqldb.OpenSQLite(ctx, dbPath)
	if err != nil {
		return fmt.Errorf("open the verdict store: %w", err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		return fmt.Errorf("open the verdict store: %w", err)
	}
	defer st.Close()
	op := verdictserver.NewOperator(st)
	agent, err := op.CreateAgent(ctx, demoAgent)
	if err != nil {
		return err
	}
	_, key, err := op.CreateKey(ctx, agent.ID, nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	if _, err := op.AddWallet(ctx, agent.ID, chainID, payer.Hex()); err != nil {
		return err
	}
	doc := demoPolicy(chainID, token, payTo)
	if err := os.WriteFile(policyFile, doc, 0o600); err != nil {
		return err
	}
	if _, err := op.SetPolicy(ctx, agent.ID, doc, "devchain"); err != nil {
		return err
	}
	return nil
}

// verdictFiles are the paths setUpVerdicts writes under dir.
func verdictFiles(dir string) (db, key, policy string) {
	return filepath.Join(dir, "verdict.db"), filepath.Join(dir, "verdict.key"), filepath.Join(dir, "policy.json")
}
