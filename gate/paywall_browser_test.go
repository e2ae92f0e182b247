package gate

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// browserHeader is what a desktop browser sends on a navigation.
func browserHeader() http.Header {
	h := http.Header{}
	h.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	h.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36")
	return h
}

// TestPaywallPage checks the page a browser gets: still a 402 with PAYMENT-REQUIRED, a
// small self-contained HTML page that shows price, payee and network, with every
// configured string escaped; agents and HEAD requests get no page.
func TestPaywallPage(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Resource.Description = `<script>alert("x")</script> & more`
	up := &upstream{}
	srv := serve(t, env.gate(t, cfg, Options{}), up)
	url := srv.URL + "/article"

	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header = browserHeader()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page := readBody(t, res)
	if res.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d, want 402", res.StatusCode)
	}
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("Content-Type %q", res.Header.Get("Content-Type"))
	}
	pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil || pr.Accepts[0].Amount != "10000" {
		t.Fatalf("PAYMENT-REQUIRED on the paywall: %+v %v", pr, err)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
	}
	if len(page) > 24<<10 { // 18 KiB with the Permit2 path, and the words of the reasons
		t.Errorf("the paywall is %d bytes; it must stay small and self-contained", len(page))
	}
	s := string(page)
	for _, want := range []string{"0.01 USDC", env.payTo.Hex(), "base-sepolia", "eip155:84532", env.token.Address.Hex(),
		"eth_signTypedData_v4", "TransferWithAuthorization", "PAYMENT-SIGNATURE", "window.ethereum",
		"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more"} {
		if !strings.Contains(s, want) {
			t.Errorf("the paywall does not contain %q", want)
		}
	}
	if strings.Contains(s, `<script>alert("x")`) {
		t.Error("the description reached the page unescaped")
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)<script[^>]+src=`), regexp.MustCompile(`(?i)<link\b`), regexp.MustCompile(`(?i)@import`),
		regexp.MustCompile(`(?i)<img\b`), regexp.MustCompile(`(?i)<iframe\b`),
	} {
		if bad.MatchString(s) {
			t.Errorf("the paywall loads an external resource: %s", bad)
		}
	}

	for _, tc := range []struct {
		name   string
		header http.Header
		method string
	}{
		{"agent asking for html", http.Header{"Accept": {"text/html"}, "User-Agent": {"curl/8.0"}}, http.MethodGet},
		{"browser fetch asking for json", http.Header{"Accept": {"*/*"}, "User-Agent": {"Mozilla/5.0"}}, http.MethodGet},
	} {
		req, _ := http.NewRequest(tc.method, url, nil)
		req.Header = tc.header
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, res)
		if res.StatusCode != 402 || res.Header.Get("Content-Type") != "application/json" || errorOf(t, body) != "X-PAYMENT header is required" {
			t.Errorf("%s: %d %q %s", tc.name, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	req, _ = http.NewRequest(http.MethodHead, url, nil)
	req.Header = browserHeader()
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, res); res.StatusCode != 402 || len(body) != 0 || res.Header.Get(x402.HeaderPaymentRequired) == "" {
		t.Errorf("HEAD: %d, %d body bytes", res.StatusCode, len(body))
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran")
	}
}

// runChromium runs headless chromium with args and a private profile, and returns its
// standard output (testenv.RunChromium).
func runChromium(t *testing.T, args ...string) []byte {
	t.Helper()
	return testenv.RunChromium(t, t.TempDir(), args...)
}

// runChromiumIn is runChromium with the profile in dir, so several runs share cookies.
func runChromiumIn(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	return testenv.RunChromium(t, dir, args...)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// verdictOf reads the data-verdict attribute a wrapper page wrote into its DOM.
func verdictOf(t *testing.T, dom []byte) string {
	t.Helper()
	m := regexp.MustCompile(`data-verdict="([^"]*)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page wrote no verdict; DOM:\n%s", tail(string(dom), 3000))
	}
	return html.UnescapeString(string(m[1]))
}

