package gate

import (
	"net/http"
	"net/url"
	"unicode"
	"unicode/utf8"

	"github.com/x402gate/x402gate/x402"
)

// Ambiguous paths (docs/gate.md#ambiguous-paths): a path that Caddy's matchers and the gate
// read one way and a lenient upstream another. Tomcat cuts ";params" (`/a/..;/b` is
// `/a/../b`), IIS and ASP.NET read `\` as `/`, a double-decoding backend reads `%252e%252e` as
// `..`, Windows drops a trailing dot or space, and a NUL or a newline ends a path for some. A
// pass or a payment for one route would then buy another route's answer. The gate refuses
// such a request before it looks at any payment, pass or sign-in.

// Path handling of a route (Config.Paths).
const (
	// PathsStrict refuses an ambiguous path with 400 ambiguous_path (the default).
	PathsStrict = "strict"
	// PathsLenient lets every path through, for an upstream that reads paths exactly as
	// Caddy does.
	PathsLenient = "lenient"
)

// ReasonAmbiguousPath: the request's path could be read as another path by the upstream
// (400); nothing was charged, and no pass was looked at.
const ReasonAmbiguousPath x402.Reason = "ambiguous_path"

// pathAmbiguity says what makes the decoded path p ambiguous, "" when nothing does: a
// control character, a backslash, a ';', a '%' left after decoding, a segment that ends in
// a dot or a space ("." and ".." included), or bytes that are not UTF-8 (an overlong
// "%c0%ae" is a dot to some decoders).
func pathAmbiguity(p string) string {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return "a control character"
		case c == '\\':
			return "a backslash"
		case c == ';':
			return "a ';'"
		case c == '%':
			return "a '%' left after decoding (a double escape)"
		case (c == '.' || c == ' ') && (i+1 == len(p) || p[i+1] == '/'):
			return "a segment that ends in a dot or a space"
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(p[i:])
			if r == utf8.RuneError && size == 1 {
				return "bytes that are not UTF-8"
			}
			if unicode.IsControl(r) {
				return "a control character"
			}
			i += size - 1
		}
	}
	return ""
}

// resourceAmbiguity is pathAmbiguity of the decoded path of the resource URL. A URL whose
// text holds none of the suspect bytes is not parsed: its path is plain.
func resourceAmbiguity(resource string) string {
	if pathAmbiguity(resource) == "" {
		return ""
	}
	u, err := url.Parse(resource)
	if err != nil {
		return "an escape that does not decode"
	}
	return pathAmbiguity(u.Path)
}

// refuseAmbiguousPath answers 400 ambiguous_path when the public resource URL's path or
// the path the upstream is sent (reqPath, decoded; "" when unknown) is ambiguous; nil when
// both are plain or the route's paths are lenient.
func (g *Gate) refuseAmbiguousPath(resource, reqPath string) *Result {
	if g.route.lenientPaths {
		return nil
	}
	what := pathAmbiguity(reqPath)
	if what == "" {
		what = resourceAmbiguity(resource)
	}
	if what == "" {
		return nil
	}
	return g.errorResult(nil, 0, http.StatusBadRequest, ReasonAmbiguousPath,
		"the request path holds "+what+", which an upstream could read as another path")
}
