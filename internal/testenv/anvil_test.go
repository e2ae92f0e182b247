package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
)

func TestStartChainWithTokenGivesTheDocumentedState(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()

	if got := c.ChainID.Int64(); got != 84532 {
		t.Errorf("chain id = %d, want 84532 (base-sepolia, what x402 clients sign for)", got)
	}
	if !strings.HasPrefix(c.RPCURL, "http://127.0.0.1:") {
		t.Errorf("RPCURL = %q, want a loopback URL", c.RPCURL)
	}
	if len(c.Accounts) != len(testenv.DevKeys) {
		t.Fatalf("%d accounts, want %d", len(c.Accounts), len(testenv.DevKeys))
	}
	for i := range testenv.DevKeys {
		if want := testenv.DevAccount(t, i).Address; c.Accounts[i].Address != want {
			t.Errorf("account %d = %s, want the development account %s", i, c.Accounts[i].Address, want)
		}
	}
	facilitator := c.FacilitatorAccount()
	if facilitator.Address != c.Accounts[0].Address {
		t.Errorf("facilitator account = %s, want account 0", facilitator.Address)
	}
	nonce, err := c.Client.NonceAt(ctx, facilitator.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nonce != 0 {
		t.Errorf("facilitator account nonce = %d after setup, want 0 (the harness never sends from it)", nonce)
	}
	if got := tok.BalanceOf(t, facilitator.Address); got.Sign() != 0 {
		t.Errorf("facilitator token balance = %s, want 0", got)
	}
	for i, a := range c.Accounts[1:] {
		if got := tok.BalanceOf(t, a.Address); got.Cmp(testenv.DefaultPayerFunds) != 0 {
			t.Errorf("account %d token balance = %s, want %s", i+1, got, testenv.DefaultPayerFunds)
		}
	}
	code, err := c.Client.CodeAt(ctx, tok.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 {
		t.Error("token address has no code")
	}
}

func TestWithAccountsListsMoreThanTheDevKeys(t *testing.T) {
	t.Parallel()
	c := testenv.StartAnvil(t, testenv.WithAccounts(12), testenv.WithChainID(31337))
	if got := c.ChainID.Int64(); got != 31337 {
		t.Errorf("chain id = %d, want 31337", got)
	}
	if len(c.Accounts) != 12 {
		t.Fatalf("%d accounts, want 12", len(c.Accounts))
	}
	bal, err := c.Client.BalanceAt(context.Background(), c.Accounts[11].Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bal.Sign() <= 0 {
		t.Errorf("account 11 has no ether")
	}
}

func TestChainControls(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()

	t.Run("IncreaseTime moves the chain clock forward", func(t *testing.T) {
		before := c.Now(t)
		c.IncreaseTime(t, 3600)
		if after := c.Now(t); after < before+3600 {
			t.Errorf("chain time %d after IncreaseTime(3600) from %d", after, before)
		}
	})

	t.Run("with automine off a transaction stays pending until Mine", func(t *testing.T) {
		c.SetAutomine(t, false)
		defer c.SetAutomine(t, true)
		payer, payee := c.Accounts[1], c.Accounts[2]
		data, err := contracts.TokenABI.Pack("transfer", payee.Address, big.NewInt(5))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := c.Send(ctx, payer, &tok.Address, data, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.TransactionReceipt(ctx, tx.Hash()); !errors.Is(err, ethereum.NotFound) {
			t.Fatalf("receipt before Mine: err = %v, want not found", err)
		}
		c.Mine(t)
		r, err := c.WaitReceipt(ctx, tx.Hash())
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 1 {
			t.Errorf("receipt status = %d, want 1", r.Status)
		}
	})

	t.Run("Stop takes the RPC endpoint down and is idempotent", func(t *testing.T) {
		c.Stop()
		c.Stop()
		other, err := ethclient.Dial(c.RPCURL)
		if err != nil {
			return // refusing the dial is the node being down
		}
		defer other.Close()
		if _, err := other.ChainID(ctx); err == nil {
			t.Error("eth_chainId answered after Stop")
		}
	})
}

func TestMissingAnvilFailsWithTheInstallCommand(t *testing.T) {
	// Not parallel: it changes the working directory and the environment.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	for _, tc := range []struct {
		name  string
		anvil string
		want  string
	}{
		{"no node_modules names npm ci", "", "cd integration && npm ci"},
		{"a bad $ANVIL names the variable", filepath.Join(dir, "no-such-anvil"), "$ANVIL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ANVIL", tc.anvil)
			ft := &fatalRecorder{TB: t}
			ft.run(func() { testenv.StartAnvil(ft) })
			if !ft.failed {
				t.Fatal("StartAnvil did not fail the test")
			}
			if !strings.Contains(ft.msg, tc.want) {
				t.Errorf("failure message %q does not name %q", ft.msg, tc.want)
			}
		})
	}
}

func TestModuleRootFindsGoMod(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "module github.com/x402gate/x402gate\n") {
		t.Errorf("ModuleRoot() = %s, whose go.mod is not the x402gate module", root)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine, so a
// test can assert that a helper fails the test, and how.
type fatalRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msg    string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = true
	f.msg = strings.TrimSpace(fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalRecorder) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fatalRecorder) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
