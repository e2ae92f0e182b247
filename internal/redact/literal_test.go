package redact

import "testing"

func TestIsPlaceholder(t *testing.T) {
	for s, want := range map[string]bool{
		"{env.SIGNER_KEY}":            true,
		"{file./run/secrets/key}":     true,
		" {env.K} ":                   true,
		"{env.UNSET}deadbeefdeadbeef": false,
		"deadbeef{env.K}":             false,
		"{env.A}{env.B}":              false,
		"0xdeadbeef":                  false,
		"{http.request.header.X-Key}": false,
		"":                            false,
	} {
		if got := IsPlaceholder(s); got != want {
			t.Errorf("IsPlaceholder(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestLiteralCredential(t *testing.T) {
	for _, tc := range []struct {
		s      string
		secret bool
	}{
		{"https://base-sepolia.g.alchemy.com/v2/{env.ALCHEMY_KEY}", false},
		{"http://127.0.0.1:8545", false},
		{"https://mainnet.base.org", false},
		{"https://base-sepolia.g.alchemy.com/v2/a1B2c3D4e5F6g7H8i9J0", true},
		{"https://rpc.example/?apikey=abc", true},
		{"https://rpc.example/?apikey={env.RPC_KEY}", false},
		{"https://user:hunter2@rpc.example/", true},
		{"redis://127.0.0.1:6379/0", false},
		{"redis://:hunter2@127.0.0.1:6379/0", true},
		{"redis://:{env.REDIS_PASSWORD}@127.0.0.1:6379/0", false},
		{"postgres://x402:s3cret@db.example/x402?sslmode=require", true},
		{"postgres://x402:{file./run/secrets/pg}@db.example/x402?sslmode=require", false},
		{"postgres://x402@db.example/x402?sslmode=disable", false},
		{"host=db.example user=x402 password=s3cret dbname=x402", true},
		{"host=db.example user=x402 password={env.PG_PASSWORD} dbname=x402", false},
		{"{env.REDIS_URL}", false},
	} {
		if got := LiteralCredential(tc.s); (got != "") != tc.secret {
			t.Errorf("LiteralCredential(%q) = %q, want a credential: %v", tc.s, got, tc.secret)
		}
	}
}
