package invariant_test

import (
	"errors"
	"testing"

	"basalt/pkg/invariant"
)

func TestFailf(t *testing.T) {
	if invariant.Enabled {
		defer func() {
			if recover() == nil {
				t.Fatal("Failf returned in an invariants build; want a panic")
			}
		}()
		_ = invariant.Failf("slot %d", 3)
		return
	}
	before := invariant.Violations()
	err := invariant.Failf("slot %d", 3)
	if !errors.Is(err, invariant.ErrViolated) || err.Error() != "invariant violated: slot 3" {
		t.Fatalf("Failf = %v", err)
	}
	if got := invariant.Violations(); got != before+1 {
		t.Fatalf("Violations = %d, want %d", got, before+1)
	}
}