// popupScript is shared by the wrapper pages, which drive the paywall in a same-origin
// popup since the paywall refuses every frame: popup(src, id, ready) opens src and calls
// ready(win, doc) once its document is complete and holds the element id.
const popupScript = `
function popup(src, id, ready) {
  var w = window.open(src, "page", "popup,width=1280,height=900"), tries = 0;
  (function poll() {
    var doc = null;
    try { doc = w.document; } catch (e) { /* not yet same-origin */ }
    if (doc && doc.readyState === "complete" && doc.getElementById(id)) return ready(w, doc);
    if (++tries > 600) return ready(w, null);
    setTimeout(poll, 50);
  })();
}`

// checkScript is shared by the wrapper pages: check(doc, id, want) returns "" when the
// element id shows want, has a non-empty box inside the viewport, is visible by its
// computed style, and is what the browser finds at its centre (nothing covers it).
const checkScript = `
function check(doc, id, want) {
  var el = doc.getElementById(id);
  if (!el) return id + ": missing";
  var text = el.textContent.replace(/\s+/g, " ").trim();
  if (text.indexOf(want) < 0) return id + ": text " + JSON.stringify(text) + " lacks " + JSON.stringify(want);
  var win = doc.defaultView, r = el.getBoundingClientRect();
  if (!(r.width > 0 && r.height > 0)) return id + ": empty box";
  if (r.left < 0 || r.top < 0 || r.right > win.innerWidth || r.bottom > win.innerHeight)
    return id + ": outside the viewport " + JSON.stringify([r.left, r.top, r.right, r.bottom, win.innerWidth, win.innerHeight]);
  var cs = win.getComputedStyle(el);
  if (cs.visibility !== "visible") return id + ": visibility " + cs.visibility;
  for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
    var s = win.getComputedStyle(e);
    if (s.display === "none" || parseFloat(s.opacity) === 0) return id + ": hidden by " + e.tagName;
  }
  if (parseFloat(cs.fontSize) < 8) return id + ": font size " + cs.fontSize;
  if (cs.color === win.getComputedStyle(doc.body).backgroundColor) return id + ": text colour is the background colour";
  var hit = doc.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  if (!hit || !(hit === el || el.contains(hit))) return id + ": covered by " + (hit ? hit.tagName : "nothing");
  return "";
}`

