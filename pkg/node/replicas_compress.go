package node

import (
	"errors"
	"fmt"

	"basalt/pkg/cluster"
	"basalt/pkg/compress"
	"basalt/pkg/store"
)

// OpenWith implements cluster.ReplicasWithOptions: a replica created here
// takes the volume's compression; an existing one keeps the setting it was
// created with.
func (r storeReplicas) OpenWith(name string, size int64, o cluster.ReplicaOptions) (cluster.Replica, error) {
	alg, err := compress.ParseAlgorithm(o.Compression)
	if err != nil {
		return nil, fmt.Errorf("cluster: replica %s: %w", name, err)
	}
	v, err := r.s.Volume(name)
	if errors.Is(err, store.ErrNoVolume) {
		v, err = r.s.CreateVolumeWith(name, size, store.VolumeOptions{Compression: alg})
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: replica %s: %w", name, err)
	}
	return storeReplica{Volume: v, s: r.s}, nil
}
