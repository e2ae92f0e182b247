package gate

import (
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// corsApp is a browser app on another origin than the paid API at .API: it asks with a
// custom header (so the browser sends a CORS preflight first), reads the 402's
// PAYMENT-REQUIRED, has its injected EIP-1193 wallet (its key held by the app's server)
// sign the EIP-3009 authorization, and asks again with PAYMENT-SIGNATURE (a second
// preflight). It writes what it got as its verdict.
var corsApp = template.Must(template.New("cors").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="verdict"></output>
<script>
var api = {{.API}}, payer = {{.Payer}};
window.ethereum = { request: async function (args) {
  switch (args.method) {
  case "eth_requestAccounts": return [payer];
  case "eth_signTypedData_v4":
    var r = await fetch("/wallet/sign", { method: "POST", body: args.params[1] });
    var text = (await r.text()).trim();
    if (!r.ok) throw new Error("wallet: " + text);
    return text;
  }
  throw new Error("unsupported method " + args.method);
} };
function hex(bytes) {
  var s = "0x";
  for (var i = 0; i < bytes.length; i++) s += (bytes[i] < 16 ? "0" : "") + bytes[i].toString(16);
  return s;
}
function done(v) { document.getElementById("verdict").setAttribute("data-verdict", v); }
(async function () {
  try {
    var first = await fetch(api, { headers: { "X-App": "demo" }, cache: "no-store" });
    if (first.status !== 402) return done("FAIL the first answer is " + first.status);
    var pr = JSON.parse(atob(first.headers.get("PAYMENT-REQUIRED")));
    var req = pr.accepts[0];
    var from = (await window.ethereum.request({ method: "eth_requestAccounts" }))[0];
    var now = Math.floor(Date.now() / 1000);
    var auth = { from: from, to: req.payTo, value: req.amount, validAfter: String(now - 600),
      validBefore: String(now + req.maxTimeoutSeconds), nonce: hex(crypto.getRandomValues(new Uint8Array(32))) };
    var typed = {
      types: {
        EIP712Domain: [{ name: "name", type: "string" }, { name: "version", type: "string" },
          { name: "chainId", type: "uint256" }, { name: "verifyingContract", type: "address" }],
        TransferWithAuthorization: [{ name: "from", type: "address" }, { name: "to", type: "address" },
          { name: "value", type: "uint256" }, { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" }, { name: "nonce", type: "bytes32" }]
      },
      primaryType: "TransferWithAuthorization",
      domain: { name: req.extra.name, version: req.extra.version, chainId: Number(req.network.split(":")[1]), verifyingContract: req.asset },
      message: auth
    };
    var signature = await window.ethereum.request({ method: "eth_signTypedData_v4", params: [from, JSON.stringify(typed)] });
    var payment = { x402Version: 2, resource: pr.resource, accepted: req, payload: { signature: signature, authorization: auth } };
    var paid = await fetch(api, { headers: { "X-App": "demo", "PAYMENT-SIGNATURE": btoa(JSON.stringify(payment)) }, cache: "no-store" });
    var settle = paid.headers.get("PAYMENT-RESPONSE");
    done("status=" + paid.status + " body=" + (await paid.text()) + " settled=" + (settle ? JSON.parse(atob(settle)).success : "unreadable"));
  } catch (e) { done("FAIL " + e); }
})();
</script></body></html>`))

// TestCrossOriginAppPaysInChromium: a page on another origin pays the gated API from
// headless Chromium with its injected wallet. Both of its requests carry custom headers,
// so Chromium sends a CORS preflight before each; the preflights reach the upstream
// uncharged (it answers them), the payment settles on chain, and the page reads the
// answer and its PAYMENT-RESPONSE. With preflight charge the first preflight gets the 402,
// the browser refuses to send the request, and nothing moves.
func TestCrossOriginAppPaysInChromium(t *testing.T) {
	env := newTestEnv(t)
	for _, tc := range []struct {
		name, preflight string
		want            string
		paid            int64
	}{
		{"preflights pass uncharged and the app pays", "", `status=200 body={"data":"the paid answer"} settled=true`, 1},
		{"with preflight charge the browser sends nothing", PreflightCharge, "FAIL TypeError: Failed to fetch", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.ledger(t, env.payer.Address)
			var preflights, gets atomic.Int32
			app := httptest.NewServer(nil)
			defer app.Close()
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodOptions {
					preflights.Add(1)
					w.Header().Set("Access-Control-Allow-Methods", "GET")
					w.Header().Set("Access-Control-Allow-Headers", "X-App, PAYMENT-SIGNATURE")
					w.WriteHeader(http.StatusNoContent)
					return
				}
				gets.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"data":"the paid answer"}`)
			})
			cfg := env.config()
			cfg.Preflight = tc.preflight
			g := env.gate(t, cfg, Options{}).Middleware(MiddlewareOptions{})(up)
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// What Caddy's header directive does before x402: every answer allows the app's origin.
				w.Header().Set("Access-Control-Allow-Origin", app.URL)
				w.Header().Set("Vary", "Origin")
				g.ServeHTTP(w, r)
			}))
			defer api.Close()
			mux := http.NewServeMux()
			mux.HandleFunc("/app", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_ = corsApp.Execute(w, map[string]any{"API": api.URL + "/paid", "Payer": strings.ToLower(env.payer.Address.Hex())})
			})
			mux.HandleFunc("/wallet/sign", walletSignHandler(env.payer, env.token.Address))
			app.Config.Handler = mux

			got := verdictOf(t, runChromium(t, "--virtual-time-budget=30000", "--dump-dom", app.URL+"/app"))
			if got != tc.want {
				t.Errorf("the app on another origin got %q, want %q", got, tc.want)
			}
			if wantPreflights := int32(2 * tc.paid); preflights.Load() != wantPreflights || gets.Load() != int32(tc.paid) {
				t.Errorf("the upstream answered %d preflights and %d requests, want %d and %d", preflights.Load(), gets.Load(), wantPreflights, tc.paid)
			}
			env.expectMoved(t, env.payer.Address, before, tc.paid)
		})
	}
}
