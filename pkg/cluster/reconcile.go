package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
	"basalt/target"
)

// reconciler makes this node match the metadata: for every volume with a
// replica here, the local replica, the volume's Raft group, the NVMe
// subsystem that exports it and the goroutine that keeps its ANA state
// (optimized where the group's leader is, inaccessible elsewhere); for
// every volume, discovery log entries for the other nodes holding it. Its
// run loop is the only goroutine that changes vols.
type reconciler struct {
	c     *Cluster
	t     *target.Target
	fresh chan struct{} // capacity 1: the metadata has caught up once

	isFresh bool
	vols    map[GroupID]*localVolume
	wg      sync.WaitGroup // ANA watchers, size reports and teardowns
	kick    chan struct{}  // capacity 1: a teardown finished; reconcile again
	bal     balancer       // leader balance (balance.go)
	mv      mover          // replica moves (members.go)

	mu struct {
		sync.Mutex
		live     map[GroupID]*localVolume
		failures map[GroupID]string
		// removing maps the NQNs of volumes being taken down in the
		// background to their names: none is exported again until its
		// teardown is done.
		removing map[string]string
	}
}

// localVolume is one volume as this node serves it.
type localVolume struct {
	spec    atomic.Pointer[Volume] // as last reconciled; read by Local
	replica Replica
	group   Group
	repl    backend.Backend // the replicated volume, unwrapped
	export  *export
	subsys  *target.Subsystem
	stop    chan struct{} // closes the ANA watcher
	// reporting is set while a replica_grown report is in flight.
	reporting atomic.Bool
	// qosUnsupported: repl has no limits, which updateQoS logged (qos.go).
	qosUnsupported bool
}

func newReconciler(c *Cluster) *reconciler {
	r := &reconciler{c: c, t: c.cfg.Target, fresh: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		vols: map[GroupID]*localVolume{}}
	r.mu.live = map[GroupID]*localVolume{}
	r.mu.failures = map[GroupID]string{}
	r.mu.removing = map[string]string{}
	return r
}

func (r *reconciler) markFresh() {
	select {
	case r.fresh <- struct{}{}:
	default:
	}
}

// run reconciles after every metadata change and every Resync until ctx
// ends; the volumes stay up (teardownAll takes them down).
func (r *reconciler) run(ctx context.Context) {
	changed := r.c.m.Changed()
	tick := r.c.clock.NewTicker(r.c.cfg.Resync)
	defer tick.Stop()
	r.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.fresh:
			r.isFresh = true
		case <-changed:
		case <-r.kick:
		case <-tick.C():
		}
		r.reconcile(ctx)
	}
}

// teardownAll takes every volume down, keeping the replicas and logs,
// and waits for the teardowns still running in the background; run must
// have returned.
func (r *reconciler) teardownAll() {
	r.mv.wg.Wait() // the replica moves end with run's context
	for id, lv := range r.vols {
		r.teardown(lv, false)
		delete(r.vols, id)
	}
	r.wg.Wait()
}

// reconcile is one pass over the metadata.
func (r *reconciler) reconcile(ctx context.Context) {
	s := r.c.m.State()
	self := r.c.cfg.Self.ID
	r.setRemoteSubsystems(s)
	for id, lv := range r.vols {
		if v := s.VolumeByID(id); v == nil || !v.HasReplica(self) {
			r.c.log.Info("volume gone from this node: removing it", "volume", lv.spec.Load().Name, "group", id)
			r.teardownAsync(lv)
			delete(r.vols, id)
		}
	}
	for _, v := range s.VolumeList() {
		if !v.HasReplica(self) {
			continue
		}
		lv := r.vols[v.ID]
		var err error
		if lv == nil && r.beingRemoved(v.NQN()) {
			continue // set up on the pass after its old export is gone
		}
		if lv == nil {
			lv, err = r.setup(v)
			if err == nil {
				r.vols[v.ID] = lv
			}
		}
		if err == nil {
			err = r.update(ctx, lv, v)
		}
		r.setFailure(v, err)
	}
	if r.isFresh && !r.beingRemoved("") {
		r.deleteOrphans(s)
	}
	r.balance(s)
	r.publishPeers(s)
	r.tellPeers(s)
	r.moveReplicas(ctx, s)
}

