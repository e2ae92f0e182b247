package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
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

// setUpVerdicts prepares the verdict store at dbPath for the demo's verdict app, with the
// operator functions `caddy verdict` uses: the agent "demo", its key (written to keyFile), the
// payer's wallet on the chain, and the demo policy (also written to policyFile, for
// `caddy verdict policy validate`). A store an earlier run made is kept, with what an operator
// did to it (agents, keys, policy versions): only what the demo lacks is added, and a key
// file whose key the store no longer takes gets a new key. It reports what it did.
func setUpVerdicts(ctx context.Context, dbPath, keyFile, policyFile string, chainID int64, token, payer, payTo common.Address) (string, error) {
	_, statErr := os.Stat(dbPath)
	kept := statErr == nil
	db, err := sqldb.OpenSQLite(ctx, dbPath)
	if err != nil {
		return "", fmt.Errorf("open the verdict store: %w", err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		return "", fmt.Errorf("open the verdict store: %w", err)
	}
	defer st.Close()
	op := verdictserver.NewOperator(st)
	agent, err := st.AgentByName(ctx, demoAgent)
	if errors.Is(err, store.ErrNotFound) {
		agent, err = op.CreateAgent(ctx, demoAgent)
	}
	if err != nil {
		return "", err
	}
	if !keyStillTaken(ctx, st, keyFile, agent.ID) {
		_, key, err := op.CreateKey(ctx, agent.ID, nil)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	if _, err := op.AddWallet(ctx, agent.ID, chainID, payer.Hex()); err != nil {
		return "", err
	}
	doc := demoPolicy(chainID, token, payTo)
	if _, err := os.Stat(policyFile); err != nil {
		if err := os.WriteFile(policyFile, doc, 0o600); err != nil {
			return "", err
		}
	}
	active, err := st.ActivePolicy(ctx, agent.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if active, err = op.SetPolicy(ctx, agent.ID, doc, "devchain"); err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	}
	if kept {
		return fmt.Sprintf("verdict store %s kept from an earlier run: agent %q, its key in %s, policy version %d (remove the file for a new store)", dbPath, demoAgent, keyFile, active.Version), nil
	}
	return fmt.Sprintf("verdict store %s made: agent %q owns the payer's wallet; its policy allows paying %s only", dbPath, demoAgent, payTo.Hex()), nil
}

// keyStillTaken reports whether keyFile holds a key of agentID that the store takes.
func keyStillTaken(ctx context.Context, st *store.Store, keyFile, agentID string) bool {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return false
	}
	k, err := st.KeyByHash(ctx, sha256.Sum256(bytes.TrimSpace(b)))
	return err == nil && k.AgentID == agentID && k.RevokedAt == nil
}

// verdictFiles are the paths setUpVerdicts writes under dir.
func verdictFiles(dir string) (db, key, policy string) {
	return filepath.Join(dir, "verdict.db"), filepath.Join(dir, "verdict.key"), filepath.Join(dir, "policy.json")
}
