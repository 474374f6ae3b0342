package volume

import (
	"errors"
	"fmt"

	"basalt/pkg/backend"
	"basalt/replication"
)

// ErrReplicaTooSmall: Volume.Grow to a size the local replica does not
// hold yet.
var ErrReplicaTooSmall = errors.New("volume: the local replica is smaller than the volume")

// ErrCorrupt: an operation or a snapshot stream that cannot be interpreted,
// or an operation that does not fit the volume. It is replication's
// ErrCorrupt, so that a group stopped by one reports it as it reports a
// corrupt log.
var ErrCorrupt = replication.ErrCorrupt

// classes are the backend error classes the target sees for replication's
// errors (target/status.go maps them to NVMe status codes): a node that does
// not lead the group, or serves it no more, is ANA Inaccessible (the host
// uses the leader's path); one that waits for an election, lost leadership
// with the request in flight or had its proposal dropped is ANA Transition
// (the host retries soon on whichever path becomes optimized).
var classes = [...]struct{ err, class error }{
	{replication.ErrNotLeader, backend.ErrInaccessible},
	{replication.ErrNoLeader, backend.ErrTransition},
	{replication.ErrStopped, backend.ErrInaccessible},
	{replication.ErrProposalDropped, backend.ErrTransition},
}

// mapErr returns err, an error from the group, wrapped with the backend
// class of the first replication error it wraps (classes), or err itself
// when it wraps none of them (nil, a context's error, ErrTooLarge, a
// range error of the volume's own).
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return fmt.Errorf("%w: %w", err, c.class)
		}
	}
	return err
}
