package replication

import (
	"io"
	"net"

	"go.etcd.io/raft/v3/raftpb"
)

// Transport carries Raft traffic between hosts: messages of every group,
// multiplexed, and snapshot streams. The TCP transport (NewTCPTransport) is
// the production one; SimNetwork endpoints replace it in tests.
//
// Messages are best effort, as Raft expects: a transport may drop, delay,
// duplicate or reorder them; it reports a peer it cannot reach, so that Raft
// stops pipelining to it and probes instead.
type Transport interface {
	// Start begins delivering inbound traffic to h. It is called once.
	Start(h Handler) error
	// Send queues msgs of group for their destinations (m.To) and returns
	// without blocking. A message that cannot be queued (the peer's queue is
	// full, or the peer is unknown or unreachable) is dropped, and the drop
	// is reported through Handler.ReportUnreachable. Send does not retain the
	// slice, only the messages.
	Send(group GroupID, msgs []raftpb.Message)
	// SendSnapshot streams a snapshot to m.To: the message m (a MsgSnap,
	// whose Snapshot carries only metadata), then the bytes body writes,
	// which the receiver hands to Handler.HandleSnapshot. It returns at once;
	// done is called exactly once, from any goroutine, with nil when the
	// receiver has restored the snapshot and stepped m, or with the error.
	// body must stream: it is never buffered whole.
	SendSnapshot(group GroupID, m raftpb.Message, body func(w io.Writer) error, done func(error))
	// SetPeer sets the address of node id (ignored by transports without
	// addresses).
	SetPeer(id NodeID, addr string)
	// Addr returns the local listening address, or nil.
	Addr() net.Addr
	// Close stops the transport; queued messages are dropped and snapshot
	// streams fail.
	Close() error
}

// Handler receives a transport's inbound traffic; the Host implements it.
type Handler interface {
	// HandleMessage delivers m of group, which came on src. It never blocks:
	// a group whose inbox is full drops the message. A message the Host
	// refuses (inbound.go) is dropped, and src refused.
	HandleMessage(group GroupID, m raftpb.Message, src Source)
	// HandleSnapshot restores the snapshot streamed in body into group's
	// state machine and steps m. It blocks until done, and returns an error
	// if the snapshot was not applied.
	HandleSnapshot(group GroupID, m raftpb.Message, body io.Reader) error
	// ReportUnreachable says that a message of group to node to was dropped.
	ReportUnreachable(to NodeID, group GroupID)
	// ReportRejected counts a frame the transport refused (it has closed
	// the connection): why, and the node the connection's handshake named
	// (0 before the handshake).
	ReportRejected(reason RejectReason, from NodeID, err error)
}

// Source is the connection an inbound message came on, as the Handler sees
// it.
type Source interface {
	// Refuse closes the connection because it carried a message the Host
	// refused; the frames behind it are lost, as on any broken connection,
	// and the peer reconnects. Safe from any goroutine, more than once.
	Refuse()
}
