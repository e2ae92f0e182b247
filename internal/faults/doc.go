// Package faults holds the crash points that only tests enable (docs/reliability.md#crash-safety).
//
// The settle path and the verdict service call Point("settle.after-journal") and the like
// at the steps where a crash matters. In a production build (no build tag) Point is an
// empty function the compiler inlines away. A binary built with `go build -tags
// x402faults` reads the environment variable X402GATE_FAULT once, a comma-separated list
// of point=action, and when a listed point is reached it writes
// "x402faults: reached <point>" to stderr, then:
//
//   - kill: the process sends itself SIGKILL (no deferred function, no flush, no
//     graceful shutdown runs);
//   - block: the goroutine blocks for ever, so the test can kill the process from
//     outside at that step.
//
// Each point acts the first time it is reached only; later passes are no-ops.
package faults

// EnvVar names the environment variable that arms points in a binary built with the
// x402faults tag.
const EnvVar = "X402GATE_FAULT"
