// Package api is the HTTP/JSON management API that every node of a
// cluster serves (with the Prometheus metrics at /metrics on the same
// port), and its Go client, which basaltctl uses.
//
//	method  path                                   answer
//	------  -------------------------------------  ------------------------------------------
//	GET     /v1/cluster                            ClusterView: health, metadata leader, counts
//	GET     /v1/nodes                              []NodeView: addresses, up, replicas, leading,
//	                                               scrub schedule (ScrubView: last completed,
//	                                               next due, progress, repaired/unrecoverable)
//	GET     /v1/volumes                            []VolumeView
//	POST    /v1/volumes                            201 VolumeView; body CreateVolumeRequest
//	                                               {"name","size" (bytes or "4GiB"),"rf","hosts",
//	                                               "allow_any_host"}; no hosts: nobody may connect;
//	                                               "qos" (qos.Limits); "compression" ("lz4",
//	                                               "zstd", "none": the default); "encryption"
//	                                               ("aes-xts-256" or "none", encryption.go;
//	                                               not with compression)
//	GET     /v1/volumes/{name}                     VolumeView: replicas, leader, ANA state
//	                                               per node (and its compression ratio),
//	                                               nvme connect commands, host_auth
//	PATCH   /v1/volumes/{name}                     VolumeView; body VolumeSettings {"allow_any_host"}
//	DELETE  /v1/volumes/{name}                     {"deleted": name}; the data goes everywhere
//	POST    /v1/volumes/{name}/resize              200, or 202 while replicas grow; body {"size"}
//	POST    /v1/volumes/{name}/hosts/{nqn}         AddHostView; optional body AddHostRequest
//	                                               {"dhchap_secret","dhchap_ctrl_secret","tls_psk",
//	                                               "generate"}: the host's credentials, replaced
//	                                               whole (rotation); generated ones returned once
//	DELETE  /v1/volumes/{name}/hosts/{nqn}         VolumeView (a note if no host is left); the
//	                                               host's credentials go with it
//	POST    /v1/volumes/{name}/qos                 VolumeView; body cluster.QoSChange: the I/O
//	                                               limits it names replace the volume's (qos.go)
//	GET     /v1/volumes/{name}/snapshots           SnapshotsView: name, order taken, pinned_bytes
//	POST    /v1/volumes/{name}/snapshots           201 SnapshotView; body {"name"}; 409 name taken
//	DELETE  /v1/volumes/{name}/snapshots/{snap}    SnapshotsView (those left)
//	POST    /v1/volumes/{name}/rollback            SnapshotsView; body {"snapshot","force"}; 409
//	                                               refused while a host is connected, unless force
//	                                               (snapshots.go: run on the volume's leader)
//	POST    /v1/cluster/rotate-kek                 RotateKEKView: every encrypted volume's data
//	                                               key re-wrapped under the newest KEK
//	GET     /v1/local                              LocalView: cluster.LocalStatus of the answering
//	                                               node and its scrub schedule
//	GET     /v1/drives                             DrivesView: this node's drive slots and rebuild
//	POST    /v1/drives/{slot}/fail                 DrivesView; the drive is taken out, rebuilt around
//	POST    /v1/drives/{slot}/replace              202 DrivesView; body {"path"}; rebuild starts
//	POST    /v1/nodes/{id}/drain                   cluster.Node; leaderships, then replicas, leave it
//	POST    /v1/nodes/{id}/maintenance             cluster.Node; it leads nothing, is never marked out
//	POST    /v1/nodes/{id}/activate                cluster.Node; active again
//	POST    /v1/nodes/{id}/replace                 202 cluster.Node; body {"with"}; its replicas move there
//	DELETE  /v1/nodes/{id}                         204; refused (400) while it holds a replica
//	POST    /v1/nodes/join                         201 JoinView; body JoinRequest (a new basaltd)
//	POST    /v1/internal/commands                  cluster.Result; nodes forward changes here
//	POST    /v1/internal/volumes/{group}/read      the bytes (octet-stream, X-Basalt-Reflects: the
//	                                               index they reflect nothing after) of this node's
//	                                               replica, once applied to body PeerReadRequest
//	                                               {"offset","length","min_index"} (waits 2 s at
//	                                               most: else 409 behind); 502 media: it cannot
//	                                               read them either (peer_read.go)
//	POST    /v1/internal/volumes/{group}/snapshots []cluster.SnapshotStatus; body
//	                                               cluster.SnapshotRequest, run on this node's
//	                                               replica only (404 no_replica_here, 503
//	                                               not_volume_leader: the caller asks another)
//	GET     /metrics                               Prometheus text format (pkg/metrics)
//
// A node serves the API over HTTPS (TLS 1.3, its node certificate) and
// authorizes every request (auth.go): reads need a token of any role,
// changes an admin token, the /v1/internal/ routes a node certificate of
// the cluster; /metrics a token unless [security] metrics_public.
// [security] insecure serves plain HTTP to anyone, for tests.
//
// Changes go to the metadata leader. A node that does not lead forwards
// the change itself (it sends the metadata command to the leader's
// /v1/internal/commands and relays the answer) rather than answering 307:
// clients, curl included, need not follow redirects with a body, and a
// change made during an election waits for the new leader (up to the
// request timeout) instead of failing. The leader runs forwarded commands
// itself and never forwards again.
//
// Reads are served from the answering node's metadata after a read
// barrier with the leader; when that fails (no quorum) the node answers
// from what it has and says so ("stale": true in /v1/cluster). Views that
// involve every node (health, ANA state per path) ask each node's
// /v1/local, in parallel, for at most 800 ms.
//
// Host credentials are secrets: no view, log line or error shows them.
// A volume's view says per host which mechanisms are configured
// (host_auth); the only answer that holds a secret is the one to the
// request that had the node generate it (AddHostView.Generated).
//
// Errors are JSON {"error": "...", "hint": "what to do", "code": "..."}
// with the HTTP status of their class:
//
//	code         status  when
//	-----------  ------  -----------------------------------------------
//	invalid      400     malformed body, bad name, size, rf, host NQN or secret; 405 too
//	not_found    404     no such volume, snapshot, host or endpoint
//	exists       409     the volume or snapshot name is taken
//	conflict     409     shrinking a volume
//	no_capacity  409     too few nodes for rf, or no ANA group left
//	not_leader   503     (with Retry-After) leadership moved
//	no_leader    503     (with Retry-After) no metadata leader: no quorum
//	refused      409     a rollback while a host is connected (without force)
//	not_volume_leader 503 (with Retry-After) no replica of the volume leads its
//	                     group now (starting, electing)
//	no_replica_here 404  node-only route: this node holds no replica
//	unsupported  501     the replica backend cannot do it
//	timeout      504     the change did not commit in time
//	internal     500     anything else; see the node's log
//	unauthenticated 401  no token, or one the node does not know (WWW-Authenticate)
//	forbidden    403     a read-only token on a change; a token, or no node
//	                     certificate, on a node-only route
package api
