package volume

import (
	"context"
	"fmt"

	"basalt/pkg/backend"
	"basalt/replication"
)

// AsyncWrites implements backend.AsyncWriter.
func (v *Volume) AsyncWrites() bool { return true }

// WriteAtAsync implements backend.AsyncWriter: it proposes a write of p
// (copied into the proposal before it returns) at off and calls done with
// the result on the group's loop. The target uses it so that a write waits
// for its commit without holding a goroutine; simulations, to drive I/O
// from the goroutine that polls. Writes larger than 1 MiB are refused
// (replication.ErrTooLarge); the target's transfers are smaller (MDTS).
func (v *Volume) WriteAtAsync(p []byte, off int64, _ backend.WriteFlags, done func(error)) {
	c := v.start(OpWrite, len(p), done)
	if err := v.check(off, int64(len(p))); err != nil {
		c.complete(err)
		return
	}
	if len(p) > maxWriteChunk {
		c.complete(fmt.Errorf("%w: asynchronous write of %d bytes", replication.ErrTooLarge, len(p)))
		return
	}
	g, err := v.g()
	if err == nil {
		err = v.checkSpace(g, off, int64(len(p)))
	}
	if err != nil {
		c.complete(err)
		return
	}
	v.deferPropose(g, c, encodeOp(opWrite, off, int64(len(p)), p), len(p)) // qos.go
}

// TrimAsync is Trim, calling done on the group's loop.
func (v *Volume) TrimAsync(off, n int64, done func(error)) {
	c := v.start(OpTrim, 0, done)
	g, err := v.g()
	if err == nil {
		err = v.check(off, n)
	}
	if err != nil {
		c.complete(err)
		return
	}
	v.deferPropose(g, c, encodeOp(opTrim, off, n, nil), 0)
}

// ReadAtAsync waits for a read barrier, then reads p at off from the local
// replica and calls done, both on the group's loop; a range the local
// replica cannot read is read from another replica when a PeerReader is
// set (peer.go), on a goroutine of its own, which then calls done.
func (v *Volume) ReadAtAsync(p []byte, off int64, done func(error)) {
	c := v.start(OpRead, len(p), done)
	g, err := v.g()
	if err == nil {
		err = v.check(off, int64(len(p)))
	}
	if err != nil {
		c.complete(err)
		return
	}
	c.read, c.off = p, off
	v.deferRead(g, c) // qos.go
}

// start returns a completion for an asynchronous op of n bytes, which maps
// the group's errors (errors.go) and counts the op before it calls done.
func (v *Volume) start(op Op, n int, done func(error)) *completion {
	c := newCompletion(&v.counters, v.clock, op, n, done)
	c.mapErrs = true
	c.vol = v
	return c
}

// readLocal is the second half of ReadAtAsync, once the barrier passed.
func (c *completion) readLocal(err error) {
	if err == nil {
		err = c.vol.local.ReadAt(context.Background(), c.read, c.off)
		if c.vol.fallsBack(err) {
			go c.readPeer(err) // peer.go: never waits for another node on the loop
			return
		}
	}
	c.complete(err)
}
