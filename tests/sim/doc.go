// Package sim is a deterministic simulation of a three-node Basalt
// replication cluster (after TigerBeetle's VOPR: the production code runs
// unchanged, only time, network and media are simulated).
//
// One goroutine drives three replication Hosts in manual mode, a simulated
// network (replication.SimNetwork: delays, drops, duplicates, reordering,
// partitions), persistent-memory write buffers that crash (pmem.Fake crash
// images, power loss in the middle of a record) and local replicas that lose
// unflushed writes in a crash, all from one seed: a failing seed replays
// exactly. Time is a clock.Manual; Raft's randomised election timeouts come
// from crypto/rand, made deterministic with testing/cryptotest.
//
// The workload writes and trims random block ranges of two volumes through
// the leader's Volume and reads them back, while nodes crash and restart,
// partitions come and go, and leadership is transferred. The checks: every
// read returns, for each block, the last acknowledged write or a write whose
// outcome was unknown when the read started (so every acknowledged write
// reads back, through every failover); at most one leader per term; and at
// the end, once the network heals and every node is up, the three replicas of
// each volume are equal byte for byte and match the model.
//
//	go test ./tests/sim                      # the default seeds
//	go test ./tests/sim -sim.seeds=200       # more seeds
//	go test ./tests/sim -sim.seed=1234 -v    # replay one seed, with its trace
package sim