// teardownAsync takes a deleted volume down in the background, its data
// included, so that one volume whose teardown waits (hosts in the middle
// of writes, a slow drive) never holds up the reconcile loop and with it
// every other volume on this node. When it is done it asks for another
// pass (a volume of the same name waits for that).
func (r *reconciler) teardownAsync(lv *localVolume) {
	v := lv.spec.Load()
	nqn := v.NQN()
	r.mu.Lock()
	r.mu.removing[nqn] = v.Name
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.teardown(lv, true)
		r.mu.Lock()
		delete(r.mu.removing, nqn)
		r.mu.Unlock()
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}()
}

// beingRemoved reports whether the volume exported as nqn is being taken
// down; with nqn "", whether any is.
func (r *reconciler) beingRemoved(nqn string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if nqn == "" {
		return len(r.mu.removing) > 0
	}
	_, ok := r.mu.removing[nqn]
	return ok
}

func (r *reconciler) setFailure(v *Volume, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.mu.failures[v.ID]
	if err == nil {
		delete(r.mu.failures, v.ID)
		return
	}
	r.mu.failures[v.ID] = err.Error()
	if old != err.Error() {
		r.c.log.Warn("volume not served here", "volume", v.Name, "err", err)
	}
}

// setup brings a volume up on this node; on error it undoes what it did.
func (r *reconciler) setup(v *Volume) (_ *localVolume, err error) {
	cfg := &r.c.cfg
	lv := &localVolume{stop: make(chan struct{})}
	lv.spec.Store(v.clone())
	var undo []func()
	defer func() {
		if err != nil {
			slices.Reverse(undo)
			for _, f := range undo {
				f()
			}
		}
	}()
	if lv.replica, err = r.openReplica(v); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = lv.replica.Close() })
	if lv.group, lv.repl, err = cfg.Replicator.OpenVolume(v.ID, v.Replicas, lv.replica); err != nil {
		return nil, fmt.Errorf("cluster: while starting the Raft group of %s: %w", v.Name, err)
	}
	repl := lv.repl
	// Setup fails after this point only while the node shuts down: keep
	// the group's log.
	undo = append(undo, func() { _ = cfg.Replicator.CloseVolume(v.ID, false) })
	if cfg.Wrap != nil {
		repl = cfg.Wrap(v, repl)
		if cfg.Unwrap != nil {
			undo = append(undo, func() { cfg.Unwrap(v) })
		}
	}
	lv.export = newExport(repl, v.Size)
	// The ANA state must be right before the namespace appears: an unset
	// state reads as optimized.
	r.t.SetANAState(v.ANAGroup, cfg.Port, anaState(lv.group.IsLeader()))
	if lv.subsys, err = r.addSubsystem(v, lv.export); err != nil {
		return nil, err
	}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.watchANA(lv) }()
	r.mu.Lock()
	r.mu.live[v.ID] = lv
	r.mu.Unlock()
	r.c.log.Info("volume served", "volume", v.Name, "group", v.ID, "ana_group", v.ANAGroup,
		"replicas", v.Replicas, "size", v.Size)
	return lv, nil
}

