package console

import (
	"encoding/json"
	"html"
	"html/template"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
)

// driver is a same-origin page that drives the console in a popup, as a person would:
// it signs in, opens a verdict, edits a policy into an error, opens the payments and
// replays a draft, and
// writes what each page showed into its own DOM as JSON. The console refuses every
// frame, hence the popup; the console's CSP binds the console's documents, not this one.
var driver = template.Must(template.New("driver").Parse(`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body><output id="out" data-key="{{.Key}}"></output>
<script>
var key = document.getElementById("out").dataset.key, out = {};
var w = window.open("/console/signin", "console", "popup,width=1280,height=900");
function finish() { document.getElementById("out").setAttribute("data-out", JSON.stringify(out)); }
function main(d) { return d.querySelector("main").innerText; }
function go(url) { w.location.href = url; }
// wait calls then(doc) once the popup holds a document it has not handled that is
// complete and passes cond.
function wait(what, cond, then) {
  var tries = 0;
  (function poll() {
    var d = null;
    try { d = w.document; } catch (e) { /* navigating */ }
    if (d && d.readyState === "complete" && !d.documentElement.hasAttribute("data-seen") && cond(d)) {
      d.documentElement.setAttribute("data-seen", "1");
      try { return then(d); } catch (e) { out.error = what + ": " + e; return finish(); }
    }
    if (++tries > 600) {
      out.error = "timed out waiting for " + what + "; the popup shows " + (d ? w.location.href + ": " + d.documentElement.innerText : "nothing");
      return finish();
    }
    setTimeout(poll, 50);
  })();
}
wait("the sign-in form", d => d.getElementById("key"), function (d) {
  d.getElementById("key").value = key;
  d.getElementById("signin").click();
  wait("the agents page", d => d.getElementById("who"), function (d) {
    out.agents = main(d);
    out.who = d.getElementById("who").innerText;
    go({{.Verdict}});
    wait("the verdict", d => d.getElementById("checks"), function (d) {
      out.verdict = main(d);
      out.prompt = d.getElementById("prompt").textContent;
      out.elements = d.querySelectorAll("script, img, [onerror]").length;
      go({{.Edit}});
      wait("the edit form", d => d.getElementById("save"), function (d) {
        d.getElementById("s-limits").value = '{"perTxUsd": -1}';
        d.getElementById("save").click();
        wait("the field error", d => d.querySelector(".field-error"), function (d) {
          out.edit = main(d);
          out.limits = d.getElementById("section-limits").innerText;
          go("/console/payments");
          wait("the payments", d => d.getElementById("settlements"), function (d) {
            out.payments = main(d);
            out.segments = d.querySelectorAll("#revenue rect.seg").length;
            var r = d.getElementById("revenue").getBoundingClientRect();
            out.chart = [r.width, r.height];
            go({{.Replay}});
            wait("the replay form", d => d.getElementById("draft"), function (d) {
              d.getElementById("draft").value = {{.Draft}};
              d.getElementById("last").value = "100";
              d.getElementById("replay").click();
              wait("the replay report", d => d.getElementById("report"), function (d) {
                out.replay = d.getElementById("report").innerText;
                finish();
              });
            });
          });
        });
      });
    });
  });
});
</script></body></html>`))

// driven is what the driver page read off each console page.
type driven struct {
	Error                          string
	Agents, Who, Verdict, Prompt   string
	Elements                       int
	Edit, Limits, Payments, Replay string
	Segments                       int
	Chart                          []float64
}

