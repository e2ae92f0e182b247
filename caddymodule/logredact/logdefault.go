package logredact

import (
	_ "unsafe" // go:linkname below

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// registeredDirectives is httpcaddyfile's table of Caddyfile directives. Caddy offers no
// hook that sets the default encoder of a site's access log (a log block without format
// gets zap's plain encoder, which writes every request header but Cookie and
// Authorization), and its table refuses a second registration of "log". The linkname
// fails the build, and init panics at start-up, never silently, if Caddy renames the table
// or the directive.
//
//go:linkname registeredDirectives github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile.registeredDirectives
var registeredDirectives map[string]httpcaddyfile.UnmarshalFunc

func init() {
	parse := registeredDirectives["log"]
	if parse == nil {
		panic("logredact: Caddy's Caddyfile has no log directive to redact")
	}
	registeredDirectives["log"] = func(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
		h.Next()
		seg := h.NextSegment()
		h.Dispenser = caddyfile.NewDispenser(redactByDefault(seg))
		return parse(h)
	}
}

// redactByDefault makes the log directive seg delete the secret headers of RedactedFields
// (docs/caddy.md#secrets): a block without a format line gets "format x402_redact";
// "format json" or "format console" alone on its line becomes "format x402_redact json"
// (or console); a "format filter" block gets a delete line for each field. Any other
// format (an encoder with options of its own) is the operator's and is kept as written.
func redactByDefault(seg caddyfile.Segment) caddyfile.Segment {
	depth, block := 0, false
	for i, tok := range seg {
		switch {
		case tok.Quoted():
		case tok.Text == "{" && lastOnLine(seg, i):
			depth, block = depth+1, true
		case tok.Text == "}" && firstOnLine(seg, i):
			depth--
		case depth == 1 && tok.Text == "format" && firstOnLine(seg, i):
			return wrapFormat(seg, i)
		}
	}
	if !block {
		last := seg[len(seg)-1]
		line := last.Line + last.NumLineBreaks()
		return append(seg, logToken(last, "{", line), logToken(last, "format", line+1),
			logToken(last, "x402_redact", line+1), logToken(last, "}", line+2))
	}
	// The block's closing brace is the segment's last token.
	closing := seg[len(seg)-1]
	prev := seg[len(seg)-2]
	line := prev.Line + prev.NumLineBreaks() + 1
	out := append(seg[:len(seg)-1:len(seg)-1], logToken(closing, "format", line), logToken(closing, "x402_redact", line))
	return append(out, logToken(closing, "}", line+1))
}

// wrapFormat applies redactByDefault to the format line at seg[i].
func wrapFormat(seg caddyfile.Segment, i int) caddyfile.Segment {
	if i+1 >= len(seg) || firstOnLine(seg, i+1) {
		return seg
	}
	switch name := seg[i+1].Text; {
	case (name == "json" || name == "console") && lastOnLine(seg, i+1):
		out := append(seg[:i+1:i+1], logToken(seg[i], "x402_redact", seg[i].Line))
		return append(out, seg[i+1:]...)
	case name == "filter" && i+2 < len(seg) && seg[i+2].Text == "{" && lastOnLine(seg, i+2):
		return filterDeletes(seg, i+2)
	}
	return seg
}

// filterDeletes adds a "<field> delete" line for each of RedactedFields that the filter
// block opening at seg[open] does not filter yet, at the end of that block.
func filterDeletes(seg caddyfile.Segment, open int) caddyfile.Segment {
	depth := 0
	for j := open; j < len(seg); j++ {
		switch tok := seg[j]; {
		case tok.Quoted():
		case tok.Text == "{" && lastOnLine(seg, j):
			depth++
		case tok.Text == "}" && firstOnLine(seg, j):
			if depth--; depth > 0 {
				continue
			}
			prev := seg[j-1]
			line := prev.Line + prev.NumLineBreaks() + 1
			out := append(caddyfile.Segment(nil), seg[:j]...)
			for _, f := range RedactedFields() {
				if !filtered(seg[open:j], f) {
					out = append(out, logToken(tok, f, line), logToken(tok, "delete", line))
					line++
				}
			}
			// The lines after the block keep their order; they move below the new ones.
			for _, rest := range seg[j:] {
				out = append(out, logToken(rest, rest.Text, rest.Line+line-tok.Line))
			}
			return out
		}
	}
	return seg
}

// filtered reports whether the filter block seg already has a line for field: Caddy
// refuses a second filter of one field, and the operator's stands.
func filtered(seg caddyfile.Segment, field string) bool {
	for i, tok := range seg {
		if tok.Text == field && firstOnLine(seg, i) {
			return true
		}
	}
	return false
}

// logToken is a copy of like (its file and imports, for error messages) with text on line.
func logToken(like caddyfile.Token, text string, line int) caddyfile.Token {
	t := like.Clone()
	t.Text, t.Line = text, line
	return t
}

// firstOnLine reports whether seg[i] starts a line.
func firstOnLine(seg caddyfile.Segment, i int) bool {
	return i == 0 || newLine(seg[i-1], seg[i])
}

// lastOnLine reports whether seg[i] ends a line.
func lastOnLine(seg caddyfile.Segment, i int) bool {
	return i == len(seg)-1 || newLine(seg[i], seg[i+1])
}

// newLine reports whether next is on a later line than prev, as Caddy's dispenser reads it.
func newLine(prev, next caddyfile.Token) bool {
	return prev.File != next.File || prev.Line+prev.NumLineBreaks() < next.Line
}
