package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// passClientScript makes two calls with a real npm x402 client: the first pays for
// argv[1]; the second asks for argv[2] without paying. MODE=pass sends the X-402-PASS
// the first answer carried (x402-fetch 1.2.0 with CLIENT=v1, @x402/fetch 2.27 with v2);
// MODE=siwx sends nothing itself: @x402/fetch with @x402/extensions' sign-in-with-x client
// extension answers the second 402 with a SIGN-IN-WITH-X proof. Every request the client
// sends is recorded: whether it carried a payment, a pass or a proof.
const passClientScript = `
const [first, second] = process.argv.slice(1);
const key = process.env.X402_PAYER_KEY;
const sent = [];
const recording = async (input, init) => {
  const req = new Request(input, init);
  sent.push({
    url: req.url,
    pay: req.headers.has("x-payment") || req.headers.has("payment-signature"),
    pass: req.headers.has("x-402-pass"),
    siwx: req.headers.has("sign-in-with-x"),
  });
  return fetch(req);
};
let f;
if (process.env.CLIENT === "v1") {
  const { wrapFetchWithPayment, createSigner } = await import("x402-fetch");
  f = wrapFetchWithPayment(recording, await createSigner("base-sepolia", key));
} else {
  const { wrapFetchWithPayment, x402Client } = await import("@x402/fetch");
  const { ExactEvmScheme } = await import("@x402/evm/exact/client");
  const { createSIWxClientExtension } = await import("@x402/extensions/sign-in-with-x");
  const { privateKeyToAccount } = await import("viem/accounts");
  const account = privateKeyToAccount(key);
  const client = x402Client.fromConfig({
    schemes: [{ network: "eip155:84532", client: new ExactEvmScheme(account) }],
    spendControls: { allowedAssets: [{ network: "eip155:84532", asset: process.env.X402_ASSET, maxAmountPerPayment: "100000" }] },
  });
  if (process.env.MODE === "siwx") client.registerExtension(createSIWxClientExtension({ signers: [account] }));
  f = wrapFetchWithPayment(recording, client);
}
const r1 = await f(first, { method: "GET" });
const pass = r1.headers.get("x-402-pass");
const firstBody = await r1.text();
const paidCalls = sent.length;
const headers = process.env.MODE === "pass" && pass ? { "X-402-PASS": pass } : {};
const r2 = await f(second, { method: "GET", headers });
process.stdout.write(JSON.stringify({
  first: r1.status, firstBody, gotPass: !!pass,
  second: r2.status, secondBody: await r2.text(),
  paidCalls: sent.slice(0, paidCalls), laterCalls: sent.slice(paidCalls),
}));
`

type sentCall struct {
	URL  string `json:"url"`
	Pay  bool   `json:"pay"`
	Pass bool   `json:"pass"`
	SIWX bool   `json:"siwx"`
}

type passClientResult struct {
	First      int        `json:"first"`
	FirstBody  string     `json:"firstBody"`
	GotPass    bool       `json:"gotPass"`
	Second     int        `json:"second"`
	SecondBody string     `json:"secondBody"`
	PaidCalls  []sentCall `json:"paidCalls"`
	LaterCalls []sentCall `json:"laterCalls"`
}

// runPassClient runs passClientScript in integration/, where the npm clients are.
func runPassClient(t *testing.T, client, mode, first, second, asset string, payer testenv.Account) passClientResult {
	t.Helper()
	dir, err := testenv.IntegrationDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@x402", "extensions")); err != nil {
		t.Fatal("integration/node_modules is missing @x402/extensions; run: cd integration && npm ci")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH; install Node.js 20 or newer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", passClientScript, first, second)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CLIENT="+client, "MODE="+mode, "X402_ASSET="+asset,
		"X402_PAYER_KEY="+hexutil.Encode(crypto.FromECDSA(payer.Key)))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client %s/%s: %v: %s", client, mode, err, tail(stderr.String(), 2000))
	}
	var r passClientResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	return r
}

// TestRealClientsComeBackWithoutPaying: x402-fetch 1.2.0 and @x402/fetch 2.27 each pay once
// for a page under /premium/, then get a second page under it without paying: the v1
// client and the v2 client by sending the pass header back, and the v2 client, with
// @x402/extensions 2.27's sign-in-with-x, by signing the challenge of the second 402
// without being given the pass at all. Each payer moves exactly one transfer.
func TestRealClientsComeBackWithoutPaying(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.passConfig(testPassKey), Options{}), up)
	for i, tc := range []struct {
		client, mode, via string
	}{
		{"v1", "pass", PassViaHeader},
		{"v2", "pass", PassViaHeader},
		{"v2", "siwx", PassViaSIWX},
	} {
		t.Run(tc.client+"/"+tc.mode, func(t *testing.T) {
			payer := env.chain.Accounts[3+i]
			before := env.ledger(t, payer.Address)
			first, second := srv.URL+"/premium/"+tc.client+tc.mode+"/one", srv.URL+"/premium/"+tc.client+tc.mode+"/two"
			r := runPassClient(t, tc.client, tc.mode, first, second, env.token.Address.Hex(), payer)
			if r.First != 200 || r.FirstBody != `{"data":"premium"}` || !r.GotPass {
				t.Fatalf("first call: %d %q, pass %v", r.First, r.FirstBody, r.GotPass)
			}
			if r.Second != 200 || r.SecondBody != `{"data":"premium"}` {
				t.Fatalf("second call: %d %q; calls %+v", r.Second, r.SecondBody, r.LaterCalls)
			}
			paid := 0
			for _, c := range r.PaidCalls {
				if c.Pay {
					paid++
				}
			}
			if paid != 1 {
				t.Errorf("the first call sent %d payments, want 1: %+v", paid, r.PaidCalls)
			}
			var viaPass, viaSIWX bool
			for _, c := range r.LaterCalls {
				if c.Pay {
					t.Errorf("the second call paid: %+v", r.LaterCalls)
				}
				viaPass = viaPass || c.Pass
				viaSIWX = viaSIWX || c.SIWX
			}
			if (tc.via == PassViaHeader && !viaPass) || (tc.via == PassViaSIWX && (!viaSIWX || viaPass)) {
				t.Errorf("second call's requests %+v, want it let in by %s", r.LaterCalls, tc.via)
			}
			if p := up.lastPaid(); p == nil || p.Pass == nil || p.Pass.Via != tc.via || p.Pass.Payer != payer.Address.Hex() {
				t.Errorf("Paid of the second call = %+v, want a pass via %s", p, tc.via)
			}
			env.expectMoved(t, payer.Address, before, 1)
		})
	}
}
