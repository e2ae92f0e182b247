//go:build !x402faults

package faults

// Point marks a crash point. Without the x402faults build tag it does nothing.
func Point(string) {}

// Enabled reports whether this binary was built with the x402faults tag.
const Enabled = false
