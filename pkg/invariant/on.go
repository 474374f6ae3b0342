//go:build invariants

package invariant

const enabled = true
