package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestSecrets(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"no secret leaves the text as it is", "dial failed", nil, "dial failed"},
		{"an empty secret is ignored", "dial failed", []string{""}, "dial failed"},
		{"every occurrence is masked", "pw s3 and s3", []string{"s3"}, "pw [redacted] and [redacted]"},
		{"the longer of two overlapping secrets wins", "key abcdef", []string{"abc", "abcdef"}, "key [redacted]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Secrets(tc.in, tc.secrets...); got != tc.want {
				t.Fatalf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestURL(t *testing.T) {
	const raw = "HTTPS://user:pw-9f2@rpc.example:8545/v2/key-77aa?token=q-31c"
	cases := []struct {
		name string
		text string
	}{
		{"the url as given", "Post \"" + raw + "\": EOF"},
		{"the url normalised", "Post \"https://user:pw-9f2@rpc.example:8545/v2/key-77aa?token=q-31c\": EOF"},
		{"the url password-masked", "Post \"https://user:xxxxx@rpc.example:8545/v2/key-77aa?token=q-31c\": EOF"},
		{"the path alone", "404 on /v2/key-77aa"},
		{"the query alone", "bad token=q-31c"},
		{"the password alone", "auth pw-9f2 refused"},
	}
	r := URL(raw, "rpc")
	for _, tc := range cases {
		t.Run(tc.name+" leaks no secret", func(t *testing.T) {
			got := r.Replace(tc.text)
			for _, secret := range []string{"pw-9f2", "key-77aa", "q-31c"} {
				if strings.Contains(got, secret) {
					t.Fatalf("Replace(%q) = %q, still carries %q", tc.text, got, secret)
				}
			}
		})
	}
}

func TestURLRemovesTheURLAndItsKey(t *testing.T) {
	for _, tc := range []struct{ configured, printed string }{
		{"https://user:pw@rpc.example.com/v2/SECRETKEY?apikey=SECRET2", "https://user:pw@rpc.example.com/v2/SECRETKEY?apikey=SECRET2"},
		// url.Error masks the password and normalises the scheme: the printed URL is not
		// the configured one.
		{"https://user:pwSECRET3@rpc.example.com/v2/SECRETKEY", "https://user:***@rpc.example.com/v2/SECRETKEY"},
		{"HTTPS://rpc.example.com/v2/SECRETKEY", "https://rpc.example.com/v2/SECRETKEY"},
	} {
		r := URL(tc.configured, "rpc")
		for _, msg := range []string{
			r.Replace(`Post "` + tc.printed + `": dial tcp rpc.example.com:443: i/o timeout`),
			r.Replace((&url.Error{Op: "Post", URL: tc.configured, Err: errors.New("EOF")}).Error()),
		} {
			for _, secret := range []string{"SECRETKEY", "SECRET2", "SECRET3", "pw@", "rpc.example.com"} {
				if strings.Contains(msg, secret) {
					t.Errorf("%s: redacted %q still holds %q", tc.configured, msg, secret)
				}
			}
		}
	}
}

func TestURLPassword(t *testing.T) {
	cases := []struct{ in, want string }{
		{"redis://:p@ss@host:6379/0", "p@ss"},
		{"redis://user:pw@host:notaport", "pw"},
		{"redis://host:6379", ""},
		{"not a url", ""},
	}
	for _, tc := range cases {
		if got := URLPassword(tc.in); got != tc.want {
			t.Errorf("URLPassword(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestURLWithoutCredentialStays: a URL of a scheme, host and port alone carries no
// credential, so an error about it names it; one with a path, query, user or fragment
// does not.
func TestURLWithoutCredentialStays(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:8545", "https://rpc.example.com/", "ws://localhost:8546"} {
		msg := `Post "` + raw + `": dial tcp: connection refused`
		if got := URL(raw, "rpc").Replace(msg); got != msg {
			t.Errorf("URL(%q) changed %q to %q", raw, msg, got)
		}
	}
	for _, raw := range []string{"https://rpc.example.com/v2/k", "https://rpc.example.com?key=k", "https://u:k@rpc.example.com", "https://rpc.example.com/#k"} {
		if got := URL(raw, "rpc").Replace("at " + raw); strings.Contains(got, "rpc.example.com") {
			t.Errorf("URL(%q) left the host in %q", raw, got)
		}
	}
}
