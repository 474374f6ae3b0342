// Package sim is a deterministic simulation of a small Basalt replicated
// cluster, four nodes with three voters per volume, whose membership changes
// (after TigerBeetle's VOPR: the production code runs unchanged, only time,
// network and media are simulated).
//
// What runs for real: on each node, a replication Host (in manual mode),
// the pkg/volume Volumes of the volumes it holds a replica of, and a
// pkg/store Store whose volumes
// are the Volumes' local replicas, with its metadata in a pkg/meta DB
// (badger, in memory). The store runs in its simulated mode
// (store.Options.Simulated: no goroutines; the simulation runs its Work
// after every Poll and its Tick every TickInterval), either copying each
// write into a write buffer in volatile memory, as a cluster node's
// [store] buffer = "memory" does, or staging it by reference from the Raft
// log (store.Options.StageByReference); each seed draws one, -sim.store
// chooses. Erasure coding (3+1 or 4+2), destaging, the cleaner (its
// thresholds drawn so that some seeds relocate live blocks), checkpoints
// and recovery are the store's own.
//
// What is simulated: the clock (a clock.Manual), the network
// (replication.SimNetwork: delays, drops, duplicates, reordering,
// partitions), each node's Raft log region (pmem.Fake) and its drives
// (disk.MemDrive, behind disk.FaultDrive). Raft's randomised election timeouts come from
// crypto/rand, made deterministic with testing/cryptotest. One goroutine
// drives it all from one seed, so a failing seed replays exactly.
//
// Faults:
//   - Crashes: a node's Host and Store are dropped without Close. Its
//     power goes off at that instant (no persist, drive write, sync or
//     metadata transaction after it), and its media keep what a power loss
//     leaves: the Raft log region's crash image (pmem.Fake.CrashRegion:
//     persisted bytes plus random cache-line fragments), each drive's
//     synced blocks plus none, some or all of the unsynced ones, some torn
//     (disk.MemDrive.CrashClone), and the metadata's committed
//     transactions (badger commits synchronously). The restart reopens the
//     store on those drives and metadata (store.Open recovers), the Host on
//     the region image, and re-adds its volumes with volume.Add (a member
//     that joined: volume.Join; a log of a group it left is dropped); the
//     groups replay their logs after the compaction point.
//   - Power loss in the middle of a record: pmem.Fake.FailAfter cuts one of
//     the Raft log's next persists short; from then on the node's drives
//     and metadata take nothing either, and it crashes a little later.
//   - Blackouts: every node crashes at once, now and then during the run
//     and always at its end.
//   - Partitions and message loss (SimNetwork).
//   - Drive loss: a drive of a node fails for good (disk.FaultDrive.Fail),
//     at most as many per node as the stripes have parity; it stays failed
//     across the node's restarts, and the store runs degraded.
//
// Membership changes (membership_test.go; -sim.membership=false turns them
// off): each volume starts on nodes 1-3, node 4 is a spare. Now and then
// the schedule replaces a voter (live, crashed, or the leader) by a node
// outside the group, removes a voter and adds it back with an empty log,
// or grows the group to four voters and shrinks it back, the way a
// cluster's reconciler does: the new node joins (Host.JoinGroup), the
// leader adds it as a learner, promotes it once caught up in the same
// (joint) change that removes the leaving voter, after handing its
// leadership over when it leaves itself, and the removed node drops its
// replica (Host.RemoveGroup). ChangeMembers runs on a goroutine; the driver
// decides from the configuration the leader applied, never from the
// answer, so the seed alone fixes the run. Faults are aimed at the
// changes too: the leader crashes right after proposing one, the new
// member loses power before it caught up, the learner is cut off.
//
// The workload writes and trims random block ranges of two volumes through
// the leader's Volume and reads them back, while nodes crash and restart,
// partitions come and go, drives fail, leadership is transferred and the
// membership changes. The
// checks: every read returns, for each block, the last acknowledged write
// or a write whose outcome was unknown when the read started (so every
// acknowledged write reads back, through every failover, from the stores
// the reads reach; a read may fail, but never return wrong data); at most
// one leader per term; a committed configuration is never lost (the
// configuration the established leader applied only moves to one a change
// proposed since leads to); after every restart and every membership
// phase, a read of the whole volume through the leader, and the store
// replica of every member once it has applied the leader's commit index,
// hold every acknowledged write (membership_check_test.go); and at the end,
// once the network heals, every node is up and the changes in progress are
// done, the replicas of each volume's members, read from the nodes' stores,
// match the model and are equal byte for byte; then again after the final
// blackout and restart.
//
//	go test ./tests/sim                      # 4 fresh seeds
//	go test ./tests/sim -sim.seeds=200       # more seeds
//	go test ./tests/sim -sim.store=staged    # every seed stages by reference
//	go test ./tests/sim -sim.seed=1234 -v    # replay one seed, with its trace
//	go test ./tests/sim -sim.membership=false # no membership changes
package sim
