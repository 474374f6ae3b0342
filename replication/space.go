package replication

import (
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
)

// space is the Host's admission control for the shared write buffer (doc.go,
// "Buffer space"). A group's loop must never wait inside cache.Append for
// space that only its own compaction could free: so before the loop steps
// entries into Raft (its proposals as a leader, an append message as a
// follower) it admits their bytes here, and it steps only what was
// admitted. Admitted bytes stay counted until the loop's iteration has
// persisted them (they are then in the buffer's Used), so that entries
// admitted by several loops at once never exceed the limit together.
//
// The limit leaves a reserve below the buffer's size for what is never
// admitted: state records (compaction, hard state, installed snapshots),
// which are small and are what frees space, and the padding a record may
// need at the end of a lap. A checkpoint, the one state record that must
// find room before it is written (it may carry entries), is admitted into
// the reserve (admitState): it is what frees the buffer when an idle group
// holds the oldest pin, so it must never wait for the space it would free.
type space struct {
	buf        *cache.Buffer
	size       int64        // the buffer's
	limit      int64        // for entries
	stateLimit int64        // for checkpoints: half the reserve stays for the rest
	admitted   atomic.Int64 // stepped, not yet persisted, over all groups
	waits      atomic.Uint64
}

// init sets the limit for buf: its size less a reserve of one largest
// entries record (padding at a lap's end) and a sixteenth of the buffer.
func (s *space) init(buf *cache.Buffer) {
	st := buf.Stats()
	s.buf = buf
	s.size = st.Size
	s.limit = st.Size - int64(st.MaxPayload/4) - st.Size/16
	s.stateLimit = st.Size - (st.Size-s.limit)/2
}

// recordSlack bounds what the buffer adds to a payload: its record header
// and the alignment of the next record.
const recordSlack = 128

// admitState admits a checkpoint record of cost bytes into the reserve:
// it reports whether the buffer holds, besides what is admitted, room for
// it under stateLimit and room for twice the record (padding at a lap's end
// may take up to one record), so that its Append never waits. A refusal
// counts a wait.
func (s *space) admitState(cost int64) bool {
	for {
		cur := s.admitted.Load()
		used := s.buf.Used() + cur
		if used+cost > s.stateLimit || s.size-used < 2*(cost+recordSlack) {
			s.waits.Add(1)
			return false
		}
		if s.admitted.CompareAndSwap(cur, cur+cost) {
			return true
		}
	}
}

// admitUpTo admits as many of costs, in order, as fit under the limit
// and returns how many. Each cost is the bytes one item's entries take in
// a record (entriesCost). When it admits fewer than len(costs) it counts a
// wait.
func (s *space) admitUpTo(costs func(i int) int64, n int) (admitted int, bytes int64) {
	for {
		cur := s.admitted.Load()
		room := s.limit - s.buf.Used() - cur
		admitted, bytes = 0, 0
		for admitted < n {
			c := costs(admitted)
			if bytes+c > room {
				break
			}
			bytes += c
			admitted++
		}
		if bytes == 0 || s.admitted.CompareAndSwap(cur, cur+bytes) {
			if admitted < n {
				s.waits.Add(1)
			}
			return admitted, bytes
		}
	}
}

// release returns bytes admitted earlier, now persisted or never stepped.
func (s *space) release(bytes int64) {
	if bytes != 0 {
		s.admitted.Add(-bytes)
	}
}

// entryCost is the bytes one entry of size data bytes takes in an entries
// record.
func entryCost(data int) int64 { return int64(entryHeaderSize + data) }

// entriesCost is the bytes ents take in an entries record, with the
// record's own header.
func entriesCost(ents []raftpb.Entry) int64 {
	cost := int64(recordHeaderSize + 8)
	for i := range ents {
		cost += entryCost(len(ents[i].Data))
	}
	return cost
}