func (r *reconciler) addSubsystem(v *Volume, b backend.Backend) (*target.Subsystem, error) {
	sc := target.SubsystemConfig{
		NQN: v.NQN(), Serial: hex.EncodeToString(v.UUID[:10]), Model: "Basalt",
		AllowAnyHost: v.AllowAnyHost, Hosts: v.Hosts, Secrets: targetSecrets(v),
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: b, NGUID: v.NGUID, UUID: v.UUID, ANAGroup: v.ANAGroup}},
	}
	s, err := r.t.AddSubsystem(sc)
	if errors.Is(err, target.ErrExists) { // left over from an older volume of the same name
		if err = r.t.RemoveSubsystem(sc.NQN); err == nil {
			s, err = r.t.AddSubsystem(sc)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: while exporting %s: %w", v.Name, err)
	}
	return s, nil
}

func anaState(leader bool) nvme.ANAState {
	if leader {
		return nvme.ANAOptimized
	}
	return nvme.ANAInaccessible
}

// watchANA keeps the volume's ANA group optimized on this node's port
// while this node leads the volume's group, inaccessible otherwise, and
// for good once the group has stopped on this node.
func (r *reconciler) watchANA(lv *localVolume) {
	ch := lv.group.Watch()
	grp, port := lv.spec.Load().ANAGroup, r.c.cfg.Port
	r.t.SetANAState(grp, port, anaState(lv.group.IsLeader()))
	for {
		select {
		case <-lv.stop:
			return
		case leader, ok := <-ch:
			if !ok { // the group stopped here (an error): never optimized again
				r.t.SetANAState(grp, port, nvme.ANAInaccessible)
				return
			}
			r.t.SetANAState(grp, port, anaState(leader == r.c.cfg.Self.ID))
		}
	}
}

// update applies metadata changes to a served volume: hosts, growth, size.
func (r *reconciler) update(ctx context.Context, lv *localVolume, v *Volume) error {
	lv.spec.Store(v.clone())
	r.t.SetANAState(v.ANAGroup, r.c.cfg.Port, anaState(lv.group.IsLeader()))
	r.updateHosts(lv.subsys, v)
	r.updateQoS(lv, v) // qos.go
	if want := max(v.Size, v.PendingSize); lv.replica.Size() < want || lv.repl.Size() < want {
		if err := lv.grow(want); err != nil {
			return err
		}
	}
	if v.PendingSize > v.Size && v.ReplicaSizes[r.c.cfg.Self.ID] < min(lv.replica.Size(), lv.repl.Size()) {
		r.reportGrown(ctx, lv, v)
	}
	if lv.export.Size() != v.Size && v.Size <= min(lv.replica.Size(), lv.repl.Size()) {
		lv.export.size.Store(v.Size)
		if err := lv.subsys.NotifyNamespaceChanged(1); err != nil {
			return err
		}
		r.c.log.Info("volume resized", "volume", v.Name, "size", v.Size)
	}
	return nil
}

// grower is implemented by a replicated volume that can take a larger
// local replica.
type grower interface {
	Grow(size int64) error
}

// grow grows the local replica, then the replicated volume over it.
func (lv *localVolume) grow(size int64) error {
	g, ok := lv.repl.(grower)
	if !ok {
		return fmt.Errorf("%w: the replicated volume cannot grow yet; the resize waits", ErrUnsupported)
	}
	if err := lv.replica.Grow(size); err != nil {
		return err
	}
	return g.Grow(size)
}

// targetSecrets returns v's host credentials as the target holds them.
func targetSecrets(v *Volume) map[string]target.HostSecrets {
	if len(v.Secrets) == 0 {
		return nil
	}
	out := make(map[string]target.HostSecrets, len(v.Secrets))
	for h, sec := range v.Secrets {
		out[h] = sec.Target()
	}
	return out
}

