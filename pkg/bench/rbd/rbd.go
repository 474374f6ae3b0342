//go:build ceph

package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include <stdint.h>
#include <stdlib.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

static int bench_submit(rbd_image_t img, int write, uint64_t off, size_t len, char *buf, uint64_t tag) {
	rbd_completion_t c;
	int r = rbd_aio_create_completion((void *)(uintptr_t)tag, NULL, &c);
	if (r < 0)
		return r;
	r = write ? rbd_aio_write(img, off, len, buf, c) : rbd_aio_read(img, off, len, buf, c);
	if (r < 0)
		rbd_aio_release(c);
	return r;
}

// bench_poll harvests up to n finished completions into tags and rets and
// releases them.
static int bench_poll(rbd_image_t img, rbd_completion_t *comps, uint64_t *tags, int64_t *rets, int n) {
	int got = rbd_poll_io_events(img, comps, n);
	for (int i = 0; i < got; i++) {
		tags[i] = (uint64_t)(uintptr_t)rbd_aio_get_arg(comps[i]);
		rets[i] = rbd_aio_get_return_value(comps[i]);
		rbd_aio_release(comps[i]);
	}
	return got;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"basalt/pkg/bench"
)

const pollBatch = 64

// Available reports whether RBD support is compiled in.
func Available() bool { return true }

// Device is an open RBD image.
type Device struct {
	cfg     Config
	cluster C.rados_t
	ioctx   C.rados_ioctx_t
	image   C.rbd_image_t
	size    int64
	efd     *os.File

	mu     sync.Mutex
	queues map[uint32]*queue
	nextID uint32
	done   chan struct{}
}

func rerr(what string, r C.int) error {
	return fmt.Errorf("rbd: %s: %w", what, syscall.Errno(-r))
}

// Open connects to the cluster and opens the image.
func Open(cfg Config) (bench.Device, error) {
	if cfg.ClientID == "" {
		cfg.ClientID = "admin"
	}
	d := &Device{cfg: cfg, queues: map[uint32]*queue{}, done: make(chan struct{})}
	if err := d.connect(); err != nil {
		d.shutdown()
		return nil, err
	}
	if err := d.openImage(); err != nil {
		d.shutdown()
		return nil, err
	}
	go d.harvest()
	return d, nil
}

func (d *Device) connect() error {
	id := C.CString(d.cfg.ClientID)
	defer C.free(unsafe.Pointer(id))
	if r := C.rados_create(&d.cluster, id); r < 0 {
		return rerr("rados_create", r)
	}
	var conf *C.char
	if d.cfg.Conf != "" {
		conf = C.CString(d.cfg.Conf)
		defer C.free(unsafe.Pointer(conf))
	}
	if r := C.rados_conf_read_file(d.cluster, conf); r < 0 {
		return rerr("reading "+d.cfg.Conf, r)
	}
	for k, v := range d.cfg.Options {
		ck, cv := C.CString(k), C.CString(v)
		r := C.rados_conf_set(d.cluster, ck, cv)
		C.free(unsafe.Pointer(ck))
		C.free(unsafe.Pointer(cv))
		if r < 0 {
			return rerr("setting "+k, r)
		}
	}
	if r := C.rados_connect(d.cluster); r < 0 {
		return rerr("rados_connect", r)
	}
	pool := C.CString(d.cfg.Pool)
	defer C.free(unsafe.Pointer(pool))
	if r := C.rados_ioctx_create(d.cluster, pool, &d.ioctx); r < 0 {
		d.ioctx = nil
		return rerr("opening pool "+d.cfg.Pool, r)
	}
	return nil
}

func (d *Device) openImage() error {
	name := C.CString(d.cfg.Image)
	defer C.free(unsafe.Pointer(name))
	if r := C.rbd_open(d.ioctx, name, &d.image, nil); r < 0 {
		d.image = nil
		return rerr("opening image "+d.cfg.Image, r)
	}
	var size C.uint64_t
	if r := C.rbd_get_size(d.image, &size); r < 0 {
		return rerr("rbd_get_size", r)
	}
	d.size = int64(size)
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("rbd: eventfd: %w", err)
	}
	d.efd = os.NewFile(uintptr(fd), "rbd-events")
	if r := C.rbd_set_image_notification(d.image, C.int(fd), C.EVENT_TYPE_EVENTFD); r < 0 {
		return rerr("rbd_set_image_notification", r)
	}
	return nil
}

