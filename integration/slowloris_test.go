package integration_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// slowLorisCaddyfile is the gate of TestSlowLorisDoesNotStarveTheGate with the server
// timeouts and header cap that the README's production section recommends (shortened
// here so the slow connections are closed within the test).
const slowLorisCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	servers {
		timeouts {
			read_header 2s
			read_body 5s
			idle 10s
		}
		max_header_size 64KB
	}
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	x402 /paid/* {
		price 0.01 USDC
		pay_to {$PAY_TO}
		network base-sepolia
		mime_type application/json
	}
	reverse_proxy {$UPSTREAM}
}
`

// slowLorisConns is how many slow connections the test holds open at once.
const slowLorisConns = 300

// TestSlowLorisDoesNotStarveTheGate opens many slow-loris connections to a Caddy run with
// the recommended server timeouts: each sends a request line and then one header byte at a
// time, never finishing its headers, and others send half a body. While they are open an
// unpaid request still gets its 402 and a paid one its 200 from the upstream; then every
// slow connection is closed by the server (docs/reliability.md#resource-limits). Nothing
// here measures time: the deadlines only turn a hang into a failure.
func TestSlowLorisDoesNotStarveTheGate(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	up := startUpstream(t)
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	api := "http://127.0.0.1:" + strconv.Itoa(port)
	testenv.StartCaddy(t, slowLorisCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PAY_TO=" + payTo.Hex(), "UPSTREAM=" + up.srv.URL, "API_PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})

	stop := make(chan struct{})
	closed := make(chan error, slowLorisConns)
	var wg sync.WaitGroup
	for i := 0; i < slowLorisConns; i++ {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 10*time.Second)
		if err != nil {
			t.Fatalf("slow connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			closed <- slowLoris(c, i%2 == 1, stop)
		}(i, c)
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})

	// With every slow connection open, the gate still answers.
	r := mustDo(t, http.MethodGet, api+"/paid/loris", nil)
	if r.Status != http.StatusPaymentRequired {
		t.Fatalf("an unpaid request among slow connections: status %d, want 402: %s", r.Status, r.Body)
	}
	header, _ := goV1Header(t, tok, chain.Accounts[1], payTo)
	r = mustDo(t, http.MethodGet, api+"/paid/loris", map[string]string{"X-PAYMENT": header})
	if r.Status != http.StatusOK {
		t.Fatalf("a paid request among slow connections: status %d, want 200: %s", r.Status, r.Body)
	}
	if up.count("/paid/loris") != 1 {
		t.Fatalf("the upstream saw the paid request %d times, want 1", up.count("/paid/loris"))
	}

	// And the server closes every slow connection.
	bound := time.After(2 * time.Minute)
	for i := 0; i < slowLorisConns; i++ {
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("a slow connection: %v", err)
			}
		case <-bound:
			t.Fatalf("%d of %d slow connections are still open after two minutes", slowLorisConns-i, slowLorisConns)
		}
	}
}

// slowLoris trickles a request that never completes on c, one byte at a time, until the
// server closes the connection (nil), stop is closed, or the server answers something
// other than a timeout's 408 or nothing (an error). With body it sends complete headers
// announcing a body of 1 MB, then trickles the body.
func slowLoris(c net.Conn, body bool, stop <-chan struct{}) error {
	start := "GET /paid/loris HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Loris: "
	if body {
		start = "POST /paid/loris HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
	}
	if _, err := io.WriteString(c, start); err != nil {
		return nil // closed already
	}
	readErr := make(chan error, 1)
	go func() {
		// The server's only answers may be a 408 or a 402 for the body case; then it closes.
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				readErr <- err
				return
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return errors.New("still open when the test ended")
		case err := <-readErr:
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return nil
			}
			return err
		case <-tick.C:
			if _, err := c.Write([]byte("a")); err != nil {
				// The server closed its side; the read sees it too.
				continue
			}
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		var se *os.SyscallError
		return errors.As(op.Err, &se)
	}
	return false
}
