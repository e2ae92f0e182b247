package gate

import (
	"html/template"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/internal/testenv"
)

// TestPaywallSaysWhyInPlainWords: in Chromium, a refused payment shows the verdict's own
// reason, a wallet without USDC reads "not enough USDC on base-sepolia", and a sign-in
// without a pass says so; none shows a reason code, and the upstream never runs.
func TestPaywallSaysWhyInPlainWords(t *testing.T) {
	t.Run("a payment the spending policy refuses shows the verdict's reason", func(t *testing.T) {
		env := newTestEnvWith(t, func(c *facilitator.Config) {
			c.VerdictMode, c.VerdictURL = facilitator.VerdictRequired, "http://127.0.0.1:1"
		})
		run, up := payInChromium(t, env, env.config(), walletOn(env, env.payer))
		const want = "SAID The site's spending policy refused this payment: verdict service is not configured"
		if run.Verdict != want || up != 0 {
			t.Errorf("the page says %q (upstream ran %d times), want %q", run.Verdict, up, want)
		}
	})
	t.Run("an empty wallet reads not enough USDC on base-sepolia", func(t *testing.T) {
		env := newTestEnv(t)
		run, up := payInChromium(t, env, env.config(), walletOn(env, testenv.NewAccount(t)))
		const want = "SAID There is not enough USDC on base-sepolia in this wallet to pay 0.01 USDC."
		if run.Verdict != want || up != 0 {
			t.Errorf("the page says %q (upstream ran %d times), want %q", run.Verdict, up, want)
		}
	})
	t.Run("a sign-in of a wallet without a pass says so", func(t *testing.T) {
		env := newTestEnv(t)
		cfg := env.config()
		cfg.Pass = PassConfig{Duration: time.Hour, Scope: "/", Keys: []string{testPassKey}}
		bw := walletOn(env, env.payer)
		bw.button = "signin"
		run, up := payInChromium(t, env, cfg, bw)
		const want = "SAID This wallet holds no live pass for this page. Pay to get one."
		if run.Verdict != want || up != 0 {
			t.Errorf("the page says %q (upstream ran %d times), want %q; wallet calls %q", run.Verdict, up, want, run.Calls)
		}
	})
}

