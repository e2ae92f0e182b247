package verdictapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/spf13/cobra"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// replayPolicy allows x402 payments of Base Sepolia USDC to payee.
func replayPolicy(payee common.Address) string {
	return fmt.Sprintf(`{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]},
		"assets": {"universe": {"84532": ["0x036CbD53842c5426634e7929541eC2318f3dCF7e"]}}, "recipients": {"allowed": [%q]}}`, payee.Hex())
}

// judgedStore makes the SQLite store at path with an agent "buyer" whose policy pays
// payees[0] only, and one judged payment to each of payees, judged by a verdict server's
// own workers; it returns the agent's id.
func judgedStore(t *testing.T, path string, payees ...common.Address) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	op := verdictserver.NewOperator(st)
	a, err := op.CreateAgent(ctx, "buyer")
	if err != nil {
		t.Fatal(err)
	}
	wallet := common.HexToAddress("0xB0B0000000000000000000000000000000000001")
	if _, err := op.AddWallet(ctx, a.ID, 84532, wallet.Hex()); err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetPolicy(ctx, a.ID, []byte(replayPolicy(payees[0])), "test"); err != nil {
		t.Fatal(err)
	}
	for i, to := range payees {
		tx := fmt.Sprintf(`{"protocol": "payment", "rail": "x402", "chainId": 84532, "payTo": %q, "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "amount": "10000"}`, to.Hex())
		rec := store.Transaction{RequestHash: fmt.Sprintf("0x%064x", i+1), AgentID: a.ID, Escrow: wallet, ChainID: 84532, ProposedTx: []byte(tx)}
		if err := st.CreateTransaction(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := verdictserver.New(verdictserver.Config{}, verdictserver.Deps{Store: st, Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil { // the sweeper hands the pending records to the workers at once
		t.Fatal(err)
	}
	defer srv.Close()
	for i := range payees {
		for n := 0; ; n++ {
			tx, err := st.TransactionByHash(ctx, fmt.Sprintf("0x%064x", i+1))
			if err != nil {
				t.Fatal(err)
			}
			if tx.Status != store.StatusPending {
				break
			}
			if n == 400 {
				t.Fatalf("record %d still pending after 400 reads", i+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return a.ID
}

// transactionsOf is every stored field of the agent's transactions, as JSON.
func transactionsOf(t *testing.T, path, agentID string) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	txs, err := st.AgentTransactions(ctx, agentID, store.Cursor{}, store.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := st.PolicyVersions(ctx, agentID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]any{txs, vs})
	return string(b)
}

// runVerdict runs `caddy verdict args...` in process and returns its standard output.
func runVerdict(t *testing.T, args ...string) string {
	t.Helper()
	root := &cobra.Command{Use: "verdict"}
	verdictCommand(root)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("caddy verdict %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestPolicyReplayCommand: `caddy verdict policy replay` on the store of a config: a draft
// that pays the second payee only newly refuses the first payment and newly approves the
// second, printed with their reasons (and as the admin route's JSON with --json); the
// store's transactions and policy versions are as they were.
func TestPolicyReplayCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	db := filepath.Join(dir, "verdict.db")
	first, second := common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"), common.HexToAddress("0x5555555555555555555555555555555555555555")
	agentID := judgedStore(t, db, first, second)
	caddyfile, draft := filepath.Join(dir, "Caddyfile"), filepath.Join(dir, "draft.json")
	if err := os.WriteFile(caddyfile, []byte("{\n\tverdict {\n\t\tstore sqlite "+db+"\n\t}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(draft, []byte(replayPolicy(second)), 0o600); err != nil {
		t.Fatal(err)
	}
	before := transactionsOf(t, db, agentID)
	cfg := []string{"--config", caddyfile, "--adapter", "caddyfile"}

	out := runVerdict(t, append([]string{"policy", "replay", "--agent", "buyer", draft}, cfg...)...)
	for _, want := range []string{
		"draft judged as policy version 2 (active: 1), mode enforce, spend windows none",
		"last 1000: replayed 2, unchanged 0, skipped 0",
		"newly refused: 1\n  " + fmt.Sprintf("0x%064x", 1),
		"recipient_not_allowed",
		"newly approved: 1\n  " + fmt.Sprintf("0x%064x", 2) + "\t",
		"\twas recipient_not_allowed\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("printed:\n%s\nwant it to contain %q", out, want)
		}
	}
	var rep verdictserver.ReplayReport
	if err := json.Unmarshal([]byte(runVerdict(t, append([]string{"policy", "replay", "--agent", agentID, "--last", "1", "--json", draft}, cfg...)...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Last != 1 || rep.Replayed != 1 || len(rep.NewlyApproved) != 1 || rep.NewlyApproved[0].Draft.Outcome != "approved" {
		t.Errorf("--last 1 --json: %+v, want the newest payment newly approved", rep)
	}
	if after := transactionsOf(t, db, agentID); after != before {
		t.Errorf("the replay changed the store:\nbefore %s\nafter  %s", before, after)
	}
}
