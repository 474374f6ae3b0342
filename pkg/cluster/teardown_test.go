package cluster_test

import (
	"strings"
	"sync"
	"testing"

	"basalt/pkg/cluster"
)

// stuckReplicas wraps Replicas so that closing a replica whose name holds
// "stuck" waits until release is closed: a teardown that cannot finish.
type stuckReplicas struct {
	cluster.Replicas
	release chan struct{}
	closing chan string // one send per stuck Close that has begun
}

func (s *stuckReplicas) Open(name string, size int64) (cluster.Replica, error) {
	r, err := s.Replicas.Open(name, size)
	if err != nil || !strings.Contains(name, "stuck") {
		return r, err
	}
	return &stuckReplica{Replica: r, s: s}, nil
}

type stuckReplica struct {
	cluster.Replica
	s *stuckReplicas
}

func (r *stuckReplica) Close() error {
	r.s.closing <- "closing"
	<-r.s.release
	return r.Replica.Close()
}

// TestStuckTeardownDoesNotBlockOtherVolumes deletes a volume whose
// teardown cannot finish on any node and then creates another: every node
// serves the new volume while the old one is still being taken down, and
// the old one is gone once its teardown can finish. When the reconcile
// loop took volumes down inline, the new volume was never exported.
func TestStuckTeardownDoesNotBlockOtherVolumes(t *testing.T) {
	var wrappers []*stuckReplicas
	var mu sync.Mutex
	release := make(chan struct{})
	tc := newWrappedCluster(t, 3, func(r cluster.Replicas) cluster.Replicas {
		mu.Lock()
		defer mu.Unlock()
		w := &stuckReplicas{Replicas: r, release: release, closing: make(chan string, 16)}
		wrappers = append(wrappers, w)
		return w
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	if _, err := tc.submit(1, createCmd("stuck", 1<<20, 3)); err != nil {
		t.Fatal(err)
	}
	tc.eventually("every node serves stuck", func() bool { return tc.servedEverywhere("stuck") })
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "stuck"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ws := append([]*stuckReplicas(nil), wrappers...)
	mu.Unlock()
	for _, w := range ws {
		<-w.closing // every node's teardown of stuck is now waiting
	}
	if _, err := tc.submit(1, createCmd("fresh", 1<<20, 3)); err != nil {
		t.Fatal(err)
	}
	tc.eventually("every node serves fresh while stuck's teardown waits", func() bool {
		return tc.servedEverywhere("fresh")
	})
	close(release)
	released = true
	tc.eventually("stuck's replicas are deleted once their teardown finishes", func() bool {
		for _, tn := range tc.nodes {
			if names, _ := tn.replicas.List(); len(names) != 1 {
				return false
			}
		}
		return true
	})
}

// servedEverywhere reports whether every node exports the volume.
func (tc *testCluster) servedEverywhere(name string) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, tn := range tc.nodes {
		if tn.t.Subsystem(cluster.NQNPrefix+name) == nil {
			return false
		}
	}
	return true
}
