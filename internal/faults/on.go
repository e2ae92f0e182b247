//go:build x402faults

package faults

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this binary was built with the x402faults tag.
const Enabled = true

var armed = struct {
	once sync.Once
	mu   sync.Mutex
	m    map[string]string
}{}

// Point acts on the first pass through name when X402GATE_FAULT arms it (see the
// package doc).
func Point(name string) {
	armed.once.Do(func() { armed.m = parse(os.Getenv(EnvVar)) })
	armed.mu.Lock()
	action, ok := armed.m[name]
	delete(armed.m, name)
	armed.mu.Unlock()
	if !ok {
		return
	}
	fmt.Fprintf(os.Stderr, "x402faults: reached %s\n", name)
	if action != "block" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	select {}
}

// parse reads "point=action,point=action"; an entry without an action means kill.
func parse(s string) map[string]string {
	m := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, action, ok := strings.Cut(e, "=")
		if !ok {
			action = "kill"
		}
		m[strings.TrimSpace(name)] = strings.TrimSpace(action)
	}
	return m
}
