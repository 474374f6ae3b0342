package bench

import (
	"context"
	"fmt"
)

// VerifyReport is the outcome of checking a device against a journal.
type VerifyReport struct {
	Records   int   `json:"records"`    // valid journal records
	TornBytes int64 `json:"torn_bytes"` // ignored bytes at the journal's end
	InFlight  int   `json:"in_flight"`  // writes submitted but never acknowledged
	Checked   int64 `json:"checked"`    // units read and judged
	OK        int64 `json:"ok"`         // hold exactly the acknowledged generation
	Newer     int64 `json:"newer"`      // hold a newer generation that was in flight
	Unknown   int64 `json:"unknown"`    // nothing acknowledged: any content accepted
	Failed    int64 `json:"failed"`
	// Errors lists the first failures (at most maxReportedErrors).
	Errors []*VerifyError `json:"errors,omitempty"`
}

const (
	maxReportedErrors = 20
	checkChunk        = 128 << 10
	checkDepth        = 8
)

// VerifyJournal reads back every 4 KiB unit the journal at path has a
// record for and checks it: a unit must hold the generation last
// acknowledged, or a newer one that was in flight when the writer stopped
// (killed), never an older one, with a valid checksum and its own address.
// The returned error is non-nil only when the check itself could not run;
// failures are counted in the report.
func VerifyJournal(ctx context.Context, dev Device, path string) (*VerifyReport, error) {
	st, err := ReadJournal(path)
	if err != nil {
		return nil, err
	}
	rep, _, err := checkJournal(ctx, dev, st)
	return rep, err
}

// checkJournal verifies st against dev and also returns, per unit, the
// generation it was found to hold (0 when unknown).
func checkJournal(ctx context.Context, dev Device, st *JournalState) (*VerifyReport, []uint64, error) {
	h := st.Header
	rep := &VerifyReport{Records: st.Records, TornBytes: st.TornBytes, InFlight: len(st.Pending)}
	if dev.LBASize() != int(h.LBASize) || h.Offset+h.Size > dev.Size() {
		return rep, nil, fmt.Errorf("%w: journal covers [%d, +%d) with %d-byte LBAs; the device has %d bytes of %d-byte LBAs",
			ErrJournal, h.Offset, h.Size, h.LBASize, dev.Size(), dev.LBASize())
	}
	inflight := st.InFlight()
	chunk := checkChunk
	if mt := dev.MaxTransfer(); mt > 0 && mt < chunk {
		chunk = mt &^ (VerifyUnit - 1)
	}
	unitsPer := chunk / VerifyUnit
	var todo []int64 // chunk start units worth reading
	for u := 0; u < len(st.Acked); u += unitsPer {
		for i := u; i < min(u+unitsPer, len(st.Acked)); i++ {
			if st.Acked[i] != 0 || len(inflight[i]) > 0 {
				todo = append(todo, int64(u))
				break
			}
		}
	}
	found := make([]uint64, len(st.Acked))
	judge := func(u int64, buf []byte) {
		for i := 0; i < len(buf)/VerifyUnit; i++ {
			unit := int(u) + i
			acked, cands := st.Acked[unit], inflight[unit]
			if acked == 0 && len(cands) == 0 {
				continue
			}
			lba := uint64(h.Offset+int64(unit)*VerifyUnit) / uint64(h.LBASize)
			got, verr := judgeUnit(buf[i*VerifyUnit:], lba, h.Seed, acked, cands)
			rep.Checked++
			switch {
			case verr != nil:
				rep.Failed++
				if len(rep.Errors) < maxReportedErrors {
					rep.Errors = append(rep.Errors, verr)
				}
			case got == 0:
				rep.Unknown++
			case got == acked:
				rep.OK++
			default:
				rep.Newer++
			}
			found[unit] = got
		}
	}
	err := readChunks(ctx, dev, todo, chunk, h, len(st.Acked), judge)
	return rep, found, err
}

// readChunks reads the chunks starting at the given units, checkDepth at a
// time, and hands each to judge.
func readChunks(ctx context.Context, dev Device, todo []int64, chunk int, h JournalHeader, units int, judge func(int64, []byte)) error {
	q, err := dev.OpenQueue(checkDepth)
	if err != nil {
		return err
	}
	defer q.Close()
	bufs, err := AllocBuffers(checkDepth, chunk)
	if err != nil {
		return err
	}
	defer bufs.Free()
	slotUnit := make([]int64, checkDepth)
	next, inflight := 0, 0
	submit := func(slot int) error {
		u := todo[next]
		n := min(chunk, (units-int(u))*VerifyUnit)
		slotUnit[slot] = u
		next++
		inflight++
		return q.Queue(slot, OpRead, h.Offset+u*VerifyUnit, bufs.Each[slot][:n])
	}
	for slot := 0; slot < checkDepth && next < len(todo); slot++ {
		if err := submit(slot); err != nil {
			return err
		}
	}
	for inflight > 0 {
		if err := q.Flush(); err != nil {
			return err
		}
		slot, ioErr, _ := q.Wait(true)
		inflight--
		if ioErr != nil {
			return fmt.Errorf("%w: reading units from %d: %w", ErrIO, slotUnit[slot], ioErr)
		}
		u := slotUnit[slot]
		judge(u, bufs.Each[slot][:min(chunk, (units-int(u))*VerifyUnit)])
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if next < len(todo) {
			if err := submit(slot); err != nil {
				return err
			}
		}
	}
	return nil
}
