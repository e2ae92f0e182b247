package gate

import (
	"fmt"
	"html/template"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
)

// The site behind the pass: two pages that share a stylesheet and an image.
const (
	siteIndex = `<!doctype html><html><head><meta charset="utf-8"><title>Premium</title>
<link rel="stylesheet" href="/premium/style.css"></head>
<body><h1 id="content">Premium article</h1><img id="logo" src="/premium/logo.png" alt="logo" width="320" height="240">
<p><a id="next" href="/premium/second.html">Second page</a></p></body></html>`
	siteSecond = `<!doctype html><html><head><meta charset="utf-8"><title>Second</title>
<link rel="stylesheet" href="/premium/style.css"></head>
<body><h1 id="second">Second premium page</h1></body></html>`
	siteStyle = `body{margin:0;background:rgb(250, 240, 200)}h1{color:rgb(10, 120, 60);font:32px sans-serif;margin:16px}`
)

// siteLogo is the image: solid rgb(200, 30, 30), which the screenshot must show.
var siteLogoColour = color.RGBA{200, 30, 30, 255}

// writeSite writes the site into a directory and returns it.
func writeSite(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "premium")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for y := 0; y < 240; y++ {
		for x := 0; x < 320; x++ {
			img.Set(x, y, siteLogoColour)
		}
	}
	f, err := os.Create(filepath.Join(dir, "logo.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for name, body := range map[string]string{"index.html": siteIndex, "second.html": siteSecond, "style.css": siteStyle} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// passWrapper drives the paywall in a popup, since it refuses every frame: it gives the
// page an EIP-1193 wallet and clicks pay; the page pays and reloads itself; the wrapper
// then checks the real page (its stylesheet applied, its image loaded), opens the second
// page and reloads it.
var passWrapper = template.Must(template.New("pass").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="verdict"></output>
<script>
{{.Popup}}
var payer = {{.Payer}}, chainIdHex = {{.ChainID}}, button = {{.Button}}, calls = [], steps = [];
var provider = {
  request: async function (args) {
    calls.push(args.method);
    switch (args.method) {
    case "eth_requestAccounts": case "eth_accounts": return [payer];
    case "eth_chainId": return chainIdHex;
    case "eth_signTypedData_v4":
      var r = await fetch("/wallet/sign", { method: "POST", body: args.params[1] });
      var text = (await r.text()).trim();
      if (!r.ok) throw new Error("wallet: " + text);
      return text;
    case "personal_sign":
      if (String(args.params[1]).toLowerCase() !== payer) throw new Error("asked to sign for " + args.params[1]);
      var m = await fetch("/wallet/sign-message", { method: "POST", body: args.params[0] });
      var mt = (await m.text()).trim();
      if (!m.ok) throw new Error("wallet: " + mt);
      return mt;
    }
    throw new Error("unsupported method " + args.method);
  }
};
var w;
function done(v) { document.getElementById("verdict").setAttribute("data-verdict", v + " | steps=" + steps.join(",") + " calls=" + calls.join(",")); }
function waitFor(test, what, next) {
  var tries = 0;
  (function poll() {
    var doc = w.document, err;
    try { err = doc && doc.readyState === "complete" ? test(doc) : "loading"; } catch (e) { err = String(e); }
    if (err === "") { steps.push(what); return next(doc); }
    var st = doc && doc.getElementById("status");
    if (st && st.className === "err") return done("FAIL " + what + ": " + st.textContent);
    if (++tries > 300) return done("FAIL " + what + ": " + err);
    setTimeout(poll, 100);
  })();
}
function styled(doc, id) {
  var el = doc.getElementById(id);
  if (!el) return id + " missing";
  var win = doc.defaultView;
  if (win.getComputedStyle(el).color !== "rgb(10, 120, 60)") return id + " colour " + win.getComputedStyle(el).color;
  if (win.getComputedStyle(doc.body).backgroundColor !== "rgb(250, 240, 200)") return "background " + win.getComputedStyle(doc.body).backgroundColor;
  return "";
}
popup("/premium/index.html", button, function (win, first) {
  w = win;
  if (!first) return done("FAIL the paywall did not load");
  w.ethereum = provider;
  first.getElementById(button).click();
  waitFor(function (doc) {
    var e = styled(doc, "content");
    if (e) return e;
    var img = doc.getElementById("logo");
    if (!img.complete || !(img.naturalWidth > 0)) return "image naturalWidth " + img.naturalWidth;
    return "";
  }, "page", function () {
    if (button !== "pay") return done("PASS");
    w.location.href = "/premium/second.html";
    waitFor(function (doc) { return styled(doc, "second"); }, "second", function (doc) {
      doc.getElementById("second").id = "second-before-reload";
      w.location.reload();
      waitFor(function (doc) { return styled(doc, "second"); }, "reload", function () { done("PASS"); });
    });
  });
});
</script></body></html>`))

// TestPassInChromium: a person pays once in headless Chromium, with a wallet injected into
// the paywall page, for a pass over /premium/. The page then renders with its stylesheet
// (a rule's colour is computed) and its image (naturalWidth > 0); a second page and a
// reload of it are served; a screenshot in the same browser profile shows the page's
// background and image. The chain shows exactly one transfer. Once the pass has expired
// (the gate's clock moved past it), the same browser gets the paywall again. Before that,
// a second browser without the cookie signs in with the wallet from the paywall
// (sign-in-with-x) and gets the page with its stylesheet and image, without paying.
func TestPassInChromium(t *testing.T) {
	env := newTestEnv(t)
	clk := &clock{}
	var mu sync.Mutex
	var refusals []string
	cfg := env.config()
	cfg.Resource.MimeType = "text/html"
	cfg.Pass = PassConfig{Duration: 10 * time.Minute, Scope: "/premium/", Keys: []string{testPassKey}}
	g := env.gate(t, cfg, Options{Now: clk.now, OnResult: func(r *Result) {
		if v := r.Header.Get(HeaderPassRefused); v != "" {
			mu.Lock()
			refusals = append(refusals, v)
			mu.Unlock()
		}
	}})
	served := map[string]*atomic.Int32{}
	for _, p := range []string{"/premium/index.html", "/premium/second.html", "/premium/style.css", "/premium/logo.png"} {
		served[p] = &atomic.Int32{}
	}
	files := http.FileServer(http.Dir(writeSite(t)))
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := served[r.URL.Path]; ok {
			n.Add(1)
		}
		files.ServeHTTP(w, r)
	})
	var signs atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("/premium/", g.Middleware(MiddlewareOptions{})(site))
	mux.HandleFunc("/wallet", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		button := "pay"
		if r.URL.Query().Get("signin") != "" {
			button = "signin"
		}
		_ = passWrapper.Execute(w, map[string]any{
			"Payer": strings.ToLower(env.payer.Address.Hex()), "ChainID": fmt.Sprintf("0x%x", env.chain.ChainID), "Button": button,
			"Popup": template.JS(popupScript),
		})
	})
	mux.HandleFunc("/wallet/sign", func(w http.ResponseWriter, r *http.Request) {
		sig, err := walletSign(r.Body, env.payer.Address, env.token.Address, func(d []byte) ([]byte, error) {
			return crypto.Sign(d, env.payer.Key)
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		signs.Add(1)
		_, _ = io.WriteString(w, hexutil.Encode(sig))
	})
	var messages atomic.Int32
	mux.HandleFunc("/wallet/sign-message", signInHandler(env.payer.Key, &messages))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The paywall says what the payment buys.
	res := getWith(t, srv.URL+"/premium/index.html", "", browserHeader())
	if page := string(readBody(t, res)); res.StatusCode != 402 || !strings.Contains(page, "One payment buys every page under /premium/ for 10 minutes.") {
		t.Errorf("the paywall (%d) does not say what the payment buys:\n%s", res.StatusCode, tail(page, 1500))
	}

	profile := t.TempDir()
	before := env.ledger(t, env.payer.Address)
	dom := runChromiumIn(t, profile, "--virtual-time-budget=60000", "--dump-dom", srv.URL+"/wallet")
	if v := verdictOf(t, dom); !strings.HasPrefix(v, "PASS") {
		t.Fatalf("in Chromium: %s", v)
	}
	if signs.Load() != 1 {
		t.Errorf("%d signatures, want 1", signs.Load())
	}
	for p, min := range map[string]int32{"/premium/index.html": 2, "/premium/second.html": 2, "/premium/style.css": 1, "/premium/logo.png": 1} {
		if n := served[p].Load(); n < min {
			t.Errorf("%s served %d times, want at least %d", p, n, min)
		}
	}
	env.expectMoved(t, env.payer.Address, before, 1)

	// The same profile holds the pass cookie: the page renders without a payment.
	shot := filepath.Join(t.TempDir(), "pass.png")
	runChromiumIn(t, profile, "--virtual-time-budget=10000", "--screenshot="+shot, srv.URL+"/premium/index.html")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(f)
	_ = f.Close()
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b, err := os.ReadFile(shot); err == nil {
		_ = os.WriteFile(filepath.Join(os.TempDir(), "pass-page.png"), b, 0o644) // for people to look at
	}
	background, logo := 0, 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			switch [3]uint32{r >> 8, g >> 8, b >> 8} {
			case [3]uint32{250, 240, 200}:
				background++
			case [3]uint32{200, 30, 30}:
				logo++
			}
		}
	}
	if total := bounds.Dx() * bounds.Dy(); background < total/2 || logo < 320*240*9/10 {
		t.Errorf("the screenshot shows %d background and %d image pixels of %d: the stylesheet or the image did not load", background, logo, total)
	}
	env.expectMoved(t, env.payer.Address, before, 1)

	// Another browser, without the cookie: the wallet signs in (sign-in-with-x) from the
	// paywall and gets its pass back, so the page loads with its stylesheet and image.
	dom = runChromiumIn(t, t.TempDir(), "--virtual-time-budget=30000", "--dump-dom", srv.URL+"/wallet?signin=1")
	if v := verdictOf(t, dom); !strings.HasPrefix(v, "PASS") || !strings.Contains(v, "personal_sign") {
		t.Errorf("signing in in Chromium: %s", v)
	}
	if messages.Load() != 1 || signs.Load() != 1 {
		t.Errorf("%d sign-in messages and %d payment signatures, want 1 and 1", messages.Load(), signs.Load())
	}
	env.expectMoved(t, env.payer.Address, before, 1)

	// Past the pass's expiry the browser still sends the cookie, and gets the paywall.
	clk.advance(10*time.Minute + time.Second)
	dom = runChromiumIn(t, profile, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/premium/second.html")
	if !strings.Contains(string(dom), `id="pay"`) || strings.Contains(string(dom), `id="second"`) {
		t.Errorf("after the pass expired the browser got:\n%s", tail(string(dom), 1500))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) == 0 || refusals[len(refusals)-1] != string(PassExpired) {
		t.Errorf("refusals %v, want the last to be %s", refusals, PassExpired)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}
