package testenv

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Secret canaries (docs/caddy.md#secrets): a test binary registers the known values it
// uses for its secrets with AddCanary, and everything that can carry a leak is handed to
// ScanCanaries: every Caddy's output, its admin /config/ and /metrics answers (StartCaddy
// scans them when the test ends), HTTP answers, and the binary's own test output. A hit
// records where the secret was seen and which one, never the value; CanaryHits returns
// them for TestMain to fail on.

// minCanary is the shortest value AddCanary accepts: a shorter one would match by chance.
const minCanary = 12

var canaries struct {
	mu     sync.Mutex
	values map[string]string // lower-cased value -> name
	hits   map[string]bool   // "where: name"
	max    int               // longest value, in bytes
}

// AddCanary registers value, a secret the tests use, under a name for reports. It is
// matched case-insensitively (hex keys travel in either case). A value shorter than 12
// bytes is refused with a panic: it would match unrelated text.
func AddCanary(name, value string) {
	if len(value) < minCanary {
		panic(fmt.Sprintf("testenv: canary %s is shorter than %d bytes", name, minCanary))
	}
	canaries.mu.Lock()
	defer canaries.mu.Unlock()
	if canaries.values == nil {
		canaries.values, canaries.hits = map[string]string{}, map[string]bool{}
	}
	canaries.values[strings.ToLower(value)] = name
	canaries.max = max(canaries.max, len(value))
}

// MaxCanaryLen is the length of the longest registered canary: a stream scanner keeps
// that many bytes minus one of overlap between chunks.
func MaxCanaryLen() int {
	canaries.mu.Lock()
	defer canaries.mu.Unlock()
	return canaries.max
}

// ScanCanaries looks for every registered canary in b, records a hit for each one found
// (where says what b was), and returns the names found.
func ScanCanaries(where string, b []byte) []string {
	canaries.mu.Lock()
	defer canaries.mu.Unlock()
	if len(canaries.values) == 0 || len(b) == 0 {
		return nil
	}
	low := bytes.ToLower(b)
	var found []string
	for v, name := range canaries.values {
		if bytes.Contains(low, []byte(v)) {
			found = append(found, name)
			canaries.hits[where+": "+name] = true
		}
	}
	sort.Strings(found)
	return found
}

// CanaryHits returns every recorded hit ("where: name"), sorted.
func CanaryHits() []string {
	canaries.mu.Lock()
	defer canaries.mu.Unlock()
	out := make([]string, 0, len(canaries.hits))
	for h := range canaries.hits {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
