package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/ethclient"
)

// Bounds of the harness. They only turn a hang into a failure; no test asserts on them.
const (
	anvilStartBound = 30 * time.Second
	anvilStopBound  = 10 * time.Second
	rpcBound        = 30 * time.Second
)

// BaseSepoliaChainID is the chain id anvil runs with by default: x402 1.2.0 clients sign with
// the chain id of the network name, and our tests use "base-sepolia".
const BaseSepoliaChainID = 84532

// deployerFunds is the ether given to the harness's deployer account: 1e6 ETH.
var deployerFunds = new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(1e18))

// AnvilOption changes how StartAnvil runs anvil.
type AnvilOption func(*anvilConfig)

type anvilConfig struct {
	chainID   uint64
	accounts  int
	blockTime int
	args      []string
}

// WithChainID sets anvil's chain id. Default BaseSepoliaChainID (84532).
func WithChainID(id uint64) AnvilOption { return func(c *anvilConfig) { c.chainID = id } }

// WithAccounts sets how many development accounts anvil funds (with 10000 ETH each) and
// Chain.Accounts lists. Default 10.
func WithAccounts(n int) AnvilOption { return func(c *anvilConfig) { c.accounts = n } }

// WithBlockTime makes anvil mine a block every seconds seconds instead of one per transaction
// (automine). Default 0: automine.
func WithBlockTime(seconds int) AnvilOption { return func(c *anvilConfig) { c.blockTime = seconds } }

// WithAnvilArgs appends raw arguments to anvil's command line, e.g. "--hardfork", "cancun".
func WithAnvilArgs(args ...string) AnvilOption {
	return func(c *anvilConfig) { c.args = append(c.args, args...) }
}

// Chain is a running anvil, private to the test that started it.
type Chain struct {
	// RPCURL is the HTTP JSON-RPC endpoint, http://127.0.0.1:<port>.
	RPCURL string
	// ChainID is the chain id anvil reports (84532 unless WithChainID).
	ChainID *big.Int
	// Client is connected to RPCURL and closed by Stop.
	Client *ethclient.Client
	// Accounts are anvil's funded development accounts, in anvil's order (Accounts[i] has the
	// key DevKeys[i] for i < 10). Accounts[0] is reserved for the facilitator signer: the
	// harness never sends from it.
	Accounts []Account

	deployer Account
	cmd      *exec.Cmd
	exited   chan struct{}
	stderr   *tailBuffer
	stopOnce sync.Once
	sendMu   sync.Mutex
}

// Pid is the anvil process's id, to sample its CPU time (/proc/<pid>/stat).
func (c *Chain) Pid() int { return c.cmd.Process.Pid }

