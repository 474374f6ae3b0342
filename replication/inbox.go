package replication

import "sync"

// inboxInitial is the room an empty inbox makes for messages when one
// arrives: it doubles from there, up to inboxSize.
const inboxInitial = 8

// inboxQueue holds the Raft messages delivered to a group until its loop
// steps them: at most inboxSize; beyond, put drops the message. It holds
// two buffers, the one put appends to and the one the loop steps from, and
// the loop swaps them (take), so that neither side allocates once they
// have grown to the traffic's peak. They start empty and grow on demand,
// because a channel of inboxSize messages costs 176 KiB a group whether or
// not the group is ever busy, and a node holds hundreds or thousands of
// idle groups; a quiesced group gives both back (release).
type inboxQueue struct {
	// ready holds a token while msgs may hold messages the loop has not
	// taken (capacity 1: put signals when it queues into an empty buffer).
	ready chan struct{}
	mu    sync.Mutex
	msgs  []inbound // queued, oldest first; under mu
	// spare is the loop's buffer: what the last take returned, emptied.
	// Only the loop touches it.
	spare []inbound
}

func (q *inboxQueue) init() { q.ready = make(chan struct{}, 1) }

// put queues in and reports whether it did; a full inbox drops it.
func (q *inboxQueue) put(in inbound) bool {
	q.mu.Lock()
	n := len(q.msgs)
	if n >= inboxSize {
		q.mu.Unlock()
		return false
	}
	if q.msgs == nil {
		q.msgs = make([]inbound, 0, inboxInitial)
	}
	q.msgs = append(q.msgs, in)
	q.mu.Unlock()
	if n == 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns what is queued, oldest first, and hands the loop's spare
// buffer to put. The caller steps the messages, then gives the buffer back
// with done. Loop only.
func (q *inboxQueue) take() []inbound {
	q.mu.Lock()
	msgs := q.msgs
	if len(msgs) == 0 {
		q.mu.Unlock()
		return nil
	}
	q.msgs, q.spare = q.spare[:0], nil
	q.mu.Unlock()
	return msgs
}

// done takes back the buffer take returned, its messages stepped: it drops
// their references (entries, snapshots) and keeps the buffer as the spare.
// Loop only.
func (q *inboxQueue) done(msgs []inbound) {
	clear(msgs)
	q.spare = msgs[:0]
}

// release gives back the memory of an idle inbox: the spare buffer, and
// put's buffer if it is empty. Loop only.
func (q *inboxQueue) release() {
	q.spare = nil
	q.mu.Lock()
	if len(q.msgs) == 0 {
		q.msgs = nil
	}
	q.mu.Unlock()
}

// len returns how many messages are queued, not yet taken.
func (q *inboxQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}