// TestPaywallOffersTheRoutesChain: a wallet on another chain is asked to switch to the
// route's chain; a wallet that does not know it (4902) is asked to add it, with the
// chain's name, public RPC endpoint and native currency, and then the payment goes
// through. A wallet that knows the chain is only switched.
func TestPaywallOffersTheRoutesChain(t *testing.T) {
	env := newTestEnv(t)
	if env.chain.ChainID.Int64() != 84532 {
		t.Fatalf("anvil runs chain %s; this test expects Base Sepolia's id", env.chain.ChainID)
	}
	const route = "0x14a34"
	add := `wallet_addEthereumChain [{"chainId":"0x14a34","chainName":"Base Sepolia",` +
		`"nativeCurrency":{"name":"Ether","symbol":"ETH","decimals":18},"rpcUrls":["https://sepolia.base.org"],` +
		`"blockExplorerUrls":["https://sepolia.basescan.org"]}]`
	switchTo := `wallet_switchEthereumChain [{"chainId":"0x14a34"}]`
	for _, tc := range []struct {
		name  string
		known []string
		want  []string
	}{
		{"a wallet that does not know the chain adds it", []string{"0x1"},
			[]string{"eth_requestAccounts", "eth_chainId", switchTo, add, "eth_chainId", "eth_signTypedData_v4"}},
		{"a wallet that knows the chain switches to it", []string{"0x1", route},
			[]string{"eth_requestAccounts", "eth_chainId", switchTo, "eth_signTypedData_v4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.ledger(t, env.payer.Address)
			run, up := payInChromium(t, env, env.config(), browserWallet{payer: env.payer, start: "0x1", known: tc.known, button: "pay"})
			if run.Verdict != paidPage || up != 1 {
				t.Fatalf("the page says %q (upstream ran %d times); wallet calls %q", run.Verdict, up, run.Calls)
			}
			if strings.Join(run.Calls, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("wallet calls:\n%s\nwant:\n%s", strings.Join(run.Calls, "\n"), strings.Join(tc.want, "\n"))
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}

// TestPaywallSaysWhatAPassBuys: in Chromium, the paywall of a pass over / reads "this
// whole site for 1 hour", and one over /premium/ "every page under /premium/ for 24 hours",
// visible on the page. The page of the first is kept as a screenshot in the test's output.
func TestPaywallSaysWhatAPassBuys(t *testing.T) {
	env := newTestEnv(t)
	for _, tc := range []struct {
		scope    string
		duration time.Duration
		want     string
	}{
		{"/", time.Hour, "One payment buys this whole site for 1 hour."},
		{"/premium/", 24 * time.Hour, "One payment buys every page under /premium/ for 24 hours."},
	} {
		cfg := env.config()
		cfg.Pass = PassConfig{Duration: tc.duration, Scope: tc.scope, Keys: []string{testPassKey}}
		mux := http.NewServeMux()
		mux.Handle("/premium/", env.gate(t, cfg, Options{}).Middleware(MiddlewareOptions{})(&upstream{}))
		mux.HandleFunc("/check", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = checkWrapper.Execute(w, map[string]any{
				"Src": "/premium/a.html", "Checks": [][2]string{{"pass", tc.want}},
				"Check": template.JS(checkScript), "Popup": template.JS(popupScript),
			})
		})
		srv := httptest.NewServer(mux)
		dom := runChromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/check")
		if v := verdictOf(t, dom); v != "PASS" {
			t.Errorf("scope %s: %s", tc.scope, v)
		}
		if tc.scope == "/" {
			screenshot(t, srv.URL+"/premium/a.html")
		}
		srv.Close()
	}
}

// screenshot takes a 1280x900 screenshot of url into the test's temporary directory and
// logs where it is.
func screenshot(t *testing.T, url string) string {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "screenshot.png")
	runChromium(t, "--virtual-time-budget=10000", "--screenshot="+shot, url)
	t.Logf("screenshot of %s: %s", url, shot)
	return shot
}

// lockWrapper opens the paywall at a path that holds markup and reports: the page's own
// script ran (pay without a wallet says so) and its own style applied (the button's
// colour), the path's markup stayed text (no img element), and an inline script that the
// opener inserts into the page does not run, with a CSP violation event to show why.
var lockWrapper = template.Must(template.New("lock").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="verdict"></output>
<script>
{{.Popup}}
popup({{.Src}}, "pay", function (w, doc) {
  var out = [];
  if (!doc) return report(["the paywall did not load"]);
  var violations = [];
  doc.addEventListener("securitypolicyviolation", function (e) { violations.push(e.effectiveDirective); });
  doc.getElementById("pay").click();
  var s = doc.createElement("script");
  s.textContent = "window.injected = 'ran';";
  doc.body.appendChild(s);
  setTimeout(function () {
    out.push("status=" + doc.getElementById("status").textContent);
    out.push("button=" + w.getComputedStyle(doc.getElementById("pay")).backgroundColor);
    out.push("img=" + doc.getElementsByTagName("img").length);
    out.push("injected=" + (w.injected || "no"));
    out.push("violations=" + violations.join(","));
    report(out);
  }, 500);
});
function report(out) { document.getElementById("verdict").setAttribute("data-verdict", out.join("\n")); }
</script></body></html>`))

// TestPaywallCSPInChromium: the paywall at a path that holds markup
// (/<img src=x onerror=…>) runs its own script and style under its CSP, shows the path
// as text, and an inline script inserted into it does not run: the browser reports a
// script-src-elem violation instead.
func TestPaywallCSPInChromium(t *testing.T) {
	env := newTestEnv(t)
	mux := http.NewServeMux()
	mux.Handle("/", env.gate(t, env.config(), Options{}).Middleware(MiddlewareOptions{})(&upstream{}))
	const path = `/<img src=x onerror="document.title='pwned'">`
	mux.HandleFunc("/lock", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = lockWrapper.Execute(w, map[string]any{"Src": path, "Popup": template.JS(popupScript)})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got := verdictOf(t, runChromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/lock"))
	want := strings.Join([]string{
		"status=No browser wallet found. Install one (an EIP-1193 wallet such as MetaMask), or pay with an x402 client.",
		"button=rgb(22, 82, 240)", "img=0", "injected=no", "violations=script-src-elem",
	}, "\n")
	if got != want {
		t.Errorf("in Chromium:\n%s\nwant:\n%s", got, want)
	}
}

var framer = template.Must(template.New("framer").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><style>html,body{margin:0;background:#fff}iframe{border:0;width:1280px;height:900px;display:block}</style></head>
<body><iframe src="{{.Src}}"></iframe></body></html>`))

// TestPaywallRefusesFramesInChromium: a page of another origin frames the paywall. The
// browser fetches it but shows none of it: the screenshot of the framing page holds no
// pixel of the paywall's button colour, while the same paywall opened on its own shows
// a button's worth of them. Both screenshots stay in the test's output.
func TestPaywallRefusesFramesInChromium(t *testing.T) {
	env := newTestEnv(t)
	var asked atomic.Int32
	g := env.gate(t, env.config(), Options{}).Middleware(MiddlewareOptions{})(&upstream{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/article" {
			asked.Add(1)
		}
		g.ServeHTTP(w, r)
	}))
	defer site.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = framer.Execute(w, map[string]any{"Src": site.URL + "/article"})
	}))
	defer other.Close()
	if !strings.HasPrefix(other.URL, "http://127.0.0.1:") || other.URL == site.URL {
		t.Fatalf("the framing page %s is not of another origin than %s", other.URL, site.URL)
	}
	alone := accentPixels(t, screenshot(t, site.URL+"/article"))
	framed := accentPixels(t, screenshot(t, other.URL+"/"))
	if alone < 2000 {
		t.Fatalf("the paywall on its own shows %d pixels of its button colour; the check sees nothing", alone)
	}
	if framed != 0 || asked.Load() != 2 {
		t.Errorf("framed by another origin, the paywall shows %d pixels of its button colour (asked %d times), want 0 (asked twice)", framed, asked.Load())
	}
}

// accentPixels counts the pixels of the paywall's button colour (#1652f0) in a PNG.
func accentPixels(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n, b := 0, img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == 0x16 && g>>8 == 0x52 && bl>>8 == 0xf0 {
				n++
			}
		}
	}
	return n
}