// TestConsoleInChromium drives the console in headless Chromium: sign in, read a
// verdict's reasons, edit a policy into a field-level error, see the revenue chart, replay
// a draft and see the newly refused actions; a
// prompt holding <script> and "><img onerror> shows as text in the DOM. Then it takes a
// screenshot of each page, signed in with the same browser profile, into the test's
// output directory (X402GATE_TEST_OUTPUT, else a temporary one).
func TestConsoleInChromium(t *testing.T) {
	e := newEnv(t, Config{Explorer: "https://sepolia.basescan.org/tx/{tx}"}, false)
	a := e.agent("weather-bot", allowPolicy)
	e.pay(a, allowedPay, "pay for the weather report", nil)
	refused := e.pay(a, otherPay, hostile, map[string]any{"note": hostile})
	day := time.Now().UTC().Add(-48 * time.Hour)
	e.settle(1, allowedPay, 10_000, day, journal.StateConfirmed)
	e.settle(2, allowedPay, 30_000, day.Add(24*time.Hour), journal.StateConfirmed)
	e.settle(3, otherPay, 20_000, day.Add(24*time.Hour), journal.StateConfirmed)
	e.settle(4, otherPay, 5_000, day.Add(25*time.Hour), journal.StateFailed)

	mux := http.NewServeMux()
	mux.Handle("/console/", e.console.Config.Handler)
	mux.Handle("/console", e.console.Config.Handler)
	mux.HandleFunc("/driver", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cross-Origin-Opener-Policy", "same-origin") // the console's, so the popup stays reachable
		_ = driver.Execute(w, map[string]string{"Key": adminKey, "Verdict": "/console/verdicts/" + refused,
			"Edit": "/console/policies/edit?agent=" + a.ID, "Replay": "/console/replay?agent=" + a.ID, "Draft": strangerDraft})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	profile := t.TempDir()
	dom := testenv.RunChromium(t, profile, "--virtual-time-budget=60000", "--dump-dom", srv.URL+"/driver")
	m := regexp.MustCompile(`data-out="([^"]*)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the driver wrote nothing; DOM:\n%s", dom)
	}
	var got driven
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &got); err != nil {
		t.Fatal(err)
	}
	if got.Error != "" {
		t.Fatalf("driver: %s\n%+v", got.Error, got)
	}
	checks := []struct{ page, text, want string }{
		{"agents", got.Agents, "weather-bot"},
		{"agents", got.Agents, a.Wallet.Hex()},
		{"agents", got.Who, "admin key · read and write"},
		{"verdict", got.Verdict, "recipient_not_allowed"},
		{"verdict", got.Verdict, "use one of recipients.allowed: " + allowedPay.Hex()},
		{"verdict", got.Verdict, hostile},
		{"edit", got.Limits, "limits.perTxUsd"},
		{"edit", got.Edit, "Edit the policy of " + a.ID},
		{"payments", got.Payments, "Revenue per route and per day"},
		{"payments", got.Payments, "settled"},
		{"payments", got.Payments, "failed"},
		{"replay", got.Replay, "2 actions replayed as version 2 (enforce mode) against active version 1: 1 newly refused, 1 newly approved"},
		{"replay", got.Replay, "pay for the weather report"},
		{"replay", got.Replay, "recipient " + allowedPay.Hex() + " is not in recipients.allowed"},
	}
	for _, c := range checks {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("the %s page does not show %q:\n%s", c.page, c.want, c.text)
		}
	}
	if got.Prompt != hostile || got.Elements != 0 {
		t.Errorf("the prompt in the DOM is %q with %d script, img or onerror elements; want it as text and none", got.Prompt, got.Elements)
	}
	if got.Segments != 3 || len(got.Chart) != 2 || got.Chart[0] < 100 || got.Chart[1] < 100 {
		t.Errorf("the revenue chart: %d segments, box %v; want 3 segments in a visible box", got.Segments, got.Chart)
	}

	out := testenv.OutputDir(t)
	for name, path := range map[string]string{"agents": "/console/", "verdicts": "/console/verdicts",
		"verdict": "/console/verdicts/" + refused, "policies": "/console/policies?agent=" + a.ID,
		"edit": "/console/policies/edit?agent=" + a.ID, "payments": "/console/payments", "replay": "/console/replay?agent=" + a.ID} {
		shot := filepath.Join(out, name+".png")
		testenv.RunChromium(t, profile, "--screenshot="+shot, srv.URL+path)
		checkScreenshot(t, shot)
	}
	t.Logf("screenshots in %s", out)
}

// checkScreenshot fails unless file is a PNG of a page with something on it: not one flat
// colour, and not the sign-in page of a browser that lost its session.
func checkScreenshot(t *testing.T, file string) {
	t.Helper()
	img := testenv.ReadPNG(t, file)
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 8 || b.Dx() < 800 {
		t.Errorf("%s: %d colours in %v: not a rendered page", file, len(colours), b)
	}
}
