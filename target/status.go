package target

import (
	"context"
	"errors"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// statusFromError maps a backend error to the NVMe status the host sees — the
// one place where storage errors become wire status (cf. nvmet's
// blk_to_nvme_status):
//
//	nil                     → Success
//	nvme.Status (wrapped)   → itself (a backend may answer in NVMe terms)
//	ErrOutOfRange           → 0x080 LBA Out of Range, DNR
//	ErrMisaligned           → 0x002 Invalid Field, DNR
//	ErrNoSpace              → 0x081 Capacity Exceeded, DNR
//	ErrReadOnly             → 0x020 Namespace Write Protected, DNR
//	ErrMedia                → 0x281 Unrecovered Read Error
//	ErrWriteFault           → 0x280 Write Fault
//	ErrInaccessible         → 0x302 ANA Inaccessible, no DNR: fail over
//	ErrTransition           → 0x303 ANA Transition, no DNR: fail over
//	ErrClosed               → 0x302 ANA Inaccessible (the volume left this node)
//	context errors, others  → 0x006 Internal Error, no DNR (retry)
//
// Path errors never carry DNR: the Linux host fails over only without it.
func statusFromError(err error) nvme.Status {
	if err == nil {
		return nvme.StatusSuccess
	}
	var st nvme.Status
	switch {
	case errors.As(err, &st):
		return st
	case errors.Is(err, backend.ErrInaccessible), errors.Is(err, backend.ErrClosed):
		return nvme.StatusANAInaccessible
	case errors.Is(err, backend.ErrTransition):
		return nvme.StatusANATransition
	case errors.Is(err, backend.ErrOutOfRange):
		return nvme.StatusLBAOutOfRange
	case errors.Is(err, backend.ErrMisaligned):
		return nvme.StatusInvalidField
	case errors.Is(err, backend.ErrNoSpace):
		return nvme.StatusCapacityExceeded
	case errors.Is(err, backend.ErrReadOnly):
		return nvme.StatusNamespaceWriteProtect
	case errors.Is(err, backend.ErrMedia):
		return nvme.StatusUnrecoveredReadError
	case errors.Is(err, backend.ErrWriteFault):
		return nvme.StatusWriteFault
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nvme.StatusInternalError
	default:
		return nvme.StatusInternalError
	}
}

// statusFor maps err and, on failure, records errLoc as the Parameter Error
// Location (and logs unexpected errors).
func (r *Request) statusFor(err error, errLoc uint16) nvme.Status {
	st := statusFromError(err)
	if !st.Success() {
		r.errLoc = errLoc
		if st == nvme.StatusInternalError && r.sq.ctx.Err() == nil {
			r.sq.t.log.Warn("backend error", "qid", r.sq.qid, "cid", r.Cmd.CID(),
				"opcode", r.Cmd.Opcode(), "nsid", r.Cmd.NSID(), "err", err)
		}
	}
	return st
}
