//go:build !ceph

package rbd

import "basalt/pkg/bench"

// Open fails: RBD support is not compiled in.
func Open(Config) (bench.Device, error) { return nil, ErrNotBuilt }

// Available reports whether RBD support is compiled in.
func Available() bool { return false }
