// Package redact removes secrets from text bound for an error message or a log: passwords,
// API keys, and the parts of a URL that often carry one (user info, path, query).
package redact

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
)

// Mask is what a secret becomes.
const Mask = "[redacted]"

// Secrets returns s with every occurrence of each non-empty secret replaced by Mask. Where
// two secrets overlap, the longer is replaced.
func Secrets(s string, secrets ...string) string {
	var pairs []string
	for _, secret := range sortedByLength(secrets) {
		pairs = append(pairs, secret, Mask)
	}
	if len(pairs) == 0 {
		return s
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

func sortedByLength(secrets []string) []string {
	out := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return out
}

// URL returns a Replacer that removes rawURL from text. The URL, in every form net/http and
// url.Error print it (as given, normalised, password masked), becomes "<label>"; its host
// "<label-host>"; its user info, password, path and query, each of which can be a
// provider's API key, become Mask. A rawURL that does not parse is removed as given. A URL
// with nothing of that kind (scheme, host and port alone, such as http://127.0.0.1:8545)
// carries no credential: it stays in the text, so an operator sees which endpoint failed.
func URL(rawURL, label string) *strings.Replacer {
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" && u.User == nil && u.RawQuery == "" &&
		!u.ForceQuery && u.Fragment == "" && (u.Path == "" || u.Path == "/") && !strings.Contains(u.Host, "@") {
		return strings.NewReplacer()
	}
	var pairs []string
	add := func(secret, with string) {
		if secret != "" {
			pairs = append(pairs, secret, with)
		}
	}
	// Longest forms first: strings.Replacer tries the pairs in order at each position.
	whole := "<" + label + ">"
	add(rawURL, whole)
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
		add(u.String(), whole)
		add(u.Redacted(), whole)
		add(u.Host, "<"+label+"-host>")
		if len(u.EscapedPath()) > 1 {
			add(u.EscapedPath(), "/"+Mask)
		}
		if len(u.Path) > 1 {
			add(u.Path, "/"+Mask)
		}
		add(u.RawQuery, Mask)
		if u.User != nil {
			add(u.User.String(), Mask)
			if pw, ok := u.User.Password(); ok {
				add(pw, Mask)
			}
		}
	}
	return strings.NewReplacer(pairs...)
}

// URLPassword returns the password of a URL, found without url.Parse, which refuses some
// URLs and then quotes them whole: the text between the first ':' after "//" and the last
// '@'. It returns "" when there is none.
func URLPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "//")
	if !ok {
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}
