package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// NVM Command Set 1.0 §3.2.4, §3.2.6: Write then Read returns the data, with
// in-capsule and R2T-style (transport SGL) writes, on 512 B and 4 KiB
// namespaces, up to MDTS.
func TestReadWriteRoundTrip(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]
	for _, tc := range []struct {
		nsid      uint32
		bs        int
		slba      uint64
		nlb       uint16
		inCapsule bool
	}{
		{1, 512, 0, 0, true},
		{1, 512, 100, 15, true},    // 8 KiB: the in-capsule limit
		{1, 512, 2000, 16, false},  // 8.5 KiB: via R2T
		{1, 512, 1792, 255, false}, // 128 KiB = MDTS, ends at the last LBA
		{2, 4096, 511, 0, true},
		{2, 4096, 3, 31, false},
	} {
		data := pattern((int(tc.nlb)+1)*tc.bs, byte(tc.slba))
		w := rwCmd(nvme.IOWrite, tc.nsid, tc.slba, tc.nlb, tc.bs)
		if tc.inCapsule {
			w.SetSGL(0, uint32(len(data)), nvme.SGLDataBlockOffset)
		}
		q.mustDo(t, w, data)
		_, got := a.io[1].mustDo(t, rwCmd(nvme.IORead, tc.nsid, tc.slba, tc.nlb, tc.bs), nil)
		if !bytes.Equal(got, data) {
			t.Fatalf("%+v: read back differs", tc)
		}
	}
	if st := env.tgt.Stats(); st.ReadCommands != 6 || st.WriteCommands != 6 || st.BytesRead != st.BytesWritten {
		t.Fatalf("stats %+v", st)
	}
}

// The checks every I/O command passes, with the status (and DNR) the Linux
// host expects.
func TestIOErrors(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]
	mod := func(c nvme.Command, f func(*nvme.Command)) nvme.Command { f(&c); return c }
	tests := []struct {
		name string
		cmd  nvme.Command
		data []byte
		want nvme.Status
	}{
		{"LBA out of range", rwCmd(nvme.IORead, 1, 2047, 1, 512), nil, nvme.StatusLBAOutOfRange},
		{"SLBA beyond NSZE", rwCmd(nvme.IOWrite, 1, 1<<40, 0, 512), nil, nvme.StatusLBAOutOfRange},
		{"SLBA+NLB wraps", rwCmd(nvme.IORead, 2, ^uint64(0), 1, 4096), nil, nvme.StatusLBAOutOfRange},
		{"inactive NSID", rwCmd(nvme.IORead, 3, 0, 0, 512), nil, nvme.StatusInvalidField},
		{"NSID above NN", rwCmd(nvme.IORead, 129, 0, 0, 512), nil, nvme.StatusInvalidNamespace},
		{"NSID 0", rwCmd(nvme.IORead, 0, 0, 0, 512), nil, nvme.StatusInvalidNamespace},
		{"NSID all (read)", rwCmd(nvme.IORead, nvme.NSIDAll, 0, 0, 512), nil, nvme.StatusInvalidNamespace},
		{"SGL length short", mod(rwCmd(nvme.IORead, 1, 0, 1, 512), func(c *nvme.Command) {
			c.SetSGL(0, 512, nvme.SGLTransportDataBlock)
		}), nil, nvme.StatusDataSGLLengthInvalid},
		{"SGL length long", mod(rwCmd(nvme.IOWrite, 1, 0, 0, 512), func(c *nvme.Command) {
			c.SetSGL(0, 1024, nvme.SGLTransportDataBlock)
		}), nil, nvme.StatusDataSGLLengthInvalid},
		{"transfer > MDTS", rwCmd(nvme.IORead, 2, 0, 32, 4096), nil, nvme.StatusInvalidField},
		{"in-capsule above ICD", mod(rwCmd(nvme.IOWrite, 1, 0, 16, 512), func(c *nvme.Command) {
			c.SetSGL(0, 17*512, nvme.SGLDataBlockOffset)
		}), nil, nvme.StatusSGLOffsetInvalid},
		{"in-capsule offset", mod(rwCmd(nvme.IOWrite, 1, 0, 0, 512), func(c *nvme.Command) {
			c.SetSGL(8, 512, nvme.SGLDataBlockOffset)
		}), nil, nvme.StatusSGLOffsetInvalid},
		{"in-capsule read", mod(rwCmd(nvme.IORead, 1, 0, 0, 512), func(c *nvme.Command) {
			c.SetSGL(0, 512, nvme.SGLDataBlockOffset)
		}), nil, nvme.StatusInvalidField},
		{"keyed SGL", mod(rwCmd(nvme.IORead, 1, 0, 0, 512), func(c *nvme.Command) {
			c.SetSGL(0, 512, 0x40)
		}), nil, nvme.StatusSGLTypeInvalid},
		{"flush with data", mod(newCmd(nvme.IOFlush), func(c *nvme.Command) {
			c.SetNSID(1)
			c.SetSGL(0, 512, nvme.SGLTransportDataBlock)
		}), nil, nvme.StatusDataSGLLengthInvalid},
		{"fused", mod(rwCmd(nvme.IORead, 1, 0, 0, 512), func(c *nvme.Command) { c[1] |= 1 }), nil, nvme.StatusInvalidField},
		{"PRP", mod(rwCmd(nvme.IORead, 1, 0, 0, 512), func(c *nvme.Command) { c[1] = 0 }), nil, nvme.StatusInvalidField},
		{"compare", rwCmd(nvme.IOCompare, 1, 0, 0, 512), nil, nvme.StatusInvalidOpcode},
		{"admin opcode on I/O queue", identifyCmd(nvme.CNSController, 0, 0), nil, nvme.StatusInvalidOpcode},
		{"write zeroes out of range", rwCmd(nvme.IOWriteZeroes, 1, 2047, 1, 0), nil, nvme.StatusLBAOutOfRange},
	}
	for _, tc := range tests {
		cpl, _ := q.do(t, tc.cmd, tc.data)
		expectStatus(t, tc.name, cpl, tc.want)
		if !cpl.Status.DNR() {
			t.Fatalf("%s: %v without DNR", tc.name, cpl.Status)
		}
	}
}

