// Package invarianttest checks, in tests, that code breaks an invariant the
// way pkg/invariant says it must: a panic with the invariants tag, one
// violation counted without it.
package invarianttest

import (
	"fmt"
	"strings"
	"testing"

	"basalt/pkg/invariant"
)

// Expect runs f, which must break the invariant described by what, for
// tests of the containment: with the invariants tag invariant.Failf panics in f (the
// panic must mention what); without it f returns with one more violation
// counted, and must not panic.
func Expect(t testing.TB, what string, f func()) {
	t.Helper()
	before := invariant.Violations()
	p := func() (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}()
	if invariant.Enabled {
		if p == nil || !strings.Contains(fmt.Sprint(p), what) {
			t.Fatalf("%s: panic %v, want an invariant violation", what, p)
		}
		return
	}
	if p != nil {
		t.Fatalf("%s: panicked without the invariants tag: %v", what, p)
	}
	if got := invariant.Violations(); got != before+1 {
		t.Fatalf("%s: %d violations counted, want 1", what, got-before)
	}
}
