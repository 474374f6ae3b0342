package store

import (
	"bytes"
	"context"
	"fmt"

	"basalt/pkg/backend"
	"basalt/pkg/meta"
)

// stripeCheck counts what checking a stripe found, in blocks.
type stripeCheck struct {
	checked       int // blocks read and verified
	bad           int // blocks missing or failing their checksum on a healthy drive
	repaired      int // bad blocks rewritten
	unrecoverable int // rows with more bad blocks than parity
}

func (a *stripeCheck) add(b stripeCheck) {
	a.checked += b.checked
	a.bad += b.bad
	a.repaired += b.repaired
	a.unrecoverable += b.unrecoverable
}

// checkStripe reads stripe j of seg whole and verifies every block against
// the summary sum: each chunk's copy of the summary, data blocks against
// their entries, padding against zeros, parity against the parity sums. A
// row with at most parity bad blocks is reconstructed, and with repair the
// bad blocks on healthy drives are rewritten in place.
func (s *Store) checkStripe(seg meta.SegmentID, geom *segGeom, j int, sum *summary, repair bool) stripeCheck {
	sh := geom.shape
	width := sh.width()
	head := sh.summaryBlocks * BlockSize
	chunks := make([][]byte, width)
	readable := make([]bool, width)
	off := s.lay.chunkOffset(seg, j)
	for c := range width {
		bp := s.chunkBuffer()
		defer s.putChunkBuffer(bp)
		chunks[c] = *bp
		readable[c] = s.readDrive(geom.columns[sh.column(j, c)], chunks[c], off) == nil
	}
	var res stripeCheck
	canonical := make([]byte, head)
	encodeSummary(canonical, sum)
	for c := range width {
		if readable[c] && !bytes.Equal(chunks[c][:head], canonical) {
			res.bad++
			if repair && s.writeDrive(geom.columns[sh.column(j, c)], canonical, off, false) == nil {
				res.repaired++
			}
		}
	}
	slotSums := dataSums(sum)
	row := make([][]byte, width)
	sums := make([]uint32, width)
	for r := range sh.payload {
		start := head + r*BlockSize
		for c := range width {
			row[c] = chunks[c][start : start+BlockSize : start+BlockSize]
			if !readable[c] {
				row[c] = row[c][:0]
			}
			sums[c] = rowSum(sh, sum, slotSums, c, r)
		}
		res.add(s.checkRow(sh, geom, seg, j, r, row, sums, readable, repair))
	}
	return res
}

// rowSum is the checksum chunk c's block of row r must have.
func rowSum(sh *shape, sum *summary, slotSums []uint32, c, r int) uint32 {
	if c >= sh.data {
		return sum.paritySums[(c-sh.data)*sh.payload+r]
	}
	if q := c*sh.payload + r; q < len(slotSums) {
		return slotSums[q]
	}
	return zeroBlockSum
}

// checkRow verifies and, if needed, reconstructs and repairs one row.
func (s *Store) checkRow(sh *shape, geom *segGeom, seg meta.SegmentID, j, r int, row [][]byte,
	sums []uint32, readable []bool, repair bool) stripeCheck {
	var res stripeCheck
	var bad []int
	for c := range row {
		if len(row[c]) == 0 {
			bad = append(bad, c)
			continue
		}
		res.checked++
		if blockSum(row[c]) != sums[c] {
			bad = append(bad, c)
			res.bad++
		}
	}
	if len(bad) == 0 {
		return res
	}
	if len(bad) > sh.parity || sh.row.Reconstruct(row, sums) != nil {
		res.unrecoverable++
		return res
	}
	if !repair {
		return res
	}
	off := s.lay.chunkOffset(seg, j) + int64(sh.summaryBlocks+r)*BlockSize
	for _, c := range bad {
		if readable[c] && s.writeDrive(geom.columns[sh.column(j, c)], row[c], off, false) == nil {
			res.repaired++
		}
	}
	return res
}

// ScrubResult summarizes a scrub.
type ScrubResult struct {
	Segments      int // segments checked
	Stripes       int
	Blocks        int // blocks read and verified (summaries not counted)
	Bad           int // blocks found bad on healthy drives
	Repaired      int // bad blocks rewritten from parity
	Unrecoverable int // stripe rows beyond repair
}

// Scrub reads every written stripe of every segment in use and verifies
// every block (data, padding, parity, summary copies) against the
// checksums in the stripe's summary, repairing from parity what it can.
// progress, if not nil, is called after each segment with the segments done
// and the total. It returns an error wrapping backend.ErrMedia if some rows
// were beyond repair.
func (s *Store) Scrub(ctx context.Context, progress func(done, total int)) (ScrubResult, error) {
	if err := s.usable(); err != nil {
		return ScrubResult{}, err
	}
	var work []*segment
	for _, g := range s.segs {
		if g.getState() != meta.SegmentFree {
			work = append(work, g)
		}
	}
	var res ScrubResult
	var total stripeCheck
	var sum summary
	for i, g := range work {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		geom := g.geom.Load()
		if geom != nil && s.pin(g.id, geom.gen) {
			res.Segments++
			for j := range int(g.written.Load()) {
				if s.readSummary(g.id, geom, j, &sum) != nil {
					total.unrecoverable++
					continue
				}
				res.Stripes++
				total.add(s.checkStripe(g.id, geom, j, &sum, true /* repair */))
			}
			s.unpin(g.id)
		}
		if progress != nil {
			progress(i+1, len(work))
		}
	}
	res.Blocks, res.Bad, res.Repaired, res.Unrecoverable = total.checked, total.bad, total.repaired, total.unrecoverable
	s.counters.scrubbed.Add(uint64(total.checked))
	s.counters.repairs.Add(uint64(total.repaired))
	if res.Unrecoverable > 0 {
		return res, fmt.Errorf("%w: scrub found %d stripe rows beyond repair", backend.ErrMedia, res.Unrecoverable)
	}
	return res, nil
}
