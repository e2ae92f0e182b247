package pass

import (
	"strings"
	"testing"
	"time"
)

// testPassKey is the pass key of these tests: 32 bytes and more, as NewIssuer requires.
const testPassKey = "test-pass-key-0123456789abcdef-0123456789"

// TestDescribe: what the paywall says a payment buys.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		d     time.Duration
		scope string
		url   string
		want  string
	}{
		{24 * time.Hour, "/premium/", "http://h/premium/a", "24 hours of /premium/"},
		{time.Hour, "", "http://h/docs/guide/x.html", "1 hour of /docs/guide/"},
		{30 * time.Minute, "", "http://h/x.html", "30 minutes of /"},
		{7 * 24 * time.Hour, "/", "http://h/", "7 days of /"},
		{90 * time.Second, "/a/", "http://h/a/", "90 seconds of /a/"},
	} {
		p, err := NewIssuer(Config{Duration: tc.d, Scope: tc.scope, Keys: []string{testPassKey}})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := SiteOf(tc.url)
		if got := p.Describe(s.Path); got != tc.want {
			t.Errorf("%s %q %s: %q, want %q", tc.d, tc.scope, tc.url, got, tc.want)
		}
	}
}

// TestMemoryBookFull: a full in-process book refuses a new pass rather than forget a
// live one, and makes room from expired ones.
func TestMemoryBookFull(t *testing.T) {
	b := NewMemoryBook(1)
	now := time.Now()
	if err := b.RecordPass(t.Context(), "pass:a", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordPass(t.Context(), "pass:b", now.Add(time.Hour)); err == nil {
		t.Error("a full book took a second live pass")
	}
	b.now = func() time.Time { return now.Add(2 * time.Hour) }
	if err := b.RecordPass(t.Context(), "pass:b", now.Add(3*time.Hour)); err != nil {
		t.Errorf("the expired pass made no room: %v", err)
	}
}

// FuzzPassCheck: any pass value is checked without a panic, and one that is accepted is
// exactly the token the issuer signs for its claims: nothing else carries a valid MAC.
func FuzzPassCheck(f *testing.F) {
	p, err := NewIssuer(Config{Duration: time.Hour, Scope: "/premium/", Keys: []string{testPassKey}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	valid, err := p.Sign(Claims{Host: "shop.example", Scope: "/premium/", Expiry: now.Add(time.Hour).Unix(),
		Payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", Network: "eip155:84532", Tx: "0x" + strings.Repeat("ab", 32)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add("p1." + KeyID([]byte(testPassKey)) + ".e30.AAAA")
	f.Add("p1...")
	f.Fuzz(func(t *testing.T, token string) {
		c, refused := p.Check(token, "shop.example", "/premium/a.html", now)
		if c == nil {
			if refused == "" {
				t.Fatal("refused without a reason")
			}
			return
		}
		again, err := p.Sign(*c)
		if err != nil || again != token {
			t.Fatalf("accepted %q, which is not the issuer's token for its claims", token)
		}
	})
}
