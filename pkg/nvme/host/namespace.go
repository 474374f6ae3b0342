package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"basalt/pkg/nvme"
)

// Namespace is an active namespace as the host's scan found it.
type Namespace struct {
	NSID      uint32
	BlockSize int    // LBA data size in bytes (512..4096)
	Blocks    uint64 // NSZE
	Identify  nvme.IdentifyNamespace
	IDs       NSIdentifiers // from CNS 03h (VS >= 1.3)
}

// Size returns the capacity in bytes.
func (n *Namespace) Size() int64 { return int64(n.Blocks) * int64(n.BlockSize) }

// namespaceTable is read on every I/O without locks: updates replace the
// whole map.
type namespaceTable struct {
	mu sync.Mutex // serializes scans
	m  atomic.Pointer[map[uint32]*Namespace]
}

func (t *namespaceTable) get(nsid uint32) *Namespace {
	if m := t.m.Load(); m != nil {
		return (*m)[nsid]
	}
	return nil
}

// Namespace returns the scanned namespace nsid.
func (c *Controller) Namespace(nsid uint32) (Namespace, bool) {
	if ns := c.namespaces.get(nsid); ns != nil {
		return *ns, true
	}
	return Namespace{}, false
}

// Namespaces returns the scanned namespaces in NSID order.
func (c *Controller) Namespaces() []Namespace {
	m := c.namespaces.m.Load()
	if m == nil {
		return nil
	}
	var out []Namespace
	for _, id := range slices.Sorted(maps.Keys(*m)) {
		out = append(out, *(*m)[id])
	}
	return out
}

// Rescan scans the namespaces again (the host also does it on a Namespace
// Attribute Changed event).
func (c *Controller) Rescan(ctx context.Context) error { return c.scanNamespaces(ctx) }

// scanNamespaces follows Linux nvme_scan_work: Identify CNS 06h (errors
// tolerated), the Active Namespace ID list (falling back to probing 1..NN if
// it fails with a status), then per namespace CNS 03h (VS >= 1.3; failure
// skips the namespace) and CNS 00h (NCAP 0 means absent).
func (c *Controller) scanNamespaces(ctx context.Context) error {
	c.namespaces.mu.Lock()
	defer c.namespaces.mu.Unlock()
	if c.vs >= 0x00010200 {
		if _, err := c.identify(ctx, nvme.CNSCSController, 0, 0); err != nil {
			if _, ok := StatusOf(err); !ok {
				return err
			}
			c.log.Debug("nvme host: Identify CNS 06h failed", "err", err)
		}
	}
	ids, err := c.ActiveNamespaces(ctx)
	if err != nil {
		if _, ok := StatusOf(err); !ok {
			return err
		}
		c.log.Warn("nvme host: active namespace list failed; probing 1..NN", "err", err)
		ids = nil
		for nsid := uint32(1); nsid <= c.id.NN && nsid < 1<<20; nsid++ {
			ids = append(ids, nsid)
		}
	}
	m := make(map[uint32]*Namespace, len(ids))
	for _, nsid := range ids {
		ns, err := c.probeNamespace(ctx, nsid)
		if err != nil {
			if errors.Is(err, ErrConnectionLost) || ctx.Err() != nil {
				return err
			}
			c.log.Warn("nvme host: namespace skipped", "nsid", nsid, "err", err)
			continue
		}
		if ns != nil {
			m[nsid] = ns
		}
	}
	c.namespaces.m.Store(&m)
	return nil
}

// probeNamespace returns nil, nil for an unallocated namespace.
func (c *Controller) probeNamespace(ctx context.Context, nsid uint32) (*Namespace, error) {
	ns := &Namespace{NSID: nsid}
	if c.vs >= 0x00010300 {
		ids, err := c.NSDescriptors(ctx, nsid)
		if err != nil && !errors.Is(err, ErrProtocol) {
			return nil, fmt.Errorf("Identify NS descriptors: %w", err)
		}
		if err != nil {
			c.log.Warn("nvme host: bogus namespace descriptor", "nsid", nsid, "err", err)
		}
		ns.IDs = ids
	}
	id, err := c.IdentifyNamespace(ctx, nsid)
	if err != nil {
		return nil, err
	}
	if id.NCAP == 0 {
		return nil, nil
	}
	if id.LBADS < 9 || id.LBADS > 12 {
		return nil, fmt.Errorf("%w: LBA data size 2^%d is outside 512..4096", ErrIncompatible, id.LBADS)
	}
	ns.Identify, ns.BlockSize, ns.Blocks = id, 1<<id.LBADS, id.NSZE
	return ns, nil
}
