package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
)

// hostile is text an agent or an author controls, which must show as text.
const hostile = `<script>alert("x")</script>"><img src=x onerror=alert(1)>`

// windowPolicy is allowPolicy with a daily spend window of 5 USD.
var windowPolicy = strings.Replace(allowPolicy, `"venues"`, `"spendWindows": {"windows": [{"period": "day", "capUsd": 5}]}, "venues"`, 1)

// TestEverythingShownIsEscaped: a prompt, a metadata value and a policy description that
// hold HTML reach every page that shows them as text, never as markup.
func TestEverythingShownIsEscaped(t *testing.T) {
	e := newEnv(t, Config{}, false)
	doc := strings.Replace(allowPolicy, `pay one allowed payee <b>bold</b>`, strings.ReplaceAll(hostile, `"`, `\"`), 1)
	a := e.agent("agent", doc)
	hash := e.pay(a, otherPay, hostile, map[string]any{"note": hostile})
	b := e.browser()
	b.signIn(adminKey)
	for _, path := range []string{"/console/verdicts/" + hash, "/console/policies?agent=" + a.ID, "/console/policies/edit?agent=" + a.ID} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d", path, p.status)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", `"><img`} {
			if strings.Contains(p.body, raw) {
				t.Errorf("%s holds %q unescaped", path, raw)
			}
		}
		if !strings.Contains(p.body, "&lt;script&gt;alert(") || !strings.Contains(p.body, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s does not show the text escaped:\n%s", path, p.body)
		}
		if n := len(regexp.MustCompile(`(?i)<script`).FindAllString(p.body, -1)); n != 0 {
			t.Errorf("%s has %d script elements", path, n)
		}
	}
}

