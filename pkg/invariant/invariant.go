// Package invariant is Basalt's one assertion policy: what code does when it
// finds that something it relies on, and that no input can legally cause, is
// false (a core bug, not a client's or a peer's error).
//
// Build with the tag `invariants` (make test does): Failf panics where the
// violation is found, so a test stops at the bug with its stack.
//
// Without the tag (production): Failf logs the violation at Error level,
// counts it (Violations, exported as basalt_invariant_violations_total) and
// returns an error wrapping ErrViolated. The caller must then contain it to
// the smallest unit that saw it: fail that one command (Internal Error),
// close that one connection, or fence that one Raft group. It never
// continues as if nothing happened and never crashes the node for one
// client's or one volume's sake.
//
// Input from the network, a drive or a file is never checked with this
// package: malformed input is an ordinary error with the status the
// protocol names.
//
// Two kinds of check stay plain panics. A misuse of an API by its caller in
// this program (a negative buffer size, a state machine attached twice) is
// found by the first test that makes it. And a broken invariant in the one
// structure every group of a node shares, the write buffer's entry queue
// (package cache), cannot be contained to one group: the node stops
// (fail-stop, as a bounds check would), and what it acknowledged is in the
// persistent log its restart recovers.
//
// Usage, so that the arguments cost nothing when the condition holds:
//
//	if r.Slot >= len(q.slots) {
//		return invariant.Failf("tcp: request slot %d of %d", r.Slot, len(q.slots))
//	}
package invariant

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// ErrViolated is wrapped by every error Failf returns.
var ErrViolated = errors.New("invariant violated")

// Enabled reports whether this binary was built with the invariants tag
// (Failf panics). Code may also use it to guard checks too costly for
// production.
const Enabled = enabled

var violations atomic.Uint64

// Failf reports a broken invariant described by format and args. With the
// invariants tag it panics; otherwise it logs, counts and returns an error
// wrapping ErrViolated for the caller to contain (see the package doc).
func Failf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if enabled {
		panic("invariant violated: " + msg)
	}
	violations.Add(1)
	slog.Error("invariant violated", "what", msg)
	return fmt.Errorf("%w: %s", ErrViolated, msg)
}

// Violations returns how many violations Failf has reported in this process.
func Violations() uint64 { return violations.Load() }
