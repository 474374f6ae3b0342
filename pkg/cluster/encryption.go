package cluster

import (
	"context"
	"fmt"

	"basalt/pkg/crypt"
)

// Encryption at rest: a volume created with Encryption "aes-xts-256" gets
// a random data key, drawn by the node that builds the create command and
// carried in it only wrapped under the cluster's newest key-encryption key
// (package crypt; Config.Keys, read from security.kek_file), with that
// KEK's ID. Volume.WrappedKey is in the replicated metadata, so every node
// holds it; API views never show it (Public). Each node holding a replica
// unwraps the key with its own keyring when it opens the replica (setup)
// and hands it to its store (EncryptedReplicas), which encrypts the blocks
// before they reach the drives. OpRewrapKeys re-wraps data keys under a
// newer KEK (RotateKEK): no data is rewritten.

// EncryptionAESXTS256 is the one encryption a volume can have: AES-256 in
// XTS mode, a 64-byte data key per volume.
const EncryptionAESXTS256 = "aes-xts-256"

// OpRewrapKeys replaces volumes' wrapped data keys: Rewrap.
const OpRewrapKeys Op = "rewrap_keys"

// Rewrap is one volume's new wrapping in OpRewrapKeys. It applies only if
// the volume's key is still wrapped under From (a volume created or
// rewrapped meanwhile keeps what it has).
type Rewrap struct {
	Volume     string `json:"volume"`
	From       string `json:"from"`
	KEK        string `json:"kek"`
	WrappedKey []byte `json:"wrapped_key"`
}

// EncryptedReplicas is the Replicas of a node whose replicas can be
// encrypted: OpenEncrypted is Open of a replica with that encryption and
// data key (an existing replica must have that encryption).
type EncryptedReplicas interface {
	OpenEncrypted(name string, size int64, encryption string, key []byte) (Replica, error)
}

// ValidateEncryption checks a create command's encryption fields.
func ValidateEncryption(cv *CreateVolume) error {
	switch cv.Encryption {
	case "":
		if cv.KEK != "" || cv.WrappedKey != nil {
			return fmt.Errorf("%w: a data key for a volume without encryption", ErrInvalid)
		}
	case EncryptionAESXTS256:
		if cv.KEK == "" || len(cv.WrappedKey) != crypt.WrappedSize {
			return fmt.Errorf("%w: %s without a wrapped data key", ErrInvalid, cv.Encryption)
		}
		if cv.Compression != "" && cv.Compression != "none" {
			// The store's cipher sector is one block's LBA; a packed slot
			// holds several (pkg/store volume_options.go).
			return fmt.Errorf("%w: compression (%s) and encryption (%s) together are not supported",
				ErrInvalid, cv.Compression, cv.Encryption)
		}
	default:
		return fmt.Errorf("%w: encryption %q: want %s or none", ErrInvalid, cv.Encryption, EncryptionAESXTS256)
	}
	return nil
}

// Encrypt sets up cv (its UUID chosen) for encryption ("" or "none":
// nothing): a new data key wrapped under the newest KEK of this node's
// keyring. Without a keyring it fails wrapping crypt.ErrNoKEK.
func (c *Cluster) Encrypt(cv *CreateVolume, encryption string) error {
	if encryption == "" || encryption == "none" {
		return nil
	}
	if encryption != EncryptionAESXTS256 {
		return fmt.Errorf("%w: encryption %q: want %s or none", ErrInvalid, encryption, EncryptionAESXTS256)
	}
	key, err := crypt.NewDataKey()
	if err != nil {
		return err
	}
	defer clear(key)
	if cv.WrappedKey, cv.KEK, err = c.keys.Load().Wrap(key, cv.UUID); err != nil {
		return fmt.Errorf("cluster: volume %q: %w", cv.Name, err)
	}
	cv.Encryption = encryption
	return nil
}

// SetKeys replaces the keyring (a keyring file read again, with a KEK
// added or retired); volumes already served keep their keys.
func (c *Cluster) SetKeys(k *crypt.Keyring) { c.keys.Store(k) }

// NewestKEK returns the ID of the KEK this node wraps data keys under ("":
// no keyring).
func (c *Cluster) NewestKEK() string { return c.keys.Load().Newest() }

// RotateKEK re-wraps the data key of every encrypted volume not wrapped
// under this node's newest KEK, in one metadata command, and returns the
// volumes it re-wrapped. A volume whose key this keyring cannot unwrap
// fails the whole rotation, naming it.
func (c *Cluster) RotateKEK(ctx context.Context) ([]string, error) {
	newest := c.keys.Load().Newest()
	if newest == "" {
		return nil, fmt.Errorf("cluster: %w: no keyring configured (security.kek_file)", crypt.ErrNoKEK)
	}
	var out []Rewrap
	for _, v := range c.State().Volumes {
		if v.Encryption == "" || v.KEK == newest {
			continue
		}
		w, id, err := c.keys.Load().Rewrap(v.WrappedKey, v.KEK, v.UUID)
		if err != nil {
			return nil, fmt.Errorf("cluster: volume %q: %w", v.Name, err)
		}
		out = append(out, Rewrap{Volume: v.Name, From: v.KEK, KEK: id, WrappedKey: w})
	}
	names := make([]string, len(out))
	for i, r := range out {
		names[i] = r.Volume
	}
	if len(out) == 0 {
		return names, nil
	}
	if _, err := c.Submit(ctx, Command{Op: OpRewrapKeys, Rewrap: out}); err != nil {
		return nil, err
	}
	return names, nil
}

func validateRewrap(rs []Rewrap) error {
	if len(rs) == 0 {
		return fmt.Errorf("%w: %s names no volume", ErrInvalid, OpRewrapKeys)
	}
	for _, r := range rs {
		if err := ValidateVolumeName(r.Volume); err != nil {
			return err
		}
		if r.KEK == "" || r.From == "" || len(r.WrappedKey) != crypt.WrappedSize {
			return fmt.Errorf("%w: %s of %q without its keys", ErrInvalid, OpRewrapKeys, r.Volume)
		}
	}
	return nil
}

// rewrapKeys applies OpRewrapKeys.
func (s *State) rewrapKeys(rs []Rewrap) (Result, error) {
	for _, r := range rs {
		if v := s.Volumes[r.Volume]; v != nil && v.Encryption != "" && v.KEK == r.From {
			v.KEK, v.WrappedKey = r.KEK, r.WrappedKey
		}
	}
	return Result{}, nil
}

// openReplica opens v's local replica, with its data key unwrapped under
// this node's keyring if it is encrypted.
func (r *reconciler) openReplica(v *Volume) (Replica, error) {
	cfg := &r.c.cfg
	size := max(v.Size, v.PendingSize)
	if v.Encryption == "" {
		return openReplica(cfg.Replicas, v) // compression.go
	}
	er, ok := cfg.Replicas.(EncryptedReplicas)
	if !ok {
		return nil, fmt.Errorf("cluster: volume %q is encrypted (%s) and this node's replicas cannot be", v.Name, v.Encryption)
	}
	key, err := r.c.keys.Load().Unwrap(v.WrappedKey, v.KEK, v.UUID)
	if err != nil {
		return nil, fmt.Errorf("cluster: volume %q: %w", v.Name, err)
	}
	defer clear(key)
	return er.OpenEncrypted(v.LocalName(), size, v.Encryption, key)
}