// updateHosts makes the subsystem's hosts and their credentials v's. A
// host's new credentials are in place before it is admitted, and a
// removed host is refused before its credentials go; a rotation reaches
// the running subsystem at once (the next Connect or re-authentication
// uses it).
func (r *reconciler) updateHosts(s *target.Subsystem, v *Volume) {
	have, anyHost := s.Hosts()
	for _, h := range v.Hosts {
		want := v.Secrets[h].Target()
		if cur, _ := s.HostSecrets(h); cur != want {
			s.SetHostSecrets(h, want)
		}
	}
	if anyHost != v.AllowAnyHost {
		s.SetAllowAnyHost(v.AllowAnyHost)
	}
	for _, h := range v.Hosts {
		if !slices.Contains(have, h) {
			s.AllowHost(h)
		}
	}
	for _, h := range have {
		if !slices.Contains(v.Hosts, h) {
			s.DisallowHost(h)
			s.SetHostSecrets(h, target.HostSecrets{})
		}
	}
}

// reportGrown tells the metadata leader, in the background, that the
// local replica has grown.
func (r *reconciler) reportGrown(ctx context.Context, lv *localVolume, v *Volume) {
	if lv.reporting.Swap(true) {
		return
	}
	cmd := Command{Op: OpReplicaGrown, Volume: v.Name, ID: v.ID, NodeID: r.c.cfg.Self.ID,
		Size: min(lv.replica.Size(), lv.repl.Size())}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer lv.reporting.Store(false)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := r.c.Submit(sctx, cmd); err != nil {
			r.c.log.Debug("replica growth not recorded yet", "volume", v.Name, "err", err)
		}
	}()
}

// teardown takes a volume down; with deleteData its replica goes too.
func (r *reconciler) teardown(lv *localVolume, deleteData bool) {
	v, cfg := lv.spec.Load(), &r.c.cfg
	close(lv.stop)
	r.mu.Lock()
	delete(r.mu.live, v.ID)
	delete(r.mu.failures, v.ID)
	r.mu.Unlock()
	var errs []error
	if err := r.t.RemoveSubsystem(v.NQN()); err != nil && !errors.Is(err, target.ErrNotFound) {
		errs = append(errs, err)
	}
	errs = append(errs, cfg.Replicator.CloseVolume(v.ID, deleteData))
	if cfg.Unwrap != nil {
		cfg.Unwrap(v)
	}
	errs = append(errs, lv.replica.Flush(context.Background()), lv.replica.Close())
	if deleteData {
		errs = append(errs, cfg.Replicas.Delete(v.LocalName()))
	}
	if err := errors.Join(errs...); err != nil {
		r.c.log.Warn("volume teardown", "volume", v.Name, "err", err)
	}
}

// deleteOrphans deletes local replicas of volumes the metadata no longer
// places here (deleted while this node was down).
func (r *reconciler) deleteOrphans(s *State) {
	names, err := r.c.cfg.Replicas.List()
	if err != nil {
		r.c.log.Warn("listing local replicas", "err", err)
		return
	}
	keep, groups := map[string]bool{}, map[GroupID]bool{MetadataGroup: true}
	for _, v := range s.Volumes {
		if v.HasReplica(r.c.cfg.Self.ID) {
			keep[v.LocalName()], groups[v.ID] = true, true
		}
	}
	if err := r.c.cfg.Replicator.DropDormant(func(id GroupID) bool { return groups[id] }); err != nil {
		r.c.log.Warn("dropping the logs of deleted volumes", "err", err)
	}
	for _, name := range names {
		if !keep[name] {
			r.c.log.Info("deleting orphaned replica", "replica", name)
			if err := r.c.cfg.Replicas.Delete(name); err != nil {
				r.c.log.Warn("deleting orphaned replica", "replica", name, "err", err)
			}
		}
	}
}

// setRemoteSubsystems lists, in this node's discovery log, every volume
// on the ports of the other nodes holding a replica (remoteSubsystems), so
// that connect-all to this node reaches every path of every volume the
// host may use, held here or not. reconcile calls it on every pass: after
// every metadata change (volumes, replicas, hosts, node addresses) and
// every Resync.
func (r *reconciler) setRemoteSubsystems(s *State) {
	r.t.SetRemoteSubsystems(remoteSubsystems(s, r.c.Nodes(), r.c.cfg.Self.ID))
}
