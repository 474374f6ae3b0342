package node

import (
	"errors"
	"fmt"

	"basalt/pkg/cluster"
	"basalt/pkg/meta"
	"basalt/pkg/metrics"
	"basalt/pkg/store"
)

// storeSample converts the store's statistics (and those of its scrub
// schedule, sc, if any) for the metrics.
func storeSample(st *store.Store, sc *store.Scrubber) func() metrics.StoreSample {
	return func() metrics.StoreSample {
		s := st.Stats()
		out := metrics.StoreSample{
			CapacityBytes: s.CapacityBytes, UsedBytes: s.UsedBytes, BufferedBytes: s.BufferedBytes, Volumes: s.Volumes,
			FreeSegments: s.FreeSegments, OpenSegments: s.OpenSegments, SealedSegments: s.SealedSegments,
			BufferMode: s.BufferMode, BufferSize: s.BufferSize, BufferUsed: s.BufferUsed, BufferRecords: s.BufferRecords,
			HostBlocks: s.HostBlocks, DestagedBlocks: s.DestagedBlocks, RelocatedBlocks: s.RelocatedBlocks,
			PaddingBlocks: s.PaddingBlocks, GCRuns: s.GCRuns, WriteAmplification: s.WriteAmplification,
			DestageRate: s.DestageRate, Stripes: s.Stripes, Checkpoints: s.Checkpoints, DegradedReads: s.DegradedReads,
			Repairs: s.Repairs, Unrecoverable: s.Unrecoverable, Failed: s.Failed,
			DiscardedBytes: s.DiscardedBytes, DiscardErrors: s.DiscardErrors,
			CompressionLogicalBytes: s.CompressionLogicalBytes, CompressionStoredBytes: s.CompressionStoredBytes,
		}
		if sc != nil {
			out.Scrub = scrubSample(sc)
		}
		out.Rebuild = rebuildSample(st)
		for _, d := range s.Drives {
			out.Drives = append(out.Drives, metrics.DriveSample{Index: d.Index, State: d.State, Reads: d.Reads,
				Writes: d.Writes, Errors: d.Errors})
		}
		return out
	}
}

// metaPersister keeps the cluster metadata record in the node's metadata
// store (badger, under the key "cluster/state"; see pkg/meta cluster.go).
// Each Save is one synced transaction.
type metaPersister struct{ db *meta.DB }

func (p metaPersister) Load() ([]byte, bool, error) { return p.db.ClusterState() }

func (p metaPersister) Save(record []byte) error {
	return p.db.Update(func(tx *meta.Tx) error { return tx.PutClusterState(record) })
}

// storeReplicas keeps replicas as volumes of the node's log-structured
// store (thin: a replica takes space only for what was written).
type storeReplicas struct{ s *store.Store }

// Open implements cluster.Replicas.
func (r storeReplicas) Open(name string, size int64) (cluster.Replica, error) {
	return r.OpenWith(name, size, cluster.ReplicaOptions{})
}

// Delete implements cluster.Replicas.
func (r storeReplicas) Delete(name string) error {
	err := r.s.DeleteVolume(name)
	if err != nil && !errors.Is(err, store.ErrNoVolume) {
		return fmt.Errorf("cluster: while deleting replica %s: %w", name, err)
	}
	return nil
}

// List implements cluster.Replicas.
func (r storeReplicas) List() ([]string, error) {
	var out []string
	for _, v := range r.s.Volumes() {
		if !v.Deleted {
			out = append(out, v.Name)
		}
	}
	return out, nil
}

type storeReplica struct {
	*store.Volume
	s *store.Store
}

// Grow implements cluster.Replica: it grows the store volume in place (the
// new size is durable when it returns); a size at or below the current one
// changes nothing.
func (r storeReplica) Grow(size int64) error {
	if size <= r.Size() {
		return nil
	}
	if err := r.s.ResizeVolume(r.Name(), size); err != nil {
		return fmt.Errorf("cluster: while growing replica %s: %w", r.Name(), err)
	}
	return nil
}
