package gate

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestServeWriterPassesThrough: the writer Serve hands to next keeps streaming (Flush via
// http.ResponseController, io.Copy's ReadFrom) and reads 1xx answers as no status; the
// status that counts is the final one.
func TestServeWriterPassesThrough(t *testing.T) {
	env := newTestEnv(t)
	g := env.gate(t, env.config(), Options{})
	type step func(w http.ResponseWriter) error
	cases := []struct {
		name    string
		next    step
		status  int
		body    string
		retried bool
	}{
		{"flush then body", func(w http.ResponseWriter) error {
			_, _ = io.WriteString(w, "part1;")
			if err := http.NewResponseController(w).Flush(); err != nil {
				return err
			}
			_, _ = io.WriteString(w, "part2")
			return nil
		}, 200, "part1;part2", false},
		{"io.Copy", func(w http.ResponseWriter) error {
			// A reader without WriteTo, so io.Copy takes the writer's ReadFrom.
			_, err := io.Copy(w, io.LimitReader(strings.NewReader("copied"), 100))
			return err
		}, 200, "copied", false},
		{"103 then 500", func(w http.ResponseWriter) error {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusInternalServerError)
			return nil
		}, 500, "", true},
		{"103 then 200", func(w http.ResponseWriter) error {
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "ok")
			return nil
		}, 200, "ok", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = g.Serve(w, r, Input{}, func(w http.ResponseWriter, r *http.Request) error {
					calls++
					if calls == 1 {
						return tc.next(w)
					}
					_, _ = io.WriteString(w, "retried")
					return nil
				})
			}))
			defer srv.Close()
			url := srv.URL + "/s"
			name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
			res := get(t, url, name, value)
			body := readBody(t, res)
			if res.StatusCode != tc.status || string(body) != tc.body {
				t.Fatalf("status %d body %q, want %d %q", res.StatusCode, body, tc.status, tc.body)
			}
			if res.Header.Get(x402.HeaderPaymentResponseV2) == "" {
				t.Error("no PAYMENT-RESPONSE")
			}
			token := res.Header.Get(HeaderPaymentRetry)
			if tc.retried != (token != "") {
				t.Errorf("retry token %q, want one: %v", token, tc.retried)
			}
			a := presentToken(t, url, name, value, token)
			if tc.retried != (a.status == 200) {
				t.Errorf("retry: %+v, want retried=%v", a, tc.retried)
			}
		})
	}
}

// TestServeHijack: a protocol upgrade through Serve still reaches the connection, and the
// gate touches the response no more once the upstream took the connection over (it once
// flushed it, and net/http recovered a nil-pointer panic).
func TestServeHijack(t *testing.T) {
	env := newTestEnv(t)
	g := env.gate(t, env.config(), Options{})
	var serverLog bytes.Buffer
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = g.Serve(w, r, Input{}, func(w http.ResponseWriter, r *http.Request) error {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), 500)
				return nil
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
			return buf.Flush()
		})
	}))
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	defer srv.Close()
	url := srv.URL + "/ws"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set(name, value)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", res.StatusCode)
	}
	rw, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("body %T is not the upgraded connection", res.Body)
	}
	line, _ := bufio.NewReader(rw).ReadString('o')
	if line != "hello" {
		t.Errorf("read %q over the upgraded connection", line)
	}
	rw.Close()
	srv.Close() // waits for the handler, and with it for whatever the gate did after next
	if serverLog.Len() > 0 {
		t.Errorf("the server logged after the upgrade: %s", serverLog.String())
	}
}