// checkWrapper opens the paywall at .Src in a popup and checks each [id, text] of .Checks.
var checkWrapper = template.Must(template.New("wrapper").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="verdict"></output>
<script>
{{.Check}}
{{.Popup}}
popup({{.Src}}, "pay", function (w, doc) {
  setTimeout(function () {
    var errs = [];
    if (!doc) { errs.push("the paywall did not load"); }
    else {
      {{.Checks}}.forEach(function (c) {
        var e = check(doc, c[0], c[1]); if (e) errs.push(e);
      });
    }
    document.getElementById("verdict").setAttribute("data-verdict", errs.length ? "FAIL " + errs.join("; ") : "PASS");
  }, 200);
});
</script></body></html>`))

// TestPaywallRendersInChromium renders the paywall in headless Chromium: a screenshot
// that is a real page, not one flat colour, and a same-origin wrapper page whose script
// finds the price and the payee visible inside the viewport.
func TestPaywallRendersInChromium(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := paywallServer(env.gate(t, env.config(), Options{}), up,
		[][2]string{{"price", "0.01 USDC"}, {"payee", env.payTo.Hex()}, {"network", "base-sepolia"}, {"pay", "pay"}})
	defer srv.Close()

	shot := filepath.Join(t.TempDir(), "paywall.png")
	runChromium(t, "--screenshot="+shot, srv.URL+"/paid")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(f)
	_ = f.Close()
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %dx%d, want 1280x900", b.Dx(), b.Dy())
	}
	colours, share := colourStats(img)
	if colours < 16 || share < 0.005 {
		t.Errorf("the screenshot looks blank: %d colours, %.4f of pixels differ from the most common one", colours, share)
	}
	if b, err := os.ReadFile(shot); err == nil {
		_ = os.WriteFile(filepath.Join(os.TempDir(), "paywall.png"), b, 0o644) // for people to look at
	}

	dom := runChromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/wrapper")
	if v := verdictOf(t, dom); v != "PASS" {
		t.Errorf("in Chromium: %s", v)
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran for the paywall")
	}
}

// paywallServer serves g's paywall at /paid in front of up, and at /wrapper the
// checkWrapper page that checks each [id, text] of checks on it.
func paywallServer(g *Gate, up http.Handler, checks [][2]string) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/paid", g.Middleware(MiddlewareOptions{})(up))
	mux.HandleFunc("/wrapper", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = checkWrapper.Execute(w, map[string]any{
			"Src": "/paid", "Check": template.JS(checkScript), "Popup": template.JS(popupScript), "Checks": checks,
		})
	})
	return httptest.NewServer(mux)
}

// colourStats counts distinct colours and the share of pixels unlike the most common one.
func colourStats(img image.Image) (int, float64) {
	counts := map[[4]uint32]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[[4]uint32{r, g, bl, a}]++
		}
	}
	top, total := 0, b.Dx()*b.Dy()
	for _, n := range counts {
		top = max(top, n)
	}
	return len(counts), float64(total-top) / float64(total)
}

// chainWallet is an EIP-1193 wallet whose key signs on the test server
// (eth_signTypedData_v4), and whose eth_call, eth_sendTransaction (from the payer, which
// anvil signs) and eth_getTransactionReceipt go to the chain (walletRPCHandler). It starts on the chain
// .Start and knows the chains .Known; wallet_switchEthereumChain to another chain fails
// with 4902, and wallet_addEthereumChain adds the chain and switches to it, as MetaMask
// does. It records every call, with the parameters of the chain calls, and the opener
// writes the paywall's last status (or the paid content) as its verdict.
var chainWallet = template.Must(template.New("chain").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="verdict"></output>
<script>
{{.Popup}}
var payer = {{.Payer}}, chain = {{.Start}}, known = {{.Known}}, calls = [];
var provider = {
  request: async function (args) {
    var m = args.method;
    calls.push(m.indexOf("wallet_") === 0 ? m + " " + JSON.stringify(args.params) : m);
    switch (m) {
    case "eth_requestAccounts": case "eth_accounts": return [payer];
    case "eth_chainId": return chain;
    case "wallet_switchEthereumChain":
      if (known.indexOf(args.params[0].chainId) < 0) { var e = new Error("Unrecognized chain ID"); e.code = 4902; throw e; }
      chain = args.params[0].chainId;
      return null;
    case "wallet_addEthereumChain":
      known.push(args.params[0].chainId);
      chain = args.params[0].chainId;
      return null;
    case "eth_call": case "eth_sendTransaction": case "eth_getTransactionReceipt":
      var rr = await fetch("/wallet/rpc", { method: "POST", body: JSON.stringify({ method: m, params: args.params }) });
      if (!rr.ok) throw new Error("wallet: " + (await rr.text()).trim());
      return await rr.json();
    case "eth_signTypedData_v4": case "personal_sign":
      var r = await fetch(m === "personal_sign" ? "/wallet/sign-message" : "/wallet/sign", { method: "POST", body: args.params[m === "personal_sign" ? 0 : 1] });
      var text = (await r.text()).trim();
      if (!r.ok) throw new Error("wallet: " + text);
      return text;
    }
    throw new Error("unsupported method " + m);
  }
};
function done(v) { document.getElementById("verdict").setAttribute("data-verdict", JSON.stringify({ verdict: v, calls: calls })); }
popup({{.Src}}, {{.Button}}, function (w, first) {
  if (!first) return done("FAIL the paywall did not load");
  w.ethereum = provider;
  first.getElementById({{.Button}}).click();
  var tries = 0;
  (function poll() {
    var doc = w.document, content = doc && doc.getElementById("content"), st = doc && doc.getElementById("status");
    if (content) return done("PAID " + content.textContent + " in " + w.getComputedStyle(content).color);
    if (st && st.className === "err") return done("SAID " + st.textContent);
    if (++tries > 300) return done("FAIL timeout: " + (st ? st.textContent : "no status"));
    setTimeout(poll, 100);
  })();
});
</script></body></html>`))

