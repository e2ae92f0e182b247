package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// clientScript pays URL (argv[1]) with a real npm x402 client over real HTTP: CLIENT=v1 is
// x402-fetch 1.2.0, CLIENT=v2 is @x402/fetch 2.x with @x402/evm. It prints
// {status, body, xPaymentResponse, paymentResponse}. The key comes from the environment
// and is never printed.
const clientScript = `
const url = process.argv[1];
const key = process.env.X402_PAYER_KEY;
let f;
if (process.env.CLIENT === "v1") {
  const { wrapFetchWithPayment, createSigner } = await import("x402-fetch");
  f = wrapFetchWithPayment(fetch, await createSigner("base-sepolia", key));
} else {
  const { wrapFetchWithPayment, x402Client } = await import("@x402/fetch");
  const { ExactEvmScheme } = await import("@x402/evm/exact/client");
  const { privateKeyToAccount } = await import("viem/accounts");
  // Our token is not one of the client's default assets: allow it, capped, as a user must.
  const client = x402Client.fromConfig({
    schemes: [{ network: "eip155:84532", client: new ExactEvmScheme(privateKeyToAccount(key)) }],
    spendControls: { allowedAssets: [{ network: "eip155:84532", asset: process.env.X402_ASSET, maxAmountPerPayment: "100000" }] },
  });
  f = wrapFetchWithPayment(fetch, client);
}
const res = await f(url, { method: "GET" });
process.stdout.write(JSON.stringify({
  status: res.status,
  body: await res.text(),
  xPaymentResponse: res.headers.get("x-payment-response"),
  paymentResponse: res.headers.get("payment-response"),
}));
`

type clientResult struct {
	Status           int    `json:"status"`
	Body             string `json:"body"`
	XPaymentResponse string `json:"xPaymentResponse"`
	PaymentResponse  string `json:"paymentResponse"`
}

// runClient runs clientScript with node in integration/, where the npm clients are installed.
func runClient(t *testing.T, client, url, asset string, payer testenv.Account) clientResult {
	t.Helper()
	dir, err := testenv.IntegrationDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@x402", "fetch")); err != nil {
		t.Fatal("integration/node_modules is missing the x402 clients; run: cd integration && npm ci")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH; install Node.js 20 or newer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", clientScript, url)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CLIENT="+client, "X402_ASSET="+asset, "X402_PAYER_KEY="+hexutil.Encode(crypto.FromECDSA(payer.Key)))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client %s: %v: %s", client, err, tail(stderr.String(), 2000))
	}
	var r clientResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	return r
}

// TestRealClientsPayThroughMiddleware: x402-fetch 1.2.0 (v1) and @x402/fetch 2.x (v2) each
// pay for a resource behind the net/http middleware over real HTTP; both get the content,
// the response header decodes to a mined transaction, and balances move by the price.
func TestRealClientsPayThroughMiddleware(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	for i, tc := range []struct {
		client  string
		version int
		network string
	}{{"v1", x402.Version1, "base-sepolia"}, {"v2", x402.Version2, "eip155:84532"}} {
		t.Run(tc.client, func(t *testing.T) {
			payer := env.chain.Accounts[3+i]
			before := env.ledger(t, payer.Address)
			calls := up.calls.Load()
			r := runClient(t, tc.client, srv.URL+"/api/"+tc.client, env.token.Address.Hex(), payer)
			if r.Status != 200 || r.Body != `{"data":"premium"}` {
				t.Fatalf("client got %d %q", r.Status, r.Body)
			}
			header := r.XPaymentResponse
			if tc.version == x402.Version2 {
				if r.PaymentResponse == "" || r.PaymentResponse != r.XPaymentResponse {
					t.Errorf("PAYMENT-RESPONSE %q, X-PAYMENT-RESPONSE %q", r.PaymentResponse, r.XPaymentResponse)
				}
				header = r.PaymentResponse
			}
			sr, err := x402.DecodeSettleResponse(header)
			if err != nil || !sr.Success || sr.Network != tc.network || !strings.EqualFold(sr.Payer, payer.Address.Hex()) {
				t.Fatalf("settle response %+v %v", sr, err)
			}
			env.expectOnChain(t, sr.Transaction, payer.Address)
			env.expectMoved(t, payer.Address, before, 1)
			if got := up.calls.Load() - calls; got != 1 {
				t.Errorf("upstream ran %d times, want 1", got)
			}
			if p := up.lastPaid(); p == nil || p.Settlement.Version != tc.version {
				t.Errorf("Paid = %+v, want version %d", p, tc.version)
			}
		})
	}
}
