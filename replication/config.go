package replication

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// Config configures a Host. Zero fields take the defaults named on them.
type Config struct {
	// NodeID is this node's ID; required, never 0, never reused.
	NodeID NodeID
	// Listen is the TCP address the Raft transport binds ("host:port"; port 0
	// picks a free port, see Host.Addr). Used only when Transport is nil.
	Listen string
	// Peers maps the other nodes' IDs to their Raft addresses. More can be
	// added later with Host.SetPeer. Used only when Transport is nil.
	Peers map[NodeID]string
	// TLS secures the TCP transport with mutual TLS (TLSConfig): every peer
	// must prove with a certificate that it is the node it claims to be.
	// nil: plain TCP, which authenticates nobody. Used only when Transport
	// is nil.
	TLS *TLSConfig
	// LogRegion is the persistent write buffer that holds every group's Raft
	// log and hard state (package cache formats it on first use). Required.
	// The Host does not close it.
	LogRegion pmem.Region
	// Clock is the source of time. Default clock.Real().
	Clock clock.Clock
	// Logger receives the Host's and Raft's logs. Default slog.Default().
	Logger *slog.Logger
	// TickInterval is the Raft tick. Default 50ms.
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks (randomised by Raft to
	// [ElectionTicks, 2*ElectionTicks)). Default 10. Must exceed
	// HeartbeatTicks.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat period in ticks. Default 1.
	HeartbeatTicks int
	// Transport carries Raft traffic between nodes. Default nil: TCP on
	// Listen (NewTCPTransport). Tests inject a SimNetwork endpoint.
	Transport Transport

	// Manual makes the Host start no goroutine of its own: the group loops,
	// their ticks and the log releaser run only when the caller calls Poll.
	// This is how tests/sim drives three hosts from one goroutine. In manual
	// mode the blocking calls (Propose, ReadBarrier, the Volume's I/O) must
	// not be made from the goroutine that polls; use the Async variants.
	Manual bool
	// MaxSizePerMsg bounds the entries carried by one append message. Default
	// 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight to one follower
	// (pipelining). Default 256.
	MaxInflightMsgs int
	// MaxUncommittedSize bounds the bytes of proposals a leader steps into
	// Raft before they commit; beyond it further proposals wait in the
	// group's queue (back-pressure, doc.go "Buffer space"). Default 64 MiB.
	MaxUncommittedSize uint64
	// MaxProposalSize bounds one proposal. Default 8 MiB, and at most a
	// quarter of the log region's largest record.
	MaxProposalSize int
	// CompactionMargin is how many applied entries a group keeps in its log
	// for followers that lag a little, so that they catch up from the log
	// rather than by snapshot. Under write-buffer pressure (more than half
	// full) groups compact to their durable applied index regardless. Default
	// 1024.
	CompactionMargin uint64
	// RetainBytes is the byte budget of applied entries a leader keeps in
	// its log for followers that lag further than CompactionMargin (one
	// cut off, or restarting), so that they catch up from the log rather
	// than by snapshot: while the write buffer is at most half full the
	// leader compacts no further than the slowest follower's match index,
	// as long as the entries it keeps from there to its applied index take
	// at most RetainBytes of the buffer; past that it keeps what fits, and
	// under pressure it compacts to its durable applied index as before.
	// CompactionMargin stays the floor. Default (0): a quarter of the log
	// region; negative: no retention beyond CompactionMargin.
	RetainBytes int64
	// EntryCacheSize bounds the bytes of recent entries each group keeps in
	// memory, so that applying and replicating them does not read them back
	// from the write buffer. Default 4 MiB.
	EntryCacheSize int
	// DisableLease makes every ReadBarrier confirm leadership with a quorum
	// round trip (Raft ReadIndex), instead of serving reads under a leader
	// lease when one is held. Default false: leases on.
	DisableLease bool
	// SnapshotRate bounds the bytes per second a snapshot streams to one
	// follower (a new replica catching up, or one back after being away),
	// so that a rebuild of a replica leaves the drives and the network to
	// client I/O. 0: unbounded. Not applied in Manual mode.
	SnapshotRate int64
	// DisableQuiesce keeps every group ticking Raft, with a heartbeat
	// every HeartbeatTicks, however idle (doc.go, "Quiescence"). Default
	// false: an idle group quiesces.
	DisableQuiesce bool
	// AlwaysAwake names groups that never quiesce (the cluster's metadata
	// group, which pkg/node names here).
	AlwaysAwake []GroupID
}

// Defaults.
const (
	defaultTickInterval       = 50 * time.Millisecond
	defaultElectionTicks      = 10
	defaultHeartbeatTicks     = 1
	defaultMaxSizePerMsg      = 1 << 20
	defaultMaxInflightMsgs    = 256
	defaultMaxUncommittedSize = 64 << 20
	defaultMaxProposalSize    = 8 << 20
	defaultCompactionMargin   = 1024
	defaultEntryCacheSize     = 4 << 20
)

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	setDefault(&cfg.TickInterval, defaultTickInterval)
	setDefault(&cfg.ElectionTicks, defaultElectionTicks)
	setDefault(&cfg.HeartbeatTicks, defaultHeartbeatTicks)
	setDefault(&cfg.MaxSizePerMsg, defaultMaxSizePerMsg)
	setDefault(&cfg.MaxInflightMsgs, defaultMaxInflightMsgs)
	setDefault(&cfg.MaxUncommittedSize, defaultMaxUncommittedSize)
	setDefault(&cfg.MaxProposalSize, defaultMaxProposalSize)
	setDefault(&cfg.CompactionMargin, defaultCompactionMargin)
	setDefault(&cfg.EntryCacheSize, defaultEntryCacheSize)
	return cfg
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// validate reports every problem with a defaulted cfg at once.
func (cfg Config) validate() error {
	var problems []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	check(cfg.NodeID != 0, "NodeID is 0; give every node a unique, non-zero ID")
	check(cfg.LogRegion != nil, "LogRegion is nil; the Raft log needs a persistent write buffer")
	check(cfg.Transport != nil || cfg.Listen != "", "neither Transport nor Listen is set")
	check(cfg.Transport != nil || !cfg.Manual, "Manual needs an injected Transport (a SimNetwork endpoint)")
	check(cfg.TickInterval > 0, "TickInterval %v is not positive", cfg.TickInterval)
	check(cfg.HeartbeatTicks > 0, "HeartbeatTicks %d is not positive", cfg.HeartbeatTicks)
	check(cfg.ElectionTicks > cfg.HeartbeatTicks, "ElectionTicks %d must exceed HeartbeatTicks %d",
		cfg.ElectionTicks, cfg.HeartbeatTicks)
	check(cfg.MaxInflightMsgs > 0, "MaxInflightMsgs %d is not positive", cfg.MaxInflightMsgs)
	check(cfg.MaxProposalSize > 0, "MaxProposalSize %d is not positive", cfg.MaxProposalSize)
	check(cfg.EntryCacheSize > 0, "EntryCacheSize %d is not positive", cfg.EntryCacheSize)
	for id := range cfg.Peers {
		check(id != 0 && id != cfg.NodeID, "Peers holds an invalid ID %v", id)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(problems...))
}

// leaseDuration is how long after a quorum confirmed this node's leadership
// (a ReadIndex round started at t) it may serve reads without asking again:
// followers that acknowledged refuse to vote for anyone else for at least
// ElectionTicks ticks after they heard the leader, so no other leader can exist
// before t + ElectionTicks*TickInterval. Two ticks and a tenth are taken off
// for clock-rate differences between nodes and for ticks a slow follower
// delivers late.
func (cfg Config) leaseDuration() time.Duration {
	d := time.Duration(cfg.ElectionTicks-2) * cfg.TickInterval * 9 / 10
	return max(d, 0)
}