// FUA reaches the backend; Flush flushes; a disabled write cache makes every
// write FUA; Flush NSID FFFFFFFFh flushes every namespace.
func TestWriteFUAAndFlush(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]
	be := env.be[1]
	q.mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 0, 512), make([]byte, 512))
	fua := rwCmd(nvme.IOWrite, 1, 0, 0, 512)
	fua.SetCDW(12, fua.CDW(12)|nvme.RWFUA)
	q.mustDo(t, fua, make([]byte, 512))
	if be.writes.Load() != 2 || be.fuaWrites.Load() != 1 {
		t.Fatalf("writes %d FUA %d", be.writes.Load(), be.fuaWrites.Load())
	}
	a.admin.mustDo(t, setFeatCmd(nvme.FeatVolatileWC, 0), nil)
	q.mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 0, 512), make([]byte, 512))
	if be.fuaWrites.Load() != 2 {
		t.Fatal("write with the cache disabled was not FUA")
	}
	flush := newCmd(nvme.IOFlush)
	flush.SetNSID(1)
	q.mustDo(t, flush, nil)
	if be.flushes.Load() != 1 || env.be[2].flushes.Load() != 0 {
		t.Fatal("flush of NSID 1")
	}
	flush.SetNSID(nvme.NSIDAll)
	q.mustDo(t, flush, nil)
	if be.flushes.Load() != 2 || env.be[2].flushes.Load() != 1 {
		t.Fatal("broadcast flush")
	}
	env.be[2].setErr(backend.ErrWriteFault)
	cpl, _ := q.do(t, flush, nil)
	expectStatus(t, "broadcast flush failure", cpl, nvme.StatusWriteFault)
}

