// Package replication is Basalt's multi-Raft layer: one Raft group per volume
// (and one for the cluster's metadata), built on go.etcd.io/raft/v3 v3.6 —
// the only package that imports it. Raft's algorithm does no I/O (RawNode);
// this package owns the loop that persists, sends and applies what Raft asks
// for, the log storage in the persistent-memory write buffer, the transport
// between nodes, snapshots and read leases. It replicates bytes ordered by
// index and knows nothing of blocks: pkg/volume is the state machine that
// turns a group and a local replica into a replicated block device.
//
// # Overview
//
//	Host (one per node)
//	 ├─ Group g1 ── loop goroutine: RawNode, logStorage, StateMachine (a volume.Volume)
//	 ├─ Group g2 ── loop goroutine ...
//	 ├─ cache.Buffer on Config.LogRegion: every group's log and hard state
//	 ├─ releaser: frees the buffer behind the slowest group
//	 └─ Transport (TCP, or a SimNetwork endpoint in tests)
//
// # One loop per group
//
// Each group has its own goroutine, which alone touches its RawNode.
// Groups are independent (volumes), so one loop per
// group lets their persists, sends and applies overlap on a multi-core node
// with no lock between them; a slow group (one restoring a snapshot, one
// whose replica is slow) delays only itself. The cost, a goroutine and a
// ticker per group, is small for the few hundred volumes a node holds, and
// an idle group stops its ticker ("Quiescence"), so its loop sleeps. The
// loop's work is a pure function of its inputs, so Config.Manual runs the
// same code from Host.Poll on the caller's goroutine, which is how tests/sim
// drives a whole cluster deterministically.
//
// An iteration drains what is queued (inbound messages, proposals, read
// barriers, transport reports, control requests), steps every queued
// proposal into Raft as one message (many proposals per Ready), then handles
// each Ready in this order (loop.go, handleReady):
//
//  1. send the messages that do not vouch for local state: a leader's
//     appends and heartbeats, vote requests. The leader's appends thus go out
//     while it persists the same entries (Raft thesis §10.2.1). This is safe
//     because Raft v3.6 counts the leader's own acknowledgement only after
//     Advance (msgsAfterAppend), so a commit always means a majority has the
//     entry durably. AsyncStorageWrites is not used: the loop persists
//     synchronously, which keeps the order simple; the parallelism it would
//     add is the follower side, which already overlaps across groups.
//  2. persist the snapshot (if any), the entries and the hard state, in one
//     write-buffer record, which is durable when Append returns;
//  3. send the responses (append and vote responses): only now may they
//     vouch for what was persisted;
//  4. apply the committed entries to the state machine, complete the
//     proposals made here;
//  5. Advance.
//
// A hard state whose only change is the commit index (Raft's MustSync false)
// is not persisted on its own; it rides with the next record, and a node
// that crashes learns the commit index again from the leader.
//
// CheckQuorum and PreVote are on; proposal forwarding is off (a follower
// answers ErrNotLeader, and the host uses the leader's path). Pipelining:
// MaxInflightMsgs (default 256) appends in flight per follower, each up to
// MaxSizePerMsg (1 MiB); the transport batches whatever is queued for a peer
// into one write.
//
// # Log storage
//
// logStorage implements raft.Storage over the shared write buffer. In memory
// it keeps, per entry, only its term, type and where its data lies (record
// Seq and offset); the data are read back from the buffer on demand
// (Entries), except for the most recent entries (Config.EntryCacheSize),
// which are kept so that replicating and applying them reads nothing back.
// Each mutation is one record (below). A conflict that overwrites the log's
// suffix writes the new entries in a new record; the index drops the old
// ones, and recovery applies the same rule (an entries record whose first
// index is at or below the last one overwrites from there). cache.Truncate
// is not used for this: it drops every record after a point, and records of
// other groups follow.
//
// A new group is bootstrapped on every member with the same state, a
// snapshot point at index 1 and term 1 with the members as voters, so no
// configuration-change entries are needed (raft.NewRawNode recommends this).
//
// # Releasing the buffer
//
// cache.Buffer.Release frees a prefix of the one log all groups share. So
// each group publishes a pin: the oldest record it still needs, the minimum
// of its newest state record and the record holding its first entry after
// the snapshot point (entries' records only grow with their index, even
// across overwrites, so the first entry's record is the oldest). The releaser
// frees everything below the smallest pin over all groups — live, recovered
// but not yet added again, and being removed — reading the buffer's last Seq
// before the pins, since a new group registers its pin (the next Seq) before
// its first record. Recovery then sees, for every group, its newest state
// record and every entry after it; older records that survive are harmless
// (recover.go). The log's identity record is a pin too: when it is the
// oldest and something above it could be freed, the releaser has it copied
// to the head and frees past the old copy on a later pass. So are the
// tombstones of fenced groups, which the releaser copies to the head itself
// when they are in the way (tombstone.go). A group that
// writes nothing would pin the buffer for ever;
// when the buffer is more than half full the releaser asks the group with the
// smallest pin to checkpoint: compact to its durable applied index and
// rewrite whatever entries remain into one new state record. The releaser
// asks once per pin, so the request stands until the group's pin has moved:
// a checkpoint that found no room is tried again on the group's next
// iteration. Its record may use the buffer's reserve ("Buffer space"): it is
// what frees the buffer when an idle group holds the oldest pin, and freeing
// space must never wait for space.
//
// # Buffer space
//
// A loop never waits inside cache.Append for space that only its own
// compaction could free (that wedged a leader once: its loop slept in Append
// while its own entries pinned the buffer). Before a loop steps entries into
// Raft it admits their bytes with the Host's space (space.go): a leader
// steps only the queued proposals that fit and keeps the rest queued; a
// follower drops an append message whose entries do not fit, as a lossy
// network would, and the leader sends it again after the next heartbeat.
// Admitted bytes count until the iteration has persisted them, so loops
// admitting at once never exceed the limit together. The limit is the
// buffer's size less a reserve (one largest entries record for padding at
// a lap's end, and a sixteenth of the buffer) that only state records use:
// compactions, hard states, installed snapshots — small, and what frees
// space — and checkpoints, admitted into the reserve as long as they leave
// half of it and room for twice their record (space.go, admitState). An
// iteration that held entries back compacts with no margin, asking its
// Checkpointer to make the applied entries durable first, and the releaser
// wakes such loops when it frees space. Raft's own limit on
// uncommitted bytes is back-pressure too: a dropped batch stays queued. So
// host writes wait, never fail, when the buffer is full.
//
// # Log compaction
//
// After applying, a group compacts its log up to its applied index less
// CompactionMargin entries (kept so that a follower a little behind catches
// up from the log), in steps of a quarter margin; under buffer pressure the
// margin is 0. A leader also keeps, while the buffer is not under pressure,
// the entries back to its slowest follower's match index, as long as those
// from there to its applied index take at most RetainBytes of the buffer
// (by default a quarter of it; retain.go): a follower cut off or restarting
// for that long catches up from the log. Retention sizes itself by bytes,
// not entries, since what it spends is the shared buffer; the half-full
// pressure mark bounds all groups' retention together. It never compacts past the state machine's durable applied
// index, nor past a snapshot that is being streamed. Compaction is one state
// record. A Checkpointer (such as volume.Volume, whose Checkpoint flushes
// the local replica) is asked to make more of the log durable only when the applied but
// not yet durable entries reach max(CompactionMargin, the compaction step),
// when they reach one step under buffer pressure, or at once when the
// releaser asks: a flush of the store pads and syncs a stripe, and doing it
// on every compaction step held the group loop on drive syncs.
//
// # Snapshots
//
// A follower whose next index was compacted away gets a snapshot. Raft's
// MsgSnap carries only metadata (the leader's applied index, its term, the
// configuration); the transport streams the data from the leader's
// StateMachine.Snapshot into the follower's StateMachine.Restore, in chunks,
// never whole in memory, with progress logged. The follower's loop checks
// first that Raft will install the snapshot (raft.restore's own conditions),
// restores the state machine while it waits, steps the MsgSnap and persists
// the new log (one state record) before the leader hears it succeeded. The
// stream reflects the leader's state at some point at or after the
// snapshot's index, not exactly at it: this is safe because block operations
// form a redo log (StateMachine explains), and the follower applies every
// entry after the index.
//
// A delta snapshot (delta.go) streams only what changed: the receiver
// announces, before the data, its base (its loop's applied index and its
// state machine's identity); a leader whose state machine is a
// DeltaSnapshotter streams the changes after that index when it can tell
// them and the identities agree, and the whole state otherwise. The
// leader's status shows each stream's progress (PeerStatus.Snapshot) and
// the group as degraded while a member catches up.
//
// # Reads
//
// ReadBarrier gives a read index: the commit index at a moment this node was
// certainly the leader; the read proceeds once the applied index reaches it.
// Without a lease the loop asks Raft (ReadIndex, ReadOnlySafe) for a
// quorum-confirmed index, for every read queued since the last round at once.
// With a lease (the default) the current commit index is used, provided the
// node has committed an entry in its term: a quorum confirmed its leadership
// at some time t (a ReadIndex round started at t), followers that
// acknowledged refuse to vote for another node for ElectionTicks ticks after
// hearing the leader (CheckQuorum), so no other leader can exist before
// t + ElectionTicks ticks; the lease ends two ticks and a tenth earlier, for
// clock-rate differences. Leases are renewed by a background round while
// reads continue. A leadership transfer drops the lease. A node that
// restarts ignores vote requests for one election timeout, since it has
// forgotten when it last heard the leader, and voting at once could elect a
// new leader while the old one still serves reads under a lease this node
// granted before the restart.
//
// Under a lease a barrier does not even enter the loop: the loop publishes
// the lease with the commit index under it (once it has committed an entry
// in its term) and its applied index after every iteration, and a barrier
// that finds the lease running and that index applied passes on the
// caller's goroutine (reads.go, leaseRead). The loop withdraws the
// published lease before anything that may move leadership takes effect:
// a new term, lost leadership, a transfer, the loop stopping.
//
// # Quiescence
//
// An idle group quiesces (quiesce.go): it stops ticking Raft on every
// member, so that it sends no heartbeats and its loop wakes for nothing.
// Its leader quiesces it after quiesceIdleTicks (3) idle ticks: nothing
// queued or in flight (proposals, reads, a configuration change or joint
// configuration, a transfer, a snapshot), no read asked for in those ticks,
// every entry committed and applied, and every follower in StateReplicate,
// recently active, matching the last index, its node heard from within an
// election timeout. It then sends each follower a quiesce heartbeat (a
// MsgHeartbeat whose Context is "quiesce", with the commit index), drops
// its read lease, and stops its ticker. A follower that steps the quiesce
// heartbeat of the leader it follows, in that term, with its whole log
// committed and applied, quiesces too; one that cannot goes on ticking, and
// wakes its leader when it campaigns. A heartbeat or heartbeat response of
// the current term without a read round (Raft's, still in flight from
// before) and the answers to quiesce heartbeats leave a quiesced group
// asleep; anything else wakes it: a proposal, a read, a control request (a
// configuration change, a transfer, a snapshot), any other message, Raft
// sending anything. A follower that wakes for another reason than its
// leader's message wakes the leader too (a heartbeat response whose Context
// is "wake"), since a follower that ticks while its leader sleeps would
// campaign. Config.AlwaysAwake names groups that never quiesce (pkg/node:
// the metadata group); Config.DisableQuiesce turns it off.
//
// Liveness without the group's heartbeats (quiesce_live.go): every Host
// sends each node it shares a group with one node heartbeat per tick (a
// MsgHeartbeat on group 0, however many groups the two share), and notes
// when it last heard anything from each peer. A quiesced follower whose
// leader's node has been silent for an election timeout, and a quiesced
// leader that has not heard from a follower's node for as long, wake up:
// the leader then ticks, steps down if it lost its quorum (CheckQuorum),
// shows the member gone in its status, and stays awake until the member is
// back (a group with a member down does not quiesce). A follower that wakes sets Raft's election clock to the ticks
// since it last heard its leader's node, at most ElectionTicks: the timer a
// follower that never quiesced would have, or less, since each of the
// leader's messages restarted that timer and the leader's node sent them.
// So a quiesced follower campaigns, and grants its vote, no sooner than a
// ticking one would (the lease argument in "Reads" holds), and after a
// leader's crash no later than an election timeout and one tick, plus the
// election (well under 2 s at the default 50 ms ticks). A Manual Host runs
// the same on Poll, on its clock; SimNetwork carries the node heartbeats
// like any message, so partitions silence them too. A peer heard in the
// group before it quiesced counts as heard in it when it wakes, if its
// node still is (membership changes need recently heard voters).
//
// Reads: a quiesced leader holds no lease (it dropped it as it quiesced),
// so its first read wakes the group and confirms leadership with a
// ReadIndex round, whose heartbeats wake the followers; that round renews
// the lease. A follower that acknowledged the round ticks from then on and
// quiesces again only on a later quiesce heartbeat, which the leader sends
// after dropping the lease again.
//
// # Errors
//
// A follower refuses proposals and reads with ErrNotLeader; while no leader
// is known, or when this node lost leadership with a request in flight (its
// outcome is then unknown), with ErrNoLeader. (pkg/volume wraps them with
// backend.ErrInaccessible and backend.ErrTransition for the target.) A
// storage or state-machine error stops the group on this node (Raft
// requires it: README, "Storage errors make raft inoperable"); its requests
// fail with ErrStopped. So does
// a panic in the group's loop (Raft reports a broken invariant by
// panicking): the loop recovers it as an invariant violation (pkg/invariant;
// a panic again under the invariants tag) and the process serves its other
// groups. A group that fails is fenced (fence.go): it persists its removal,
// drops its pin on the write buffer, so that the releaser never waits for it,
// and closes its Watch channels, so that its path turns inaccessible; it
// stays listed, with its error, until RemoveGroup. The removal is a
// tombstone (tombstone.go) that keeps what Raft's safety needs of the log
// it drops: the term, the vote, and the log's last entry. Added again, even
// after a restart, the group starts with no log in that term with that vote,
// so it cannot vote twice in a term, and until its log catches up with that
// last entry it refuses its vote to a candidate whose log is behind it, and
// asks for none itself, since it may have acknowledged entries that are
// committed. RemoveGroup drops the tombstone.
//
// # Inbound checks
//
// Raft trusts what it is given: a heartbeat whose commit index lies beyond
// the log, an append whose entries skip an index or overwrite committed ones,
// a snapshot whose configuration does not restore, each panics inside it.
// So everything a peer sends is checked before Raft sees it (inbound.go):
//
//   - by the transport: the peer authenticates, when TLS is configured
//     ("Peer authentication"); the handshake decodes and names this node; every
//     frame decodes; every message's From is the node the handshake named and
//     its To is this node.
//   - at delivery: the sender is not this node; a message on group 0 is a
//     node heartbeat (MsgHeartbeat, "Quiescence") and nothing else; the
//     group runs here; the type
//     is one peers send (appends, votes and pre-votes, heartbeats, their
//     responses, MsgTimeoutNow; never a local type, a proposal or read index,
//     which nothing forwards, a leadership transfer, which Raft would forward
//     with its term set and panic, or a MsgSnap outside a snapshot stream);
//     the term is at least 1, every term and index at most 2^62, the log term
//     at most the term; an append's entries follow its previous entry one
//     after another, with terms that never fall and never exceed the
//     append's, and known types; a snapshot's metadata has a term at most the
//     message's and a configuration that restores to itself.
//   - on the group's loop, where its state is known: the sender is a voter or
//     learner of the configuration Raft uses; a heartbeat commits no further
//     than the end of Raft's log (the log is persisted first when an append
//     stepped in the same iteration may have cut Raft's log shorter than the
//     persisted one); a leader takes no snapshot in its own term; a
//     committed configuration change applies to the configuration (else the
//     group fails, a corrupt log).
//
// A refused message is dropped and counted by reason (HostStats.Rejected;
// basalt_raft_rejected_messages_total), logged at Warn at most once a
// second, and the connection it came on is closed; a message for a group
// that does not run here is only counted, since a new group starts on its
// members one after another. What these checks cannot tell is whether a
// member's well-formed message is its own: a forged append from a member
// with a higher term is what a new leader sends. Authenticating peers does
// ("Peer authentication").
//
// # Peer authentication
//
// With TCPConfig.TLS (Config.TLS) every connection is mutual TLS 1.3 and
// the stream handshake and frames travel inside it, unchanged. The accepting
// side requires a client certificate its configuration verifies (the
// cluster's CA, pkg/pki); then it reads the stream handshake and calls
// VerifyPeer with the sender the handshake names: the certificate must name
// that node of this cluster. From there the check that every message's
// From is the handshake's sender makes every message the certificate's.
// The dialing side verifies the server's chain and calls VerifyPeer with
// the node it dialed. The TLS and stream handshakes together are bounded by
// a 10-second deadline, on the connection's own goroutine. A peer that
// fails (plain TCP, no certificate, another CA, another cluster, another
// node than it claims) has its connection closed before one of its frames
// is read, and is counted as RejectAuth ("auth") and logged like any
// refusal; a peer that closes before sending anything is not. On the
// message stream a batch's pieces go through a 64 KiB buffer, so that they
// become TLS records of up to 16 KiB rather than a record each.
//
// # Log records (in the cache.Buffer payload, little-endian)
//
// Every record starts with the same 40-byte header:
//
//	offset size field
//	     0    1 version (1)
//	     1    1 flags (kindState: bit 0 = replace; kindTombstone: bit 0 =
//	              drop; otherwise 0)
//	     2    2 zero
//	     4    4 entry count
//	     8    8 group ID (0 in kindIdentity only)
//	    16    8 hard state: term
//	    24    8 hard state: vote
//	    32    8 hard state: commit
//
// kindEntries (cache.Kind 1): entries from a first index, overwriting the
// group's log from there (count 0: a hard state alone).
//
//	offset size field
//	     0   40 header
//	    40    8 first index
//	    48      entries
//
// kindState (cache.Kind 2): a snapshot point. Without the replace flag
// (compaction), entries up to the snapshot index are dropped and the rest
// kept; with it (bootstrap, installed snapshot, checkpoint), the log is
// replaced by the entries the record carries, from snapshot index + 1.
//
//	offset size field
//	     0   40 header
//	    40    8 snapshot index
//	    48    8 snapshot term
//	    56    4 configuration length c
//	    60    4 zero
//	    64    c configuration (raftpb.ConfState, protobuf)
//	  64+c      entries (replace flag only)
//
// kindRemove (cache.Kind 3): the group was removed; recovery forgets its
// earlier records, and its tombstone. The 40-byte header alone, hard state
// zero.
//
// kindIdentity (cache.Kind 4): the log's identity stamp (pkg/identity), which
// cluster and which node the log belongs to. Group ID 0, count 0, hard state
// zero; both UUIDs non-zero. Written once, when the node first stamps the log
// (bootstrap, or adopting a log written before stamps existed), then copied
// to the head whenever it is the only record keeping the releaser from
// freeing more (identity.go). Every copy carries the same stamp; recovery
// refuses a log whose copies disagree.
//
//	offset size field
//	     0   40 header (group 0)
//	    40   16 cluster UUID
//	    56   16 node UUID
//
// kindTombstone (cache.Kind 5): a group that failed here was fenced and its
// log dropped (tombstone.go). Flags bit 0 (drop) marks the fence's own
// record: recovery forgets the group's earlier records; a copy the releaser
// writes has flags 0 and forgets nothing. Count 0; hard state: the group's
// last term (at least 1) and vote (0: none), commit 0; the log's last entry
// has a term at most the hard state's. Recovery merges every tombstone
// record of a group since its last kindRemove, in any order: the highest
// term with its vote, the most up-to-date last entry. Logs written before
// this kind existed have none and read as before.
//
//	offset size field
//	     0   40 header (flags: bit 0 = drop)
//	    40    8 last index of the dropped log
//	    48    8 term of that entry
//
// Each entry:
//
//	offset size field
//	     0    8 term
//	     8    1 type (raftpb.EntryType: 0 normal, 1 conf change, 2 conf change v2)
//	     9    3 zero
//	    12    4 data length n
//	    16    n data
//
// The entries fill the record exactly. The buffer's record CRC covers it all.
// A normal entry's data is an 8-byte proposal ID (little-endian; the high 24
// bits are the buffer epoch of the proposing node's run, so IDs never repeat
// across restarts), then the state machine's payload; an empty entry is a new
// leader's.
//
// # Transport wire format (TCP, little-endian)
//
// Each connection opens with a 32-byte handshake, then carries frames:
//
//	handshake                        frame
//	offset size field                offset size field
//	     0    8 magic "BSLTRAFT"          0    4 body length (at most 64 MiB)
//	     8    2 version (3)               4    1 type: 1 message, 2 snapshot chunk,
//	    10    1 stream: 1 messages,                   3 snapshot end, 4 snapshot result,
//	                                                  5 snapshot base
//	              2 snapshot              5    3 zero
//	    11    5 zero                      8    8 group ID (0 only in a result
//	    16    8 sender node ID                     or a node heartbeat)
//	                                     16      body
//	    24    8 receiver node ID
//
// A message body carries a raftpb.Message with its entries' payloads out of
// band: the protobuf holds every entry with its Data field left out, and the
// payloads follow it, concatenated in entry order, so that the sender writes
// them from where Raft holds them and the receiver reads them all into one
// buffer that the entries share:
//
//	offset  size field
//	     0     4 protobuf length p
//	     4     4 entry count n (each entry takes at least 2 protobuf bytes)
//	     8    4n payload length of each entry, 4 bytes each, in entry order
//	  8+4n     p raftpb.Message (protobuf), no entry with a Data field
//	8+4n+p   sum payloads, back to back, in entry order
//
// The payload lengths add up to exactly the rest of the body. An entry with
// an empty payload arrives with nil Data. Version 1 (the whole message in
// the protobuf) and version 2 (snapshot streams without a base frame) are
// refused at the handshake. A message frame of group 0 is a node heartbeat
// (a MsgHeartbeat, "Quiescence"). A node opens one message
// stream to each peer and sends all its groups' messages on it; it receives
// on the streams its peers open. A snapshot has a stream of its own: a
// message frame with the MsgSnap; the receiver answers with a base frame
// (what it holds, for a delta: an empty body for none, else its applied
// index, 8 bytes, then its state machine's identity, 1 to 256 bytes), or,
// if it refuses the MsgSnap, at once with the result frame; then chunk
// frames of up to 1 MiB of state machine data, an end frame whose 8-byte
// body is the total data length; the receiver answers with a result frame,
// body 0 (restored) or 1 followed by the error text. A malformed frame ends the connection, as does a
// message the Host refuses ("Inbound checks").
package replication
