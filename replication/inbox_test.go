package replication

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// TestInboxBoundsAndOrder: an empty inbox holds no buffer; it queues up to
// inboxSize messages, drops beyond, and take returns them oldest first; a
// take signals nothing until the next put into an empty inbox.
func TestInboxBoundsAndOrder(t *testing.T) {
	var q inboxQueue
	q.init()
	if q.msgs != nil || q.spare != nil {
		t.Fatal("a new inbox holds a buffer")
	}
	for i := range inboxSize + 5 {
		ok := q.put(inbound{m: raftpb.Message{Index: uint64(i)}})
		if ok != (i < inboxSize) {
			t.Fatalf("put %d: %v, want %v (bound %d)", i, ok, i < inboxSize, inboxSize)
		}
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("a put into an empty inbox did not signal ready")
	}
	msgs := q.take()
	if len(msgs) != inboxSize {
		t.Fatalf("took %d messages, want %d", len(msgs), inboxSize)
	}
	for i, in := range msgs {
		if in.m.Index != uint64(i) {
			t.Fatalf("message %d is %d: out of order", i, in.m.Index)
		}
	}
	if q.len() != 0 || !q.put(inbound{}) {
		t.Fatal("the inbox is not empty and open again once taken")
	}
	q.done(msgs)
	if msgs[0].m.Index != 0 || msgs[5].m.Index != 0 {
		t.Fatal("done kept the stepped messages' contents")
	}
	q.release()
	if q.spare != nil || q.msgs == nil {
		t.Fatal("release must drop the spare buffer and keep one that holds a message")
	}
	if q.take(); q.len() != 0 {
		t.Fatal("take left messages")
	}
	q.release()
	if q.spare != nil || q.msgs != nil {
		t.Fatal("an empty inbox kept a buffer after release")
	}
}

// TestInboxSteadyStateDoesNotAllocate: once its two buffers have grown to
// the traffic, delivering and stepping messages allocates nothing.
func TestInboxSteadyStateDoesNotAllocate(t *testing.T) {
	var q inboxQueue
	q.init()
	cycle := func() {
		for range 100 {
			q.put(inbound{m: raftpb.Message{Type: raftpb.MsgApp}})
		}
		<-q.ready
		q.done(q.take())
	}
	cycle()
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("a cycle of 100 messages allocates %v times", n)
	}
}

// TestQuiescedGroupHoldsNoInboxBuffer: a group's members, once quiesced
// after traffic, hold no inbox buffer; a write wakes them and they step it.
func TestQuiescedGroupHoldsNoInboxBuffer(t *testing.T) {
	c := newQuiesceCluster(t, quiesceSeed(t), nil)
	leader := c.leader()
	for i := range int64(20) {
		if err := c.write(leader, i, byte(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	held := func() int {
		n := 0
		for _, h := range c.hosts {
			q := &h.Group(1).inbox
			if q.spare != nil || q.msgs != nil {
				n++
			}
		}
		return n
	}
	if held() == 0 {
		t.Fatal("no member holds an inbox buffer while the group is busy: the check below proves nothing")
	}
	c.waitQuiesced("every member quiesces after the writes")
	c.run(20 * time.Millisecond) // answers to heartbeats still in flight
	if !c.allQuiesced() {
		t.Fatal("a member woke up with nothing to do")
	}
	if n := held(); n != 0 {
		t.Fatalf("%d quiesced members hold an inbox buffer", n)
	}
	if err := c.write(leader, 0, 99); err != nil {
		t.Fatalf("write to the quiesced group: %v", err)
	}
	c.runUntil(time.Second, "every member applies the write after waking", func() bool {
		for _, sm := range c.vols {
			if sm.bytes()[0] != 99 {
				return false
			}
		}
		return true
	})
}