// harvest waits on the eventfd and routes finished completions to their
// queues until Close.
func (d *Device) harvest() {
	defer close(d.done)
	comps := (*[pollBatch]C.rbd_completion_t)(C.malloc(C.size_t(pollBatch * unsafe.Sizeof(C.rbd_completion_t(nil)))))
	defer C.free(unsafe.Pointer(comps))
	var tags [pollBatch]C.uint64_t
	var rets [pollBatch]C.int64_t
	var b [8]byte
	for {
		if _, err := d.efd.Read(b[:]); err != nil {
			return // closed
		}
		for {
			n := int(C.bench_poll(d.image, &comps[0], &tags[0], &rets[0], pollBatch))
			if n <= 0 {
				break
			}
			d.mu.Lock()
			for i := range n {
				q := d.queues[uint32(tags[i]>>32)]
				if q != nil {
					q.done <- completion{slot: int(uint32(tags[i])), ret: int64(rets[i])}
				}
			}
			d.mu.Unlock()
		}
	}
}

// Describe implements bench.Device.
func (d *Device) Describe() string {
	return fmt.Sprintf("rbd %s/%s (client.%s, %s)", d.cfg.Pool, d.cfg.Image, d.cfg.ClientID, d.cfg.Conf)
}

// LBASize implements bench.Device: RBD is byte-addressed; 512 like krbd.
func (d *Device) LBASize() int { return 512 }

// Size implements bench.Device.
func (d *Device) Size() int64 { return d.size }

// MaxTransfer implements bench.Device.
func (d *Device) MaxTransfer() int { return 0 }

// Close closes the image and the cluster connection; no I/O may be in flight.
func (d *Device) Close() error {
	d.shutdown()
	return nil
}

func (d *Device) shutdown() {
	if d.image != nil {
		C.rbd_close(d.image)
		d.image = nil
	}
	if d.efd != nil {
		d.efd.Close()
		<-d.done
	}
	if d.ioctx != nil {
		C.rados_ioctx_destroy(d.ioctx)
		d.ioctx = nil
	}
	if d.cluster != nil {
		C.rados_shutdown(d.cluster)
		d.cluster = nil
	}
}

type completion struct {
	slot int
	ret  int64
}

// queue is one job's queue: submissions go straight to librbd.
type queue struct {
	d    *Device
	id   uint32
	done chan completion
	lens []int
}

// OpenQueue implements bench.Device.
func (d *Device) OpenQueue(depth int) (bench.Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextID++
	q := &queue{d: d, id: d.nextID, done: make(chan completion, depth), lens: make([]int, depth)}
	d.queues[q.id] = q
	return q, nil
}

func (q *queue) Queue(slot int, op bench.Op, off int64, buf []byte) error {
	write := C.int(0)
	if op == bench.OpWrite {
		write = 1
	}
	q.lens[slot] = len(buf)
	tag := C.uint64_t(uint64(q.id)<<32 | uint64(slot))
	if r := C.bench_submit(q.d.image, write, C.uint64_t(off), C.size_t(len(buf)), (*C.char)(unsafe.Pointer(&buf[0])), tag); r < 0 {
		return rerr("submitting "+op.String(), r)
	}
	return nil
}

func (q *queue) Flush() error { return nil }

func (q *queue) Wait(block bool) (int, error, bool) {
	var c completion
	if block {
		c = <-q.done
	} else {
		select {
		case c = <-q.done:
		default:
			return 0, nil, false
		}
	}
	switch {
	case c.ret < 0:
		return c.slot, rerr("I/O", C.int(c.ret)), true
	case c.ret != int64(q.lens[c.slot]) && c.ret != 0:
		return c.slot, fmt.Errorf("rbd: short I/O: %d of %d bytes", c.ret, q.lens[c.slot]), true
	}
	return c.slot, nil, true
}

func (q *queue) Close() error {
	q.d.mu.Lock()
	delete(q.d.queues, q.id)
	q.d.mu.Unlock()
	return nil
}
