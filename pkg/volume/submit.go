package volume

import "basalt/pkg/backend"

var (
	_ backend.SubmitCopier = (*Volume)(nil)
	_ backend.SubmitCopier = (*Counted)(nil)
)

// CopiesOnSubmit implements backend.SubmitCopier: WriteAtAsync is done with
// p when it returns. Every path that fails before the proposal reads only
// len(p); the one that proposes copies p into the entry (encodeOp) before
// ProposeEntryAsync, which queues that entry, waiting for queue room if it
// must, and never sees p.
func (v *Volume) CopiesOnSubmit() bool { return true }

// CopiesOnSubmit implements backend.SubmitCopier: as the counted backend
// (WriteAtAsync keeps nothing of p but its length).
func (c *Counted) CopiesOnSubmit() bool { return backend.CopiesOnSubmit(c.Backend) }