// NVM Command Set 1.0 §3.2.3: DSM carries a 4096-byte payload whatever NR is
// (the Linux host always sends the whole range list); only NR+1 ranges are
// parsed; every range is checked before any is trimmed; without AD nothing
// happens.
func TestDatasetManagement(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]
	be := env.be[1]
	q.mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 63, 512), pattern(64*512, 1))
	dsm := func(nr int, attr uint32, ranges []nvme.DSMRange, sgl uint32) nvme.Command {
		c := newCmd(nvme.IODatasetMgmt)
		c.SetNSID(1)
		c.SetCDW(10, uint32(nr-1))
		c.SetCDW(11, attr)
		c.SetSGL(0, sgl, nvme.SGLTransportDataBlock)
		return c
	}
	payload := func(ranges ...nvme.DSMRange) []byte {
		b := make([]byte, 4096)
		for i, r := range ranges {
			nvme.EncodeDSMRange(b, i, r)
		}
		return b
	}
	// NR = 1 (2 ranges), 4096-byte payload with a third range that must be ignored.
	p := payload(nvme.DSMRange{SLBA: 8, NLB: 8}, nvme.DSMRange{SLBA: 32, NLB: 4}, nvme.DSMRange{SLBA: 0, NLB: 64})
	q.mustDo(t, dsm(2, nvme.DSMAttrDeallocate, nil, 4096), p)
	_, got := q.mustDo(t, rwCmd(nvme.IORead, 1, 0, 63, 512), nil)
	want := pattern(64*512, 1)
	clear(want[8*512 : 16*512])
	clear(want[32*512 : 36*512])
	if !bytes.Equal(got, want) || be.trims.Load() != 2 {
		t.Fatalf("after DSM: %d trims, data ok %v", be.trims.Load(), bytes.Equal(got, want))
	}
	// Minimal payload (NR+1)*16 is accepted too; less is not.
	q.mustDo(t, dsm(1, nvme.DSMAttrDeallocate, nil, 16), payload(nvme.DSMRange{SLBA: 0, NLB: 0}))
	cpl, _ := q.do(t, dsm(2, nvme.DSMAttrDeallocate, nil, 16), make([]byte, 16))
	expectStatus(t, "short DSM payload", cpl, nvme.StatusDataSGLLengthInvalid)
	// One range out of bounds: nothing is trimmed.
	trims := be.trims.Load()
	cpl, _ = q.do(t, dsm(2, nvme.DSMAttrDeallocate, nil, 4096), payload(nvme.DSMRange{SLBA: 0, NLB: 1}, nvme.DSMRange{SLBA: 2040, NLB: 9}))
	expectStatus(t, "DSM range out of bounds", cpl, nvme.StatusLBAOutOfRange)
	if be.trims.Load() != trims {
		t.Fatal("DSM trimmed before validating all ranges")
	}
	// Without AD (only IDR/IDW hints) it is a successful no-op.
	q.mustDo(t, dsm(1, 0x3, nil, 4096), payload(nvme.DSMRange{SLBA: 0, NLB: 64}))
	if be.trims.Load() != trims {
		t.Fatal("DSM without AD trimmed")
	}
	// Write Zeroes (with and without DEAC) zeroes the range.
	q.mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 63, 512), pattern(64*512, 9))
	wz := rwCmd(nvme.IOWriteZeroes, 1, 4, 3, 512)
	wz.SetSGL(0, 0, nvme.SGLTransportDataBlock)
	wz.SetCDW(12, wz.CDW(12)|nvme.WZDEAC)
	q.mustDo(t, wz, nil)
	wz = rwCmd(nvme.IOWriteZeroes, 1, 2047, 0, 512)
	wz.SetSGL(0, 0, nvme.SGLTransportDataBlock)
	q.mustDo(t, wz, nil)
	_, got = q.mustDo(t, rwCmd(nvme.IORead, 1, 0, 7, 512), nil)
	want = pattern(64*512, 9)[:8*512]
	clear(want[4*512:])
	if !bytes.Equal(got, want) || be.zeroes.Load() != 2 {
		t.Fatal("write zeroes")
	}
}

