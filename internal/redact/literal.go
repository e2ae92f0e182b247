package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// placeholder is one {env.NAME} or {file./path} placeholder, expanded when a
// configuration is provisioned, so it never lands in the adapted config.
var placeholder = regexp.MustCompile(`\{(env|file)\.[^{}\s]+\}`)

// IsPlaceholder reports whether s is exactly one {env.*} or {file.*} placeholder and
// nothing else: `{env.UNSET}deadbeef` is not, since its literal tail is the secret.
func IsPlaceholder(s string) bool {
	s = strings.TrimSpace(s)
	loc := placeholder.FindStringIndex(s)
	return loc != nil && loc[0] == 0 && loc[1] == len(s)
}

// PlainWord reports whether s is a short word that an error may quote: no URL, DSN or key
// (docs/caddy.md#errors).
func PlainWord(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// keyLike is a run that looks like an API key or a password: 16 or more letters, digits,
// '-' or '_' with at least one digit and one letter.
var keyLike = regexp.MustCompile(`[A-Za-z0-9_-]{16,}`)

// secretParams are DSN keys and URL query parameters whose value is a secret.
var secretParams = []string{"password", "passwd", "pass", "key", "apikey", "api_key", "api-key", "token", "secret", "auth", "access_token"}

// LiteralCredential reports why s, a URL or a DSN written in a configuration, carries a
// credential outside a placeholder: a user info (user:password@), a secret-named query
// parameter or key=value pair, or a key-looking path segment or value. It returns "" when
// every credential of s sits in a placeholder. A literal secret would land in the adapted
// configuration, the admin API and autosave.json.
func LiteralCredential(s string) string {
	literal := placeholder.ReplaceAllString(s, "")
	if u, err := url.Parse(literal); err == nil && u.Scheme != "" && (u.Host != "" || u.User != nil) {
		if u.User != nil {
			if password, _ := u.User.Password(); password != "" || looksLikeKey(u.User.Username()) {
				return "a password in its user info"
			}
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if looksLikeKey(seg) {
				return "a key-looking path segment"
			}
		}
		for name, vs := range u.Query() {
			for _, v := range vs {
				if v != "" && (secretParam(name) || looksLikeKey(v)) {
					return "a secret in its query (" + name + ")"
				}
			}
		}
		return ""
	}
	for _, field := range strings.Fields(literal) { // key=value DSN
		name, v, ok := strings.Cut(field, "=")
		if ok && v != "" && secretParam(name) {
			return "a secret in " + name
		}
	}
	return ""
}

func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, p := range secretParams {
		if name == p {
			return true
		}
	}
	return false
}

func looksLikeKey(s string) bool {
	if !keyLike.MatchString(s) {
		return false
	}
	hasDigit := strings.ContainsAny(s, "0123456789")
	hasLetter := strings.IndexFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' }) >= 0
	return hasDigit && hasLetter
}
