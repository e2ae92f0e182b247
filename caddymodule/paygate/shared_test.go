package paygate

import (
	"database/sql"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/internal/testenv"
)

// TestRedisStoreAndPostgresJournal runs the bundled facilitator on a real redis-server and
// PostgreSQL: a settlement is journaled in PostgreSQL, and the retry credit of a paid
// request whose upstream failed lives in Redis, so a facilitator opened afresh (a reload
// that changed its configuration, as a second instance would) still honours it without a
// second charge.
func TestRedisStoreAndPostgresJournal(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	redisURL := testenv.StartRedis(t)
	dsn := testenv.StartPostgres(t)
	isolateCaddy(t)
	t.Setenv("X402_T_RPC", chain.RPCURL)
	t.Setenv("X402_T_SIGNER", hex.EncodeToString(crypto.FromECDSA(chain.FacilitatorAccount().Key)))
	t.Setenv("X402_T_REDIS", redisURL)
	t.Setenv("X402_T_PG", dsn)
	up := &upstream{fail: map[string]int{"/api/flaky": 1}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	merchant := testenv.NewAccount(t).Address
	payer := chain.Accounts[2]
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	config := func(receiptTimeout string) string {
		return fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_T_RPC}
				asset %s
				asset_name USDC
				asset_version 2
			}
			signer_key {env.X402_T_SIGNER}
			store redis {env.X402_T_REDIS}
			journal postgres {env.X402_T_PG}
			receipt_timeout %s
		}
	}
}
http://127.0.0.1:%d {
	x402 {
		price 0.01
		pay_to %s
		network base-sepolia
	}
	reverse_proxy %s
}`, tok.Address.Hex(), receiptTimeout, port, merchant.Hex(), strings.TrimPrefix(upSrv.URL, "http://"))
	}
	stopCaddy(t)
	loadCaddy(t, config("30s"))
	first := activeBundle(t)

	req, _ := http.NewRequest(http.MethodGet, base+"/api/data", nil)
	req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
	if res, body := do(t, req); res.StatusCode != http.StatusOK {
		t.Fatalf("paid request: %d %s", res.StatusCode, body)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM settlements WHERE state = 'confirmed'`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("confirmed settlements in PostgreSQL = %d, %v; want 1", rows, err)
	}

	flaky := paymentV1(t, tok, payer, merchant, 10000)
	req, _ = http.NewRequest(http.MethodGet, base+"/api/flaky", nil)
	req.Header.Set("X-PAYMENT", flaky)
	res, body := do(t, req)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("flaky upstream: %d %s, want 503", res.StatusCode, body)
	}
	token := res.Header.Get(gate.HeaderPaymentRetry)
	if token == "" {
		t.Fatal("the failed answer carries no retry token")
	}
	paid := tok.BalanceOf(t, merchant)
	if paid.Cmp(big.NewInt(20000)) != 0 {
		t.Fatalf("merchant balance = %s, want 20000", paid)
	}

	loadCaddy(t, config("31s")) // a changed facilitator: a new engine and new store clients
	if activeBundle(t) == first {
		t.Fatal("a changed facilitator configuration reused the old facilitator")
	}
	if status, body := afterReload(t, base+"/api/flaky"); status != http.StatusPaymentRequired {
		t.Fatalf("unpaid request after the reload: %d %s, want 402", status, body)
	}
	n := up.count()
	req, _ = http.NewRequest(http.MethodGet, base+"/api/flaky", nil)
	req.Header.Set("X-PAYMENT", flaky)
	req.Header.Set(gate.HeaderPaymentRetry, token)
	if res, body := do(t, req); res.StatusCode != http.StatusOK || up.count() != n+1 {
		t.Fatalf("retry through the new facilitator: %d %s, upstream calls %d -> %d", res.StatusCode, body, n, up.count())
	}
	if got := tok.BalanceOf(t, merchant); got.Cmp(paid) != 0 {
		t.Fatalf("merchant balance = %s after the retry, want %s (no second charge)", got, paid)
	}
	if err := db.QueryRow(`SELECT count(*) FROM settlements WHERE state = 'confirmed'`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("confirmed settlements in PostgreSQL = %d, %v; want 2", rows, err)
	}
}
