package gate

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/x402"
)

// siwxFixture is a SIGN-IN-WITH-X header made by @x402/extensions 2.27's createSIWxPayload
// and encodeSIWxHeader for https://shop.example/premium/a.html, issued 2026-11-23T12:00:00Z,
// signed by anvil's development account 1 (0x70997970C51812dc3A010C7d01b50e0d17dc79C8).
func siwxFixture(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "siwx-x402-extensions-2.27.b64"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// testIssuer issues passes of an hour over /premium/, signed with testPassKey.
func testIssuer(t testing.TB) *pass.Issuer {
	t.Helper()
	p, err := pass.NewIssuer(PassConfig{Duration: time.Hour, Scope: "/premium/", Keys: []string{testPassKey}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// siwxGate is a gate on base-sepolia with passes, its clock at now, for checking proofs.
func siwxGate(t testing.TB, now time.Time) *Gate {
	t.Helper()
	n, ok := x402.NewRegistry().Lookup("base-sepolia")
	if !ok {
		t.Fatal("base-sepolia is not built in")
	}
	route := &routeConfig{}
	route.network = n
	return &Gate{route: route, now: func() time.Time { return now }, pass: testIssuer(t)}
}

// TestSIWXRealClientProof: the proof the npm client made verifies byte for byte against
// the message this gate writes, and no longer once any signed field changes.
func TestSIWXRealClientProof(t *testing.T) {
	g := siwxGate(t, time.Date(2026, 11, 23, 12, 1, 0, 0, time.UTC))
	s, _ := pass.SiteOf("https://shop.example/premium/a.html")
	p, ok := pass.ParseProof(siwxFixture(t))
	if !ok {
		t.Fatal("the fixture does not parse")
	}
	addr, refused := g.checkSIWX(p, s)
	if refused != "" || addr.Hex() != "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" {
		t.Fatalf("checkSIWX = %s, %q", addr.Hex(), refused)
	}
	for name, change := range map[string]func(*pass.Proof){
		"statement": func(p *pass.Proof) { s := *p.Statement + "!"; p.Statement = &s },
		"nonce":     func(p *pass.Proof) { p.Nonce = "5f0c3a9e2b7d4e1fa86b0c2d9e3f4a52" },
		"resources": func(p *pass.Proof) { p.Resources = nil },
		"uri path":  func(p *pass.Proof) { p.URI = "https://shop.example/premium/b.html" },
	} {
		q, _ := pass.ParseProof(siwxFixture(t))
		change(q)
		if _, refused := g.checkSIWX(q, s); refused != SIWXSignature {
			t.Errorf("changed %s: %q, want %s", name, refused, SIWXSignature)
		}
	}
}

// FuzzParseSIWX: any SIGN-IN-WITH-X value is parsed and checked without a panic, and a
// proof that parses has every required field. With encode the data is the JSON and is
// base64-encoded first. Seeds: testdata/fuzz/FuzzParseSIWX and the real-client fixture.
func FuzzParseSIWX(f *testing.F) {
	fixture := siwxFixture(f)
	raw, _ := base64.StdEncoding.DecodeString(fixture)
	f.Add([]byte(fixture), false)
	f.Add(raw, true)
	f.Add([]byte(`{"domain":"a","address":"0x0","uri":"::","version":"1","chainId":"eip155:x","type":"eip191","nonce":"n","issuedAt":"x","signature":"0x"}`), true)
	g := siwxGate(f, time.Date(2026, 11, 23, 12, 1, 0, 0, time.UTC))
	s, _ := pass.SiteOf("https://shop.example/premium/a.html")
	f.Fuzz(func(t *testing.T, data []byte, encode bool) {
		v := string(data)
		if encode {
			v = base64.StdEncoding.EncodeToString(data)
		}
		p, ok := pass.ParseProof(v)
		if !ok {
			return
		}
		if p.Domain == "" || p.Address == "" || p.URI == "" || p.Nonce == "" || p.IssuedAt == "" || p.Signature == "" {
			t.Fatalf("parsed a proof without a required field: %+v", p)
		}
		if addr, refused := g.checkSIWX(p, s); refused == "" && addr.Hex() != "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" {
			t.Fatalf("a proof for %s was accepted", addr.Hex())
		}
	})
}