// Backend error classes become NVMe status in one place; path errors never
// carry DNR.
func TestStatusFromError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want nvme.Status
	}{
		{nil, nvme.StatusSuccess},
		{fmt.Errorf("x: %w", backend.ErrOutOfRange), nvme.StatusLBAOutOfRange},
		{backend.ErrMisaligned, nvme.StatusInvalidField},
		{backend.ErrNoSpace, nvme.StatusCapacityExceeded},
		{backend.ErrMedia, nvme.StatusUnrecoveredReadError},
		{backend.ErrWriteFault, nvme.StatusWriteFault},
		{backend.ErrReadOnly, nvme.StatusNamespaceWriteProtect},
		{fmt.Errorf("raft: %w", backend.ErrInaccessible), nvme.StatusANAInaccessible},
		{backend.ErrTransition, nvme.StatusANATransition},
		{backend.ErrClosed, nvme.StatusANAInaccessible},
		{context.Canceled, nvme.StatusInternalError},
		{context.DeadlineExceeded, nvme.StatusInternalError},
		{errors.New("disk on fire"), nvme.StatusInternalError},
		{fmt.Errorf("w: %w", nvme.StatusNamespaceNotReady), nvme.StatusNamespaceNotReady},
	} {
		got := statusFromError(tc.err)
		if got != tc.want {
			t.Errorf("%v → %v, want %v", tc.err, got, tc.want)
		}
		if got.SCT() == nvme.SCTPath && got.DNR() {
			t.Errorf("%v → path error with DNR", tc.err)
		}
	}
	if nvme.StatusANAInaccessible.Code() != 0x302 || nvme.StatusANATransition.Code() != 0x303 ||
		nvme.StatusLBAOutOfRange.Code() != 0x80 || !nvme.StatusLBAOutOfRange.DNR() ||
		nvme.StatusUnrecoveredReadError.Code() != 0x281 || nvme.StatusInternalError.DNR() {
		t.Fatal("status constants")
	}
	// Through the I/O path: the backend's error class reaches the CQE.
	env := newEnv(t)
	a := env.standard()
	env.be[1].setErr(fmt.Errorf("leader moved: %w", backend.ErrTransition))
	cpl, _ := a.io[0].do(t, rwCmd(nvme.IOWrite, 1, 0, 0, 512), make([]byte, 512))
	expectStatus(t, "transition", cpl, nvme.StatusANATransition)
	env.be[1].setErr(backend.ErrMedia)
	cpl, _ = a.io[0].do(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	expectStatus(t, "media", cpl, nvme.StatusUnrecoveredReadError)
	if cpl.DW0 != 0 || len(env.tgt.Controllers()) != 1 {
		t.Fatal("error completion")
	}
}

// The I/O queue runs many commands at once while the backend blocks (one
// worker per queue entry), and releasing the queue cancels them.
func TestConcurrentCommandsPerQueue(t *testing.T) {
	env := newEnv(t)
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	a.connectIO(1, 31)
	q := a.io[0]
	be := env.be[1]
	release := be.block()
	var rs []*Request
	for i := range 32 {
		r, ok := q.start(t, rwCmd(nvme.IOWrite, 1, uint64(i), 0, 512), pattern(512, byte(i)))
		if !ok {
			t.Fatal("Init refused a write")
		}
		rs = append(rs, r)
	}
	deadline := time.Now().Add(waitLimit)
	for be.active.Load() != 32 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 32 commands reached the backend", be.active.Load())
		}
		time.Sleep(time.Millisecond)
	}
	release()
	for _, r := range rs {
		if cpl, _ := q.wait(t, r); !cpl.Status.Success() {
			t.Fatal(cpl.Status)
		}
	}
	if be.maxActive.Load() != 32 {
		t.Fatalf("max concurrency %d", be.maxActive.Load())
	}
	// Blocked commands are canceled when the connection goes.
	be.block()
	r, _ := q.start(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	for be.active.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	q.sq.Release()
	if cpl, _ := q.wait(t, r); cpl.Status != nvme.StatusInternalError {
		t.Fatalf("canceled command: %v", cpl.Status)
	}
}

// RemoveNamespace waits for commands in flight; new commands see the
// namespace as inactive at once.
func TestRemoveNamespaceDrains(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	be := env.be[1]
	release := be.block()
	r, _ := a.io[0].start(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	for be.active.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error)
	go func() { done <- env.sub.RemoveNamespace(1) }()
	deadline := time.Now().Add(waitLimit)
	for env.sub.Namespace(1) != nil {
		if time.Now().After(deadline) {
			t.Fatal("namespace still listed")
		}
		time.Sleep(time.Millisecond)
	}
	cpl, _ := a.io[1].do(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	expectStatus(t, "removed namespace", cpl, nvme.StatusInvalidField)
	select {
	case <-done:
		t.Fatal("RemoveNamespace returned with a command in flight")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	if cpl, _ := a.io[0].wait(t, r); !cpl.Status.Success() {
		t.Fatal(cpl.Status)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Resize: NotifyNamespaceChanged re-reads the size.
	big := newMemBackend(1<<20, 512)
	if err := env.sub.AddNamespace(NamespaceConfig{NSID: 3, Backend: big}); err != nil {
		t.Fatal(err)
	}
	big.data = append(big.data, make([]byte, 1<<20)...)
	if err := env.sub.NotifyNamespaceChanged(3); err != nil {
		t.Fatal(err)
	}
	if env.sub.Namespace(3).Blocks() != 4096 {
		t.Fatalf("NSZE after resize %d", env.sub.Namespace(3).Blocks())
	}
}
