package node

import (
	"errors"
	"fmt"

	"basalt/pkg/cluster"
	"basalt/pkg/crypt"
	"basalt/pkg/store"
)

// loadKeyring reads the cluster's key-encryption keyring named by
// security.kek_file; none configured is a nil keyring (encrypted volumes
// are then neither created nor served by this node, each refusal saying
// why).
func loadKeyring(path string) (*crypt.Keyring, error) {
	if path == "" {
		return nil, nil
	}
	k, err := crypt.Load(path)
	if err != nil {
		return nil, fmt.Errorf("node: security.kek_file: %w", err)
	}
	return k, nil
}

// OpenEncrypted implements cluster.EncryptedReplicas: a new replica is
// created with the encryption and key; an existing one is given the key
// (the store keeps none across restarts) and must have that encryption.
func (r storeReplicas) OpenEncrypted(name string, size int64, encryption string, key []byte) (cluster.Replica, error) {
	v, err := r.s.Volume(name)
	switch {
	case err == nil:
		if v.Encryption() != encryption {
			return nil, fmt.Errorf("cluster: replica %s has encryption %q, the volume %q", name, v.Encryption(), encryption)
		}
		err = v.SetKey(key)
	case errors.Is(err, store.ErrNoVolume):
		v, err = r.s.CreateVolumeWith(name, size, store.VolumeOptions{Encryption: encryption, Key: key})
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: replica %s: %w", name, err)
	}
	return storeReplica{Volume: v, s: r.s}, nil
}
