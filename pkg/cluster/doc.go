// Package cluster is a node's part in a Basalt cluster: the cluster
// metadata as a replicated state machine, and the reconciler that makes the
// node match it.
//
// # Metadata
//
// The metadata (State: nodes, volumes, the next group ID) is the state
// machine (Machine) of the metadata Raft group, MetadataGroup, of which
// every node is a member. Changes are Commands proposed to that group; a
// node that does not lead it forwards the command to the leader's API
// (Config.Forward, pkg/api POST /v1/internal/commands), which proposes it
// and returns the outcome. Applying is deterministic: what depends on time
// or chance (UUID, NGUID, creation time) is chosen by the node that builds
// the command and travels in it; placement (the nodes with the fewest
// replicas, ties rotated by group ID) and the ANA group (the smallest free
// one, 1..MaxANAGroups) are computed from the state.
//
// After every applied entry the whole state and the entry's index are
// saved together in one synced transaction (Persister; in a node, pkg/node
// keeps it in badger through pkg/meta, key "cluster/state"), so the two
// never disagree and a restart resumes from the saved index. Snapshots
// carry the same record. The record (JSON):
//
//	field                      type        meaning
//	-------------------------  ----------  ---------------------------------------------
//	version                    int         1
//	applied                    uint64      index of the last entry applied to state
//	state.nodes.<id>           Node        id, name, nvme_addr, raft_addr, api_addr, state
//	state.volumes.<name>       Volume      below
//	state.next_group           uint64      group ID of the next volume (never reused)
//
//	Volume field               type        meaning
//	-------------------------  ----------  ---------------------------------------------
//	name                       string      [a-z0-9][a-z0-9._-]{0,62}; NQN suffix
//	id                         uint64      the volume's Raft group
//	uuid, nguid                32 hex      identical on every node (multipath merge)
//	size                       int64       bytes hosts see
//	pending_size               int64       a resize in progress (0: none)
//	replica_sizes.<node>       int64       replica sizes reported during a resize
//	block_size                 int         4096
//	replicas                   []uint64    nodes holding a copy = group members
//	allow_any_host, hosts      bool, []    host access: the listed hosts, or any host
//	                                       only if allow_any_host (no hosts: nobody)
//	host_secrets.<host NQN>    object      that host's credentials, each optional:
//	                                       dhchap_secret, dhchap_ctrl_secret ("DHHC-1:..")
//	                                       and tls_psk ("NVMeTLSkey-1:.."); secrets
//	encryption                 string      "aes-xts-256", or absent (none)
//	kek                        string      ID of the KEK wrapped_key is under
//	wrapped_key                base64      the data key wrapped (pkg/crypt, 93 bytes);
//	                                       never in API views (Public)
//	ana_group                  uint32      1..128, unique in the cluster
//	state, created             string      "active"; RFC 3339 time of the request
//
// A Raft entry of the metadata group is one Command (JSON): op (one of the
// Op constants), req (the proposer's request ID, for its result), and the
// fields the op names: node, create, volume, id, node_id, size, host,
// secrets (add_host: the host's credentials, replacing what it had), allow
// (set_allow_any_host), rewrap (rewrap_keys: [{volume, from, kek,
// wrapped_key}], encryption.go). An
// entry that does not decode, or a command the state refuses (a volume that
// exists, a host that is not listed), changes nothing but is still applied
// (the index moves), and the refusal goes back to the proposer.
//
// Host secrets are in the state, its snapshots and the add_host entries of
// the log, so every node's metadata holds them; nothing else does: command
// results and API views carry Volume.Public, and HostSecrets prints (fmt,
// slog) only the mechanisms it holds.
//
// # Reconciler
//
// On every node, after every metadata change and every Config.Resync, the
// reconciler brings each volume with a replica here up: the local replica
// (Replicas: files, or volumes of the node's store, see pkg/node), the
// volume's Raft group
// (Replicator.OpenVolume), and the NVMe subsystem NQNPrefix+name with one
// namespace (NSID 1, the volume's NGUID, UUID and ANA group) restricted to
// its hosts, each with its credentials (target.HostSecrets; set before the
// host is admitted, changed in place on a rotation). A goroutine per volume follows the group's leader
// (Group.Watch) and sets the volume's ANA group on this node's port:
// optimized where this node leads, inaccessible elsewhere; the state is set
// before the namespace appears, because an unset state reads as optimized.
// Volumes that left the metadata are taken down and their replicas
// deleted; once the node's metadata has caught up with the leader (a read
// barrier), replicas of volumes deleted while the node was down are
// deleted too. Every other node's NVMe port is listed in the discovery log
// (port ID = node ID), so that nvme connect-all against any node connects
// every path.
//
// A resize is two-phase: the command records pending_size; every replica
// grows its local copy and reports it (OpReplicaGrown); once all have, size
// becomes pending_size and every node tells its hosts (Namespace Attribute
// Changed). No replica is ever asked to apply a write beyond its end.
//
// Membership changes (replacing a node, re-replicating) are not
// implemented; nodes carry an administrative state and volumes their
// replica list so that they can be.
package cluster
