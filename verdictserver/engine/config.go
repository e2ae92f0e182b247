package engine

import (
	"errors"
	"strconv"
	"time"
)

// Config is what an operator sets of the engine, as JSON states it: the sanctions list
// file and how long it counts as fresh. The verdict service's configuration embeds it, so
// these are the verdict app's `sanctions` and `sanctions_ttl` (docs/caddy.md#the-verdict-app).
// Everything else an Evaluator uses (price tables, feed and oracle clients, a clock,
// decoders) is not configuration: New takes it in Deps.
type Config struct {
	// Sanctions is a sanctions list file: one address per line, or OFAC's
	// SDN_ADVANCED.XML (docs/policy.md#sanctions-list). LoadSanctions and RefreshSanctions
	// read it again. Default: none, and the sanctions check answers not_checked.
	Sanctions string `json:"sanctions,omitempty"`
	// SanctionsTTL is how long after its date the list counts as fresh. Default: 24h
	// (DefaultSanctionsTTL).
	SanctionsTTL Duration `json:"sanctions_ttl,omitempty"`
}

// Validate checks the configuration without I/O.
func (c *Config) Validate() error {
	if c.SanctionsTTL < 0 {
		return errors.New("sanctions ttl is negative")
	}
	return nil
}

// Duration is a time.Duration in JSON: a number of nanoseconds, or a string that
// time.ParseDuration reads ("24h").
type Duration time.Duration

// UnmarshalJSON reads a number of nanoseconds or a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		s, err := strconv.Unquote(string(b))
		if err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		*d = Duration(v)
		return err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	*d = Duration(n)
	return err
}
