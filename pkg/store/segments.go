package store

import (
	"fmt"
	"sync/atomic"

	"basalt/ec"
	"basalt/pkg/meta"
)

// Streams: what an open segment receives.
const (
	streamHost uint8 = 1 // destaged host writes
	streamGC   uint8 = 2 // blocks relocated by the cleaner or re-striping
)

// segGeom is what readers need to find a block in a segment: immutable for
// one life of the segment, replaced (never modified) when it is reopened.
type segGeom struct {
	gen     uint32
	shape   *shape
	columns []int // drive index of each column
}

// hasDrive reports whether the segment uses drive d.
func (g *segGeom) hasDrive(d int) bool {
	for _, c := range g.columns {
		if c == d {
			return true
		}
	}
	return false
}

// segment is one row of the in-memory segment table.
//
// geom, live, written, pins and state are read by any goroutine. The other
// fields belong to the writer goroutine (and to recovery, before it starts).
type segment struct {
	id   meta.SegmentID
	geom atomic.Pointer[segGeom] // nil while free
	// live counts map entries pointing into the segment.
	live atomic.Int64
	// written counts the stripes written and applied; stripes beyond it
	// hold nothing the maps point at.
	written atomic.Int32
	// fragments counts the data entries of its applied stripes beyond
	// their data slots (packed slots hold several); runtime only.
	fragments atomic.Int64
	// pins counts scrubs, repairs and rebuilds working on the segment; a
	// pinned segment is not freed. Changed under Store.segMu.
	pins  atomic.Int32
	state atomic.Uint32 // meta.SegmentState

	gen      uint32
	allocSeq uint64
	sealSeq  uint64
	lastSeq  uint64 // sequence of the last stripe written
	stream   uint8
	// broken is set when the cleaner met a block it could not read back:
	// the segment is not chosen again, nor freed.
	broken bool
	// cleaning is set once the cleaner has copied the segment's live blocks
	// into its stream, until that stream's stripes are written and applied:
	// the segment still counts them live meanwhile, but must not be chosen
	// again.
	cleaning bool
	// openTicket is the segRows ticket of the row that opened the segment.
	openTicket uint64
}

func (g *segment) getState() meta.SegmentState { return meta.SegmentState(g.state.Load()) }

// info returns the segment's metadata row.
func (g *segment) info() meta.SegmentInfo {
	info := meta.SegmentInfo{ID: g.id, State: g.getState(), Gen: g.gen, AllocSeq: g.allocSeq,
		SealSeq: g.sealSeq, Stream: g.stream, Stripes: int(g.written.Load())}
	if geom := g.geom.Load(); geom != nil {
		info.Data, info.Parity = geom.shape.data, geom.shape.parity
		for _, c := range geom.columns {
			info.Columns = append(info.Columns, uint32(c))
		}
	}
	return info
}

// loadSegments builds the segment table from the metadata rows.
func (s *Store) loadSegments() error {
	rows, err := s.meta.Segments()
	if err != nil {
		return err
	}
	s.segs = make([]*segment, s.lay.segments)
	for i := range s.segs {
		s.segs[i] = &segment{id: meta.SegmentID(i)}
	}
	for _, r := range rows {
		if int(r.ID) >= len(s.segs) {
			return fmt.Errorf("%w: segment row %v beyond %d segments", ErrCorrupt, r.ID, len(s.segs))
		}
		g := s.segs[r.ID]
		g.gen, g.allocSeq, g.sealSeq, g.stream = r.Gen, r.AllocSeq, r.SealSeq, r.Stream
		g.written.Store(int32(r.Stripes))
		g.state.Store(uint32(r.State))
		if r.State == meta.SegmentFree {
			continue
		}
		geom, err := s.geomFromRow(r)
		if err != nil {
			return err
		}
		g.geom.Store(geom)
	}
	return nil
}

func (s *Store) geomFromRow(r meta.SegmentInfo) (*segGeom, error) {
	if r.Data < 1 || r.Data > s.node.Data || r.Parity != s.node.Parity || len(r.Columns) != r.Data+r.Parity {
		return nil, fmt.Errorf("%w: segment %v has geometry %d+%d over %d columns", ErrCorrupt, r.ID,
			r.Data, r.Parity, len(r.Columns))
	}
	geom := &segGeom{gen: r.Gen, shape: s.lay.shape(r.Data)}
	for _, c := range r.Columns {
		if int(c) >= len(s.drives) {
			return nil, fmt.Errorf("%w: segment %v uses drive %d", ErrCorrupt, r.ID, c)
		}
		geom.columns = append(geom.columns, int(c))
	}
	return geom, nil
}

// newGeometry returns the shape and columns for a segment opened now: the
// configured geometry over healthy drives, narrower when drives are lost
// (ec.Narrower), rotating over the drives when there are more than needed.
func (s *Store) newGeometry(id meta.SegmentID) (*shape, []int, error) {
	healthy := s.healthyDrives()
	g, err := ec.Narrower(ec.Geometry{Data: s.node.Data, Parity: s.node.Parity, ChunkSize: s.node.ChunkSize},
		len(healthy))
	if err != nil {
		return nil, nil, err
	}
	columns := make([]int, g.Width())
	for i := range columns {
		columns[i] = healthy[(int(id)+i)%len(healthy)]
	}
	return s.lay.shape(g.Data), columns, nil
}

// pin keeps segment id in its life gen from being freed; it reports false
// if the segment has been freed or reopened since.
func (s *Store) pin(id meta.SegmentID, gen uint32) bool {
	s.segMu.Lock()
	defer s.segMu.Unlock()
	g := s.segs[id]
	geom := g.geom.Load()
	if geom == nil || geom.gen != gen {
		return false
	}
	g.pins.Add(1)
	return true
}

func (s *Store) unpin(id meta.SegmentID) { s.segs[id].pins.Add(-1) }
