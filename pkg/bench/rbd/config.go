// Package rbd is basalt-bench's Ceph RBD backend: the same load generator
// drives a Ceph image through librbd's asynchronous C API, so that Basalt
// and Ceph are measured by one tool. It needs cgo and librbd (Debian:
// librbd-dev, librados-dev) and is built only with the `ceph` build tag;
// without it Open returns ErrNotBuilt, so `go build ./...` never needs
// librbd.
//
// Completions are collected the way fio's rbd engine does with
// rbd_poll_io_events: the image signals an eventfd, one goroutine per image
// harvests finished completions in batches and hands each to the queue
// that submitted it. I/O buffers live outside the Go heap (bench.Buffers),
// so librbd may hold them while an I/O is in flight.
package rbd

import "errors"

// ErrNotBuilt: this binary was built without the `ceph` tag.
var ErrNotBuilt = errors.New("rbd: built without RBD support (rebuild with -tags ceph and librbd-dev)")

// Config names an RBD image.
type Config struct {
	Conf     string // ceph.conf path (default: librados' search path)
	ClientID string // cephx user without "client." (default "admin")
	Pool     string
	Image    string
	// Options are extra configuration settings applied before connecting,
	// e.g. {"rbd_cache": "false"}.
	Options map[string]string
}