// StartAnvil starts anvil on a free loopback port, waits until it answers eth_chainId, and
// registers a cleanup that kills it. A missing anvil binary fails the test with the command
// that installs it (cd integration && npm ci).
func StartAnvil(t testing.TB, opts ...AnvilOption) *Chain {
	t.Helper()
	cfg := anvilConfig{chainID: BaseSepoliaChainID, accounts: len(DevKeys)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.accounts < 1 {
		t.Fatalf("testenv: anvil needs at least one account, got %d", cfg.accounts)
	}
	bin, err := AnvilPath()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	configOut := filepath.Join(t.TempDir(), "anvil-config.json")
	args := []string{
		"--host", "127.0.0.1",
		"--port", "0", // anvil picks a free port and prints it: no race with other tests
		"--chain-id", strconv.FormatUint(cfg.chainID, 10),
		"--accounts", strconv.Itoa(cfg.accounts),
		"--config-out", configOut,
		// No state of past blocks is written to disk: anvil otherwise persists them under
		// ~/.foundry/anvil/tmp, gigabytes in a benchmark or a test suite, left behind when the
		// process is killed. The last 512 stay in memory: a call at "latest" may be resolved
		// to a block that a new one follows before the call runs (with only the newest state
		// kept, such a call fails with BlockOutOfRangeError under concurrent settles).
		"--prune-history", "512",
	}
	if cfg.blockTime > 0 {
		args = append(args, "--block-time", strconv.Itoa(cfg.blockTime))
	}
	args = append(args, cfg.args...)

	listening := make(chan string, 1)
	c := &Chain{exited: make(chan struct{}), stderr: &tailBuffer{max: 8 << 10}}
	c.cmd = exec.Command(bin, args...)
	// Its own process group, so Stop also kills a child (the npm wrapper spawns the binary).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// stdout carries the banner (with the development keys) and then the listen address; it is
	// scanned for the address and otherwise discarded, never shown.
	c.cmd.Stdout = &listenWatcher{found: listening}
	c.cmd.Stderr = c.stderr
	c.cmd.WaitDelay = anvilStopBound
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("testenv: start anvil %s: %v", bin, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(c.Stop)

	var addr string
	select {
	case addr = <-listening:
	case <-c.exited:
		t.Fatalf("testenv: anvil exited before listening: %s", c.stderr.String())
	case <-time.After(anvilStartBound):
		t.Fatalf("testenv: anvil did not listen within %s: %s", anvilStartBound, c.stderr.String())
	}
	c.RPCURL = "http://" + addr

	ctx, cancel := context.WithTimeout(context.Background(), anvilStartBound)
	defer cancel()
	if c.Client, err = ethclient.DialContext(ctx, c.RPCURL); err != nil {
		t.Fatalf("testenv: dial anvil: %v", err)
	}
	if c.ChainID, err = c.Client.ChainID(ctx); err != nil {
		t.Fatalf("testenv: anvil eth_chainId: %v", err)
	}
	if c.ChainID.Uint64() != cfg.chainID {
		t.Fatalf("testenv: anvil reports chain id %s, want %d", c.ChainID, cfg.chainID)
	}
	if c.Accounts, err = readAnvilAccounts(configOut, cfg.accounts); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c.deployer = NewAccount(t)
	c.SetBalance(t, c.deployer.Address, deployerFunds)
	return c
}

// Stop kills anvil and waits for it to exit. It is safe to call more than once and runs at
// cleanup; call it mid-test to simulate an RPC node that went away.
func (c *Chain) Stop() {
	c.stopOnce.Do(func() {
		if c.Client != nil {
			c.Client.Close()
		}
		if c.cmd == nil || c.cmd.Process == nil {
			return
		}
		// Negative pid: the whole process group.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-c.exited:
		case <-time.After(anvilStopBound):
		}
	})
}

// FacilitatorAccount returns Accounts[0], the account reserved for the facilitator signer.
func (c *Chain) FacilitatorAccount() Account { return c.Accounts[0] }

// RPC calls a JSON-RPC method and decodes its result into result (which may be nil).
func (c *Chain) RPC(t testing.TB, result any, method string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	if err := c.Client.Client().CallContext(ctx, result, method, args...); err != nil {
		t.Fatalf("testenv: %s: %v", method, err)
	}
}

// Mine mines one block (evm_mine), including every pending transaction.
func (c *Chain) Mine(t testing.TB) {
	t.Helper()
	c.RPC(t, nil, "evm_mine")
}

// IncreaseTime moves the chain's clock forward by seconds and mines a block, so that the
// latest block's timestamp reflects it (evm_increaseTime, evm_mine).
func (c *Chain) IncreaseTime(t testing.TB, seconds uint64) {
	t.Helper()
	c.RPC(t, nil, "evm_increaseTime", hexutil.Uint64(seconds))
	c.Mine(t)
}

// SetNextBlockTimestamp fixes the timestamp of the next mined block (evm_setNextBlockTimestamp).
func (c *Chain) SetNextBlockTimestamp(t testing.TB, timestamp uint64) {
	t.Helper()
	c.RPC(t, nil, "evm_setNextBlockTimestamp", hexutil.Uint64(timestamp))
}

// SetAutomine turns mining per transaction on or off (evm_setAutomine). With it off,
// transactions stay pending (their receipts unknown) until Mine.
func (c *Chain) SetAutomine(t testing.TB, on bool) {
	t.Helper()
	c.RPC(t, nil, "evm_setAutomine", on)
}

// SetBalance sets the ether balance of addr in wei (anvil_setBalance).
func (c *Chain) SetBalance(t testing.TB, addr common.Address, wei *big.Int) {
	t.Helper()
	c.RPC(t, nil, "anvil_setBalance", addr, (*hexutil.Big)(wei))
}

// Now returns the timestamp of the latest block: the chain's clock, which is what the token's
// validAfter/validBefore checks compare against.
func (c *Chain) Now(t testing.TB) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	h, err := c.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		t.Fatalf("testenv: latest header: %v", err)
	}
	return h.Time
}

// anvilConfigOut is the part of anvil's --config-out file the harness reads.
type anvilConfigOut struct {
	Accounts    []common.Address `json:"available_accounts"`
	PrivateKeys []string         `json:"private_keys"`
}

func readAnvilAccounts(path string, want int) ([]Account, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read anvil --config-out: %w", err)
	}
	var out anvilConfigOut
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode anvil --config-out: %w", err)
	}
	if len(out.PrivateKeys) != want || len(out.Accounts) != want {
		return nil, fmt.Errorf("anvil --config-out lists %d keys and %d accounts, want %d",
			len(out.PrivateKeys), len(out.Accounts), want)
	}
	accounts := make([]Account, want)
	for i, k := range out.PrivateKeys {
		a, err := accountFromHex(strings.TrimPrefix(k, "0x"))
		if err != nil {
			return nil, fmt.Errorf("anvil account %d: %w", i, err)
		}
		if a.Address != out.Accounts[i] {
			return nil, fmt.Errorf("anvil account %d: key does not match address %s", i, out.Accounts[i])
		}
		accounts[i] = a
	}
	return accounts, nil
}

// listenWatcher scans anvil's stdout for "Listening on <host:port>" and reports the address once.
type listenWatcher struct {
	found chan<- string
	line  []byte
	done  bool
}

func (w *listenWatcher) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(w.line[:i]))
		w.line = w.line[i+1:]
		if addr, ok := strings.CutPrefix(line, "Listening on "); ok {
			w.found <- strings.TrimSpace(addr)
			w.done, w.line = true, nil
			break
		}
	}
	if len(w.line) > 64<<10 { // a line this long is not the one we want
		w.line = nil
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it (anvil's stderr, for failure messages).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
	// scanAs, when set, hands what the buffer drops to ScanCanaries under this name, so
	// that output beyond max is scanned too (Caddy's; see canary.go).
	scanAs string
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > b.max {
		drop := len(b.b) - b.max
		if b.scanAs != "" {
			// The overlap keeps a canary cut by the boundary whole in one of the scans.
			ScanCanaries(b.scanAs, b.b[:min(len(b.b), drop+MaxCanaryLen())])
		}
		b.b = b.b[drop:]
	}
	return len(p), nil
}

// bytes returns a copy of what the buffer holds.
func (b *tailBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.b...)
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.b) == 0 {
		return "(no stderr output)"
	}
	return strings.TrimSpace(string(b.b))
}
