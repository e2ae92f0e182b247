package verdictserver

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver/engine"
)

// TestConfigDurationsReadNumbersAndStrings: a duration of the JSON config is a number of
// nanoseconds (what caddy adapt writes) or a duration string (what a hand-written Caddy
// JSON config may hold), and anything else is refused.
func TestConfigDurationsReadNumbersAndStrings(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       time.Duration
		wantErr    bool
	}{
		{"nanoseconds", `{"sanctions_ttl":43200000000000}`, 12 * time.Hour, false},
		{"a duration string", `{"sanctions_ttl":"12h"}`, 12 * time.Hour, false},
		{"a word", `{"sanctions_ttl":"soon"}`, 0, true},
		{"a fraction of a nanosecond", `{"sanctions_ttl":1.5}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			err := json.Unmarshal([]byte(tc.json), &c)
			if (err != nil) != tc.wantErr || time.Duration(c.SanctionsTTL) != tc.want {
				t.Fatalf("sanctions_ttl = %v, err = %v; want %v, error %v", time.Duration(c.SanctionsTTL), err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestConfigValidateNamesTheOption: each rule of Config.Validate fails with a ConfigError
// that names the option as the Caddyfile spells it, and the index of a repeated one.
func TestConfigValidateNamesTheOption(t *testing.T) {
	const asset = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	for _, tc := range []struct {
		name   string
		cfg    Config
		option string
		index  int
	}{
		{"negative workers", Config{Workers: -1}, "workers", 0},
		{"a rate without a burst", Config{RateIP: &RateConfig{Rate: 1}}, "rate_limit", 0},
		{"an infinite rate (from Go: JSON and the Caddyfile carry none)", Config{RateKey: &RateConfig{Rate: math.Inf(1), Burst: 1}}, "rate_limit", 0},
		{"a price of no address", Config{Prices: []PriceConfig{{ChainID: 1, Asset: "0x12", USD: "1"}}}, "price", 0},
		{"a fee with flat and bps", Config{Fee: &FeeConfig{Network: "base", PayTo: asset, Flat: "1", BPS: 5}}, "fee", 0},
		{"a second rpc of a chain", Config{RPC: []RPCConfig{{ChainID: 1, URL: "{env.A}"}, {ChainID: 1, URL: "{env.B}"}}}, "rpc", 2},
		{"a feed without rpc", Config{PriceFeeds: []PriceFeedConfig{{ChainID: 1, Asset: asset, Feed: asset}}}, "price_feed", 1},
		{"a postgres store without dsn", Config{Store: &sqldb.Config{Type: "postgres"}}, "store", 0},
		{"a negative sanctions ttl", Config{Config: engine.Config{SanctionsTTL: -1}}, "sanctions", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ce, ok := errors.AsType[*ConfigError](tc.cfg.Validate())
			if !ok || ce.Option != tc.option || ce.Index != tc.index {
				t.Fatalf("Validate() = %v; want a ConfigError of %s #%d", tc.cfg.Validate(), tc.option, tc.index)
			}
		})
	}
	if err := (&Config{Prices: []PriceConfig{{ChainID: 1, Asset: asset, USD: "1"}}}).Validate(); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
}

// TestNewRefusesAShortAdminKey: the admin key, expanded, has at least MinAdminKeyLen
// characters; a shorter one fails New with a ConfigError of admin_key that does not quote it.
func TestNewRefusesAShortAdminKey(t *testing.T) {
	st := sqliteStore(t)
	t.Cleanup(func() { _ = st.Close() })
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	deps := Deps{Store: st, Engine: eng}
	short := strings.Repeat("k", MinAdminKeyLen-1)
	_, err = New(Config{AdminKey: short}, deps)
	if ce, ok := errors.AsType[*ConfigError](err); !ok || ce.Option != "admin_key" || strings.Contains(err.Error(), short) {
		t.Fatalf("New with a %d-character admin key = %v; want a ConfigError of admin_key without the key", len(short), err)
	}
	if _, err := New(Config{AdminKey: short + "k"}, deps); err != nil {
		t.Fatalf("New with a %d-character admin key: %v", MinAdminKeyLen, err)
	}
}