// walletRun is what a chainWallet page reported.
type walletRun struct {
	Verdict string   `json:"verdict"`
	Calls   []string `json:"calls"`
}

// browserWallet is how payInChromium's wallet is set up: whose key it holds, the chain it
// starts on, the chains it knows, and the paywall's button it clicks ("pay" or "signin").
type browserWallet struct {
	payer  testenv.Account
	start  string
	known  []string
	button string
}

// walletOn is a wallet of payer on env's chain that clicks pay.
func walletOn(env *testEnv, payer testenv.Account) browserWallet {
	chain := fmt.Sprintf("0x%x", env.chain.ChainID)
	return browserWallet{payer: payer, start: chain, known: []string{chain}, button: "pay"}
}

// payInChromium serves env's gate on cfg at /paid, before an HTML page with an inline style and
// script, and a chainWallet whose key is payer's; it runs Chromium on it and returns what
// the page reported and how often the upstream ran.
func payInChromium(t *testing.T, env *testEnv, cfg Config, bw browserWallet) (walletRun, int32) {
	t.Helper()
	var upCalls atomic.Int32
	content := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upCalls.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><style>#content{color:rgb(10, 120, 60)}</style><h1 id="content">premium article</h1>`+
			`<script>document.getElementById("content").textContent += ", scripted"</script>`)
	})
	mux := http.NewServeMux()
	mux.Handle("/paid", env.gate(t, cfg, Options{}).Middleware(MiddlewareOptions{})(content))
	mux.HandleFunc("/wallet", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = chainWallet.Execute(w, map[string]any{
			"Src": "/paid", "Popup": template.JS(popupScript), "Payer": strings.ToLower(bw.payer.Address.Hex()),
			"Start": bw.start, "Known": bw.known, "Button": bw.button,
		})
	})
	mux.HandleFunc("/wallet/sign", walletSignHandler(bw.payer, env.token.Address))
	mux.HandleFunc("/wallet/rpc", walletRPCHandler(env.chain, bw.payer.Address))
	mux.HandleFunc("/wallet/sign-message", signInHandler(bw.payer.Key, &atomic.Int32{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dom := runChromium(t, "--virtual-time-budget=30000", "--dump-dom", srv.URL+"/wallet")
	var run walletRun
	if err := json.Unmarshal([]byte(verdictOf(t, dom)), &run); err != nil {
		t.Fatalf("the wallet page's verdict: %v", err)
	}
	return run, upCalls.Load()
}

// TestPaywallPaysWithBrowserWallet drives the paywall's own script in Chromium: an
// EIP-1193 provider (its key held by the test server) signs the page's EIP-712 typed
// data, the page retries with PAYMENT-SIGNATURE, the payment settles on chain and the
// page shows the upstream's content in its place, with the content's own inline style and
// script applied under the paywall's policy. Balances move by exactly the price.
func TestPaywallPaysWithBrowserWallet(t *testing.T) {
	env := newTestEnv(t)
	before := env.ledger(t, env.payer.Address)
	run, up := payInChromium(t, env, env.config(), walletOn(env, env.payer))
	if run.Verdict != paidPage || up != 1 {
		t.Fatalf("in Chromium: %s (upstream ran %d times)", run.Verdict, up)
	}
	if want := []string{"eth_requestAccounts", "eth_chainId", "eth_signTypedData_v4"}; strings.Join(run.Calls, ",") != strings.Join(want, ",") {
		t.Errorf("wallet calls %q, want %q", run.Calls, want)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// paidPage is what payInChromium's wallet page reports once the paid page shows.
const paidPage = "PAID premium article, scripted in rgb(10, 120, 60)"

// signInHandler is the test wallet's personal_sign: it signs a sign-in-with-x message,
// which arrives as 0x-hex of its UTF-8 bytes, with key, and counts its signatures.
func signInHandler(key *ecdsa.PrivateKey, count *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 8<<10))
		msg, derr := hexutil.Decode(strings.TrimSpace(string(raw)))
		if err != nil || derr != nil || !strings.Contains(string(msg), " wants you to sign in with your Ethereum account:\n") {
			http.Error(w, "not a sign-in message", http.StatusBadRequest)
			return
		}
		sig, err := crypto.Sign(accounts.TextHash(msg), key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		sig[64] += 27
		count.Add(1)
		_, _ = io.WriteString(w, hexutil.Encode(sig))
	}
}

// walletSignHandler is the test wallet's eth_signTypedData_v4 over HTTP: walletSign with
// payer's key, for token; the signature is 0x-hex.
func walletSignHandler(payer testenv.Account, token common.Address) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sig, err := walletSign(r.Body, payer.Address, token, func(d []byte) ([]byte, error) {
			return crypto.Sign(d, payer.Key)
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, hexutil.Encode(sig))
	}
}

// walletSign is the test wallet: it checks that the typed data is an EIP-3009
// TransferWithAuthorization from the wallet's account under the token's domain, or a
// Permit2 PermitWitnessTransferFrom under Permit2's, and signs
// its EIP-712 digest as eth_signTypedData_v4 does (v in {27, 28}).
func walletSign(body io.Reader, account, token common.Address, sign func([]byte) ([]byte, error)) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, 64<<10))
	if err != nil {
		return nil, err
	}
	var td apitypes.TypedData
	if err := json.Unmarshal(raw, &td); err != nil {
		return nil, fmt.Errorf("typed data: %w", err)
	}
	// An EIP-3009 authorization names its payer and is verified by the token; a Permit2
	// transfer is verified by Permit2, which recovers the payer.
	verifier := token
	switch td.PrimaryType {
	case "TransferWithAuthorization":
		from, _ := td.Message["from"].(string)
		if !common.IsHexAddress(from) || common.HexToAddress(from) != account {
			return nil, fmt.Errorf("from %q", from)
		}
	case "PermitWitnessTransferFrom":
		verifier = x402.Permit2Address
	default:
		return nil, fmt.Errorf("primary type %q", td.PrimaryType)
	}
	if !common.IsHexAddress(td.Domain.VerifyingContract) || common.HexToAddress(td.Domain.VerifyingContract) != verifier {
		return nil, fmt.Errorf("verifying contract %q", td.Domain.VerifyingContract)
	}
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		return nil, fmt.Errorf("hash typed data: %w", err)
	}
	sig, err := sign(digest)
	if err != nil {
		return nil, err
	}
	if len(sig) != 65 {
		return nil, errors.New("signature length")
	}
	sig[64] += 27
	return sig, nil
}

// walletRPCHandler is the test wallet's way to the chain: eth_call,
// eth_getTransactionReceipt, and eth_sendTransaction from payer, one of anvil's unlocked
// development accounts, which anvil signs. Any other method is refused.
func walletRPCHandler(chain *testenv.Chain, payer common.Address) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var call struct {
			Method string            `json:"method"`
			Params []json.RawMessage `json:"params"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&call); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch call.Method {
		case "eth_call", "eth_getTransactionReceipt":
		case "eth_sendTransaction":
			var tx struct {
				From common.Address `json:"from"`
			}
			if len(call.Params) != 1 || json.Unmarshal(call.Params[0], &tx) != nil || tx.From != payer {
				http.Error(w, "a transaction from another account", http.StatusBadRequest)
				return
			}
		default:
			http.Error(w, "unsupported method "+call.Method, http.StatusBadRequest)
			return
		}
		args := make([]any, len(call.Params))
		for i, p := range call.Params {
			args[i] = p
		}
		var out json.RawMessage
		if err := chain.Client.Client().CallContext(r.Context(), &out, call.Method, args...); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = w.Write(out)
	}
}
