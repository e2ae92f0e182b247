package verdictapp

import "testing"

// TestAdaptErrorsOfTheConsole: every mistake in the console block of verdict_api fails
// `caddy adapt`, names the option and points at its line (marked "# <-").
func TestAdaptErrorsOfTheConsole(t *testing.T) {
	site := func(body string) string {
		return "{\n\tverdict {\n\t}\n}\n:8083 {\n\tverdict_api {\n" + body + "\t}\n}\n"
	}
	block := func(opts string) string { return site("\t\tconsole {\n" + opts + "\t\t}\n") }
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"an explorer without {tx}", block("\t\t\texplorer https://basescan.org/tx/ # <-\n"), "explorer: must be an http(s) URL with {tx}"},
		{"an explorer that is a script", block("\t\t\texplorer javascript:alert({tx}) # <-\n"), "explorer: must be an http(s) URL with {tx}"},
		{"a session of ten seconds", block("\t\t\tsession_ttl 10s # <-\n"), "session_ttl: must be 1m to 12h0m0s"},
		{"a session of a week", block("\t\t\tsession_ttl 168h # <-\n"), "session_ttl: must be 1m to 12h0m0s"},
		{"a session length that is not a duration", block("\t\t\tsession_ttl long # <-\n"), `session_ttl "long" is not a duration`},
		{"a journal dsn written into the config", block("\t\t\tjournal postgres postgres://f:hunter2@db/f # <-\n"), "journal: must be an {env.*} or {file.*} placeholder"},
		{"a journal of an unknown kind", block("\t\t\tjournal redis {env.R} # <-\n"), `unknown journal "redis"`},
		{"an unknown option", block("\t\t\tpath /ops # <-\n"), `unrecognized console option "path"`},
		{"a console with an argument", site("\t\tconsole /ops # <-\n"), "wrong number of values for console"},
		{"two consoles", site("\t\tconsole\n\t\tconsole # <-\n"), "verdict_api takes one option, console"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectVerdictError(t, tc.caddyfile, tc.wantErr) })
	}
}