// TestAgentsPage: each agent's wallets, keys (ids, scopes, created, last use, never the
// secret) and windows (used, reserved, left) show.
func TestAgentsPage(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("weather-bot", windowPolicy)
	idle := e.agent("idle-bot", "")
	e.pay(a, allowedPay, "pay for the weather", nil)
	// Close waits for the write of the key's use, which follows the answer; the console
	// reads it from the store.
	_ = e.srv.Close()
	b := e.browser()
	b.signIn(adminKey)
	p := b.get("/console/")
	got := text(p.body)
	for _, want := range []string{"weather-bot", a.Wallet.Hex(), keyIDOf(t, e, a.ID), "verdicts:create:own verdicts:read:own",
		"day", "every action", "5.00", "0.010000", "4.990000", "idle-bot", "No policy: every action is refused.", "never"} {
		if !strings.Contains(got, want) {
			t.Errorf("the agents page does not show %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "never"); n != 1 {
		t.Errorf("%d keys never used, want 1 (idle-bot's): the key that paid shows no last use", n)
	}
	for _, secret := range []string{a.Key, idle.Key} {
		if strings.Contains(p.body, secret) {
			t.Error("the agents page shows a key's secret")
		}
	}
}

// TestVerdictsPage: actions are listed newest first and filtered by agent, outcome,
// reason code and time; one verdict shows its checks, observations, suggestions, policy
// version and mode; a filter that does not parse is a 400 beside its field.
func TestVerdictsPage(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("alpha", allowPolicy)
	z := e.agent("zulu", allowPolicy)
	ok := e.pay(a, allowedPay, "first: allowed", nil)
	refused := e.pay(a, otherPay, "second: a stranger", nil)
	other := e.pay(z, allowedPay, "third: another agent", nil)
	b := e.browser()
	b.signIn(adminKey)

	all := b.get("/console/verdicts")
	if i, j, k := strings.Index(all.body, other), strings.Index(all.body, refused), strings.Index(all.body, ok); !(i >= 0 && i < j && j < k) {
		t.Errorf("not newest first: %d %d %d", i, j, k)
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	for _, tc := range []struct {
		query    string
		want     []string
		excluded []string
	}{
		{"outcome=rejected", []string{refused}, []string{ok, other}},
		{"outcome=approved&agent=" + a.ID, []string{ok}, []string{refused, other}},
		{"reason=recipient_not_allowed", []string{refused}, []string{ok, other}},
		{"agent=" + z.ID, []string{other}, []string{ok, refused}},
		{"since=" + url.QueryEscape(future), nil, []string{ok, refused, other}},
		{"until=" + url.QueryEscape(future) + "&since=2020-01-01", []string{ok, refused, other}, nil},
	} {
		p := b.get("/console/verdicts?" + tc.query)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d", tc.query, p.status)
		}
		for _, h := range tc.want {
			if !strings.Contains(p.body, h) {
				t.Errorf("%s: %s missing", tc.query, h)
			}
		}
		for _, h := range tc.excluded {
			if strings.Contains(p.body, h) {
				t.Errorf("%s: %s shown", tc.query, h)
			}
		}
	}
	if p := b.get("/console/verdicts?since=yesterday&outcome=maybe"); p.status != http.StatusBadRequest ||
		!strings.Contains(text(p.body), "must be a date") || !strings.Contains(text(p.body), "must be approved, rejected or pending") {
		t.Errorf("a bad filter: %d\n%s", p.status, text(p.body))
	}

	got := text(b.get("/console/verdicts/" + refused).body)
	for _, want := range []string{"rejected", "recipient_not_allowed", "recipients.allowed", "second: a stranger",
		"use one of recipients.allowed: " + allowedPay.Hex(), otherPay.Hex(), "Policy version 1", "Mode enforce",
		"Not signed", "passed", "venue"} {
		if !strings.Contains(got, want) {
			t.Errorf("the verdict page does not show %q:\n%s", want, got)
		}
	}
	if p := b.get("/console/verdicts/0x" + strings.Repeat("0", 64)); p.status != http.StatusNotFound {
		t.Errorf("an unknown verdict: %d", p.status)
	}
}

// TestPolicyEditing: the edit form shows each schema problem beside the section it is in
// and stores nothing; a valid form stores a new version by the session's key; the diff of
// two versions shows what changed.
func TestPolicyEditing(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("agent", allowPolicy)
	b := e.browser()
	b.signIn(adminKey)
	form := b.get("/console/policies/edit?agent=" + a.ID)
	if !strings.Contains(form.body, `name="section.recipients"`) || !strings.Contains(form.body, allowedPay.Hex()) {
		t.Fatalf("the form does not start from the active version:\n%s", form.body)
	}
	send := func(sections map[string]string) page {
		v := url.Values{"csrf": {form.csrf(t)}, "agent": {a.ID}}
		for k, s := range sections {
			v.Set("section."+k, s)
		}
		return b.post("/console/policies/edit", v)
	}
	p := send(map[string]string{"venues": `{"allowed": ["payment"]}`, "limits": `{"perTxUsd": -1}`, "perps": `{"maxLeverage": "high"}`, "chains": `[84532`})
	if p.status != http.StatusUnprocessableEntity {
		t.Fatalf("an invalid document: %d\n%s", p.status, p.body)
	}
	for section, want := range map[string]string{"chains": "chains: is not a json value"} {
		if got := sectionText(t, p.body, section); !strings.Contains(got, want) {
			t.Errorf("section %s shows %q, want %q", section, got, want)
		}
	}
	p = send(map[string]string{"venues": `{"allowed": ["payment"]}`, "limits": `{"perTxUsd": -1}`, "perps": `{"maxLeverage": "high"}`})
	if p.status != http.StatusUnprocessableEntity {
		t.Fatalf("an invalid document: %d\n%s", p.status, p.body)
	}
	for _, section := range []string{"limits", "perps"} {
		if got := sectionText(t, p.body, section); !strings.Contains(got, section+".") {
			t.Errorf("section %s shows no problem of its own: %q", section, got)
		}
	}
	if got := sectionText(t, p.body, "venues"); strings.Contains(got, "must") {
		t.Errorf("the valid section venues shows a problem: %q", got)
	}
	if n := versions(t, e, a.ID); n != 1 {
		t.Fatalf("%d versions after refused forms, want 1", n)
	}
	p = send(map[string]string{"venues": `{"allowed": ["payment"]}`, "chains": `{"allowed": [84532, 8453]}`})
	if p.status != http.StatusSeeOther || !strings.Contains(p.header.Get("Location"), "version=2") {
		t.Fatalf("a valid document: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
	pv, err := e.op.Policy(context.Background(), a.ID, 2)
	if err != nil || pv.Actor != "console: admin key" {
		t.Fatalf("version 2: %+v %v", pv, err)
	}
	diff := b.get(fmt.Sprintf("/console/policies/diff?agent=%s&a=1&b=2", a.ID))
	for _, want := range []string{`class="add">&#43;       8453</span>`, `class="del">-   &#34;recipients&#34;: {`, `class="same">    &#34;venues&#34;: {`} {
		if !strings.Contains(diff.body, want) {
			t.Errorf("the diff does not hold %q:\n%s", want, diff.body)
		}
	}
}

// sectionText is the text of the edit form's section name.
func sectionText(t *testing.T, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<div class="section[^"]*" id="section-` + name + `">(.*?)</div>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no section %s on the page", name)
	}
	return text(m[1])
}

// TestPaymentsPage: the settlements show with their states and explorer links, and the
// revenue per route and per day is an SVG chart drawn on the server.
func TestPaymentsPage(t *testing.T) {
	e := newEnv(t, Config{Explorer: "https://sepolia.basescan.org/tx/{tx}?n={network}"}, false)
	day1 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	settled := e.settle(1, allowedPay, 10_000, day1, journal.StateConfirmed)
	e.settle(2, allowedPay, 20_000, day2, journal.StateConfirmed)
	e.settle(3, otherPay, 5_000_000, day2, journal.StateConfirmed)
	e.settle(4, otherPay, 7_000, day2, journal.StateFailed)
	e.settle(5, otherPay, 9_000, day2, journal.StateBroadcast)
	b := e.browser()
	b.signIn(adminKey)
	p := b.get("/console/payments")
	if p.status != http.StatusOK {
		t.Fatalf("payments: %d\n%s", p.status, p.body)
	}
	got := text(p.body)
	for _, want := range []string{"settled", "failed", "pending", "5", "0.02", "0.01", "11-25", "11-26",
		allowedPay.Hex() + " on base-sepolia: 0.03", otherPay.Hex() + " on base-sepolia: 5"} {
		if !strings.Contains(got, want) {
			t.Errorf("the payments page does not show %q:\n%s", want, got)
		}
	}
	link := `href="https://sepolia.basescan.org/tx/` + settled.TxHash.Hex() + `?n=base-sepolia"`
	if !strings.Contains(p.body, link) {
		t.Errorf("no explorer link %s", link)
	}
	if n := strings.Count(p.body, `<rect class="seg"`); n != 3 {
		t.Errorf("%d bar segments, want 3 (one route on day 1, two on day 2)", n)
	}
	if !strings.Contains(p.body, `<svg id="revenue"`) || !strings.Contains(p.body, `font-size="11">5.02</text>`) {
		t.Error("no revenue chart, or its axis does not top at day 2's settled 5.02 (failed and pending rows count for nothing)")
	}

	bare := newEnv(t, Config{}, false)
	bare.console.Config.Handler.(*Console).journal = nil
	bb := bare.browser()
	bb.signIn(adminKey)
	if p := bb.get("/console/payments"); p.status != http.StatusNotFound || strings.Contains(bb.get("/console/").body, "/console/payments") {
		t.Errorf("without a journal: %d, and the nav links the page", p.status)
	}
}

// TestReconciledIsABumpedReplacement: a settlement whose fee-bumped replacement settled
// shows as reconciled, with the replacement's hash.
func TestReconciledIsABumpedReplacement(t *testing.T) {
	e := newEnv(t, Config{}, false)
	s := e.settle(1, allowedPay, 10_000, time.Now(), journal.StateBroadcast)
	bump := journal.Attempt{Seq: 1, TxHash: s.TxHash, RawTx: []byte{2}}
	bump.TxHash[0] = 0xee
	ctx := context.Background()
	if err := e.journal.AddAttempt(ctx, s.AuthorizationKey, bump); err != nil {
		t.Fatal(err)
	}
	if err := e.journal.UpdateSettled(ctx, s.AuthorizationKey, journal.StateConfirmed, "", bump.TxHash); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(adminKey)
	got := text(b.get("/console/payments").body)
	if !strings.Contains(got, "reconciled") || !strings.Contains(got, shortHash(bump.TxHash.Hex())) {
		t.Errorf("the bumped settlement:\n%s", got)
	}
}
