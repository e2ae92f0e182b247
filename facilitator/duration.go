package facilitator

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Duration is a time.Duration in a configuration's JSON: a number of nanoseconds, or a
// string such as "90s", "5m" or "1d" (whole or decimal days, 24h each), as Caddy reads
// its own durations. It is written as a number of nanoseconds.
type Duration time.Duration

// days matches the day counts of a duration string.
var days = regexp.MustCompile(`(\d+(?:\.\d+)?)d`)

// ParseDuration parses a duration string that may count days ("1d12h").
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > 1024 {
		return 0, fmt.Errorf("parsing duration: input string too long")
	}
	var bad error
	s = days.ReplaceAllStringFunc(s, func(d string) string {
		n, err := strconv.ParseFloat(d[:len(d)-1], 64)
		if err != nil {
			bad = err
		}
		return strconv.FormatFloat(n*24, 'f', -1, 64) + "h"
	})
	if bad != nil {
		return 0, bad
	}
	return time.ParseDuration(s)
}

// UnmarshalJSON reads a number of nanoseconds or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(n)
	return nil
}
