package replication

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// TestQueueBoundsAndOrder: an empty queue holds no buffer; it queues up to
// its bound, refuses beyond, and take returns the items oldest first.
func TestQueueBoundsAndOrder(t *testing.T) {
	var q queue[inbound]
	q.init(inboxSize)
	if q.held() {
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
		t.Fatal("the queue is not empty and open again once taken")
	}
	q.done(msgs)
	if msgs[0].m.Index != 0 || msgs[5].m.Index != 0 {
		t.Fatal("done kept the stepped messages' contents")
	}
	q.release()
	if q.spare != nil || q.items == nil {
		t.Fatal("release must drop the spare buffer and keep one that holds a message")
	}
	if q.take(); q.len() != 0 {
		t.Fatal("take left messages")
	}
	q.release()
	if q.held() {
		t.Fatal("an empty queue kept a buffer after release")
	}
}

// TestQueueSteadyStateDoesNotAllocate: once its two buffers have grown to
// the traffic, queueing and taking allocates nothing.
func TestQueueSteadyStateDoesNotAllocate(t *testing.T) {
	var q queue[inbound]
	q.init(inboxSize)
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

// TestQuiescedGroupHoldsNoQueueBuffer: a group's members, once quiesced
// after traffic, hold no buffer in their inbox, proposal or read queues; a
// write wakes them and they step it.
func TestQuiescedGroupHoldsNoQueueBuffer(t *testing.T) {
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
			g := h.Group(1)
			if g.inbox.held() || g.proposals.held() || g.reads.held() {
				n++
			}
		}
		return n
	}
	if held() == 0 {
		t.Fatal("no member holds a queue buffer while the group is busy: the check below proves nothing")
	}
	c.waitQuiesced("every member quiesces after the writes")
	c.run(20 * time.Millisecond) // answers to heartbeats still in flight
	if !c.allQuiesced() {
		t.Fatal("a member woke up with nothing to do")
	}
	if n := held(); n != 0 {
		t.Fatalf("%d quiesced members hold a queue buffer", n)
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

// TestQueuePutWaitWaitsForRoom: on a full queue putWait waits; the takes
// let every waiter in, never more at once than the bound; a waiter whose
// channel closes while the queue is full gives up without queueing.
func TestQueuePutWaitWaitsForRoom(t *testing.T) {
	var q queue[int]
	q.init(2)
	q.put(0)
	q.put(1)
	const waiters = 5
	queued := make(chan int, waiters)
	for i := range waiters {
		go func() {
			if q.putWait(10+i, nil, nil) {
				queued <- 10 + i
			}
		}()
	}
	seen := map[int]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(seen) < waiters+2 {
		if time.Now().After(deadline) {
			t.Fatalf("took %d of %d items: waiters were not let in", len(seen), waiters+2)
		}
		items := q.take()
		if len(items) > 2 {
			t.Fatalf("took %d items from a queue of 2", len(items))
		}
		for _, v := range items {
			seen[v] = true
		}
		q.done(items)
		time.Sleep(time.Millisecond)
	}
	if len(queued) != waiters {
		t.Fatalf("%d waiters reported they queued, want %d", len(queued), waiters)
	}
	q.put(0)
	q.put(1)
	cancel := make(chan struct{})
	gaveUp := make(chan bool)
	go func() { gaveUp <- q.putWait(99, nil, cancel) }()
	time.Sleep(10 * time.Millisecond)
	close(cancel)
	select {
	case ok := <-gaveUp:
		if ok || q.len() != 2 {
			t.Fatalf("putWait on a full queue, cancelled: %v, %d queued; want false, 2", ok, q.len())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter whose channel closed still waits")
	}
}
