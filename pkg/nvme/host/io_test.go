package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// NVMe/TCP 1.0 §3.3: writes up to IOCCSZ*16-64 bytes go in the capsule (SGL
// 01h), larger ones wait for R2T and are answered with H2CData PDUs of at
// most MAXH2CDATA bytes, LAST_PDU ending each R2T.
func TestWriteInCapsuleOrR2TAtTheBoundary(t *testing.T) {
	tests := []struct {
		name                 string
		cfg                  fakeConfig
		size                 int
		wantICD              bool
		wantR2T, wantH2CPDUs int
	}{
		{"one block in capsule", fakeConfig{BlockSize: 512}, 512, true, 0, 0},
		{"exactly the ICD limit", fakeConfig{BlockSize: 512}, 4096, true, 0, 0},
		{"one block over the limit", fakeConfig{BlockSize: 512}, 4608, false, 1, 1},
		{"IOCCSZ 4 means no ICD", fakeConfig{BlockSize: 512, IOCCSZ: 4}, 512, false, 1, 1},
		{"split by MAXH2CDATA", fakeConfig{MAXH2CDATA: 4096}, 16384, false, 1, 4},
		{"several R2Ts, several PDUs each", fakeConfig{MAXH2CDATA: 4096, R2TChunk: 8192}, 24576, false, 3, 6},
		{"R2T chunk not a multiple of MAXH2CDATA", fakeConfig{MAXH2CDATA: 8192, R2TChunk: 12288}, 32768, false, 3, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t, tt.cfg)
			c := dialFake(t, f, Options{})
			ctx := testContext(t)
			data := pattern(tt.size, uint64(tt.size))
			if err := c.Write(ctx, 1, 8, data, false); err != nil {
				t.Fatalf("Write: %v", err)
			}
			st := f.statsSnapshot()
			if (st.icdWrites == 1) != tt.wantICD || st.r2t != tt.wantR2T || st.h2c != tt.wantH2CPDUs {
				t.Errorf("in-capsule %d, R2T %d, H2CData %d; want in-capsule %v, %d, %d",
					st.icdWrites, st.r2t, st.h2c, tt.wantICD, tt.wantR2T, tt.wantH2CPDUs)
			}
			got := make([]byte, tt.size)
			if err := c.Read(ctx, 1, 8, got); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Read back: %v, equal %v", err, bytes.Equal(got, data))
			}
			f.checkClean(t)
		})
	}
}

// NVMe/TCP 1.0 §3.6.2.8: read data in several C2HData PDUs at contiguous
// offsets, ending with a CapsuleResp or with the SUCCESS flag.
func TestReadAssemblesC2HData(t *testing.T) {
	for _, digest := range []bool{false, true} {
		for _, tt := range []struct {
			chunk   int
			success bool
		}{{0, false}, {0, true}, {1000, false}, {1000, true}, {4096, true}} {
			name := fmt.Sprintf("digests=%v/chunk=%d/success=%v", digest, tt.chunk, tt.success)
			t.Run(name, func(t *testing.T) {
				f := newFakeTarget(t, fakeConfig{C2HChunk: tt.chunk, UseSuccess: tt.success})
				c := dialFake(t, f, Options{HeaderDigest: digest, DataDigest: digest})
				ctx := testContext(t)
				data := pattern(20480, 3)
				if err := c.Write(ctx, 1, 100, data, true); err != nil {
					t.Fatalf("Write: %v", err)
				}
				got := make([]byte, len(data))
				if err := c.Read(ctx, 1, 100, got); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("Read: %v, equal %v", err, bytes.Equal(got, data))
				}
				if want := 1; tt.chunk != 0 {
					want = (len(data) + tt.chunk - 1) / tt.chunk
					if st := f.statsSnapshot(); st.c2h < want {
						t.Errorf("%d C2HData PDUs, want at least %d", st.c2h, want)
					}
				}
				f.checkClean(t)
			})
		}
	}
}

// With both digests every PDU carries them, in both directions, over
// in-capsule and R2T writes.
func TestDigestsRoundTrip(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{MAXH2CDATA: 4096, C2HChunk: 3000})
	c := dialFake(t, f, Options{HeaderDigest: true, DataDigest: true, IOQueues: 2})
	ctx := testContext(t)
	for i, size := range []int{4096, 8192, 65536} {
		data := pattern(size, uint64(i))
		if err := c.Write(ctx, 1, uint64(i*64), data, false); err != nil {
			t.Fatalf("Write %d: %v", size, err)
		}
		got := make([]byte, size)
		if err := c.Read(ctx, 1, uint64(i*64), got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Read %d: %v", size, err)
		}
	}
	if err := c.Deallocate(ctx, 1, []Range{{SLBA: 0, Blocks: 1}}); err != nil {
		t.Fatalf("Deallocate: %v", err)
	}
	f.checkClean(t)
}

// Linux nvme_tcp_recv_ddgst: a bad C2H data digest fails the command with
// Data Transfer Error and keeps the queue.
func TestDataDigestErrorFailsOnlyThatCommand(t *testing.T) {
	var corrupt atomic.Bool
	corrupt.Store(true)
	f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if cmd.Opcode() != nvme.IORead || !corrupt.Swap(false) {
			return false
		}
		fc.sendC2H(cmd.CID(), 0, make([]byte, cmd.SGLLength()), nvme.FlagLastPDU, true)
		fc.sendResp(cmd.CID(), nvme.StatusSuccess, 0, 0)
		return true
	}})
	c := dialFake(t, f, Options{DataDigest: true})
	ctx := testContext(t)
	err := c.Read(ctx, 1, 0, make([]byte, 4096))
	if s, ok := StatusOf(err); !ok || s.Code() != nvme.StatusDataTransferError.Code() {
		t.Fatalf("Read = %v, want status 0x004", err)
	}
	if err := c.Read(ctx, 1, 0, make([]byte, 4096)); err != nil {
		t.Fatalf("second Read = %v, want success on the same queue", err)
	}
}

// Linux nvme_cid/nvme_find_rq: CID = 4-bit generation << 12 | slot index;
// each reuse of a slot bumps the generation.
func TestCIDCarriesSlotGeneration(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{QueueDepth: 4})
	ctx := testContext(t)
	buf := make([]byte, 4096)
	for i := 0; i < 40; i++ {
		if err := c.Read(ctx, 1, uint64(i), buf); err != nil {
			t.Fatal(err)
		}
	}
	var cids []uint16
	f.mu.Lock()
	for _, fc := range f.conns {
		if fc.qid == 1 {
			cids = append(cids, fc.cids[1:]...) // after the Connect
		}
	}
	f.mu.Unlock()
	lastGen := map[uint16]uint16{}
	for _, cid := range cids {
		idx, gen := cid&cidIndexMask, cid>>cidGenShift
		if idx >= 4 {
			t.Fatalf("CID %#04x uses slot %d of a 4-deep queue", cid, idx)
		}
		if prev, ok := lastGen[idx]; ok && gen != (prev+1)&cidGenMask {
			t.Fatalf("slot %d went from generation %d to %d", idx, prev, gen)
		}
		lastGen[idx] = gen
	}
	if len(cids) != 40 {
		t.Fatalf("%d I/O CIDs seen, want 40", len(cids))
	}
}

// A controller may complete in any order; the host keeps up to QueueDepth
// commands in flight per queue and never more.
func TestPipelinesUpToQueueDepth(t *testing.T) {
	const depth = 8
	var mu sync.Mutex
	var held []*nvme.Command
	f := newFakeTarget(t, fakeConfig{})
	f.cfg.OnIO = func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if cmd.Opcode() != nvme.IORead {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		c := *cmd
		held = append(held, &c)
		if len(held) < depth {
			return true
		}
		for i := len(held) - 1; i >= 0; i-- { // answer newest first
			fc.executeIO(held[i], nil)
		}
		held = held[:0]
		return true
	}
	c := dialFake(t, f, Options{QueueDepth: depth})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4*depth)
	for g := 0; g < 4*depth; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Read(ctx, 1, uint64(g), make([]byte, 4096))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := f.statsSnapshot(); st.maxInflight != depth {
		t.Errorf("at most %d commands were in flight, want %d", st.maxInflight, depth)
	}
	f.checkClean(t)
}

// When the connection dies, every command in flight fails with
// ErrConnectionLost, and so does everything after.
func TestConnectionLossFailsInFlightIO(t *testing.T) {
	var n atomic.Int32
	f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if n.Add(1) == 4 {
			fc.c.Close()
		}
		return true // never answer
	}})
	c := dialFake(t, f, Options{IOQueues: 2})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Read(ctx, 1, 0, make([]byte, 4096))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var ce *ConnectionError
		if !errors.Is(err, ErrConnectionLost) || !errors.As(err, &ce) || !IsPathError(err) {
			t.Errorf("Read %d = %v, want a *ConnectionError", i, err)
		}
	}
	if err := c.Write(ctx, 1, 0, make([]byte, 4096), false); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Write after the loss = %v", err)
	}
	if c.Err() == nil {
		t.Error("Err() = nil after the loss")
	}
	<-c.Done()
}

// NVMe/TCP 1.0 §3.6.2.4: a C2HTermReq ends the connection; the error
// carries FES and FEI.
func TestTermReqFromController(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		fc.sendTermReq(nvme.FESInvalidHeaderField, 3, cmd[:8])
		return true
	}})
	c := dialFake(t, f, Options{})
	err := c.Read(testContext(t), 1, 0, make([]byte, 4096))
	var tr *TermReqError
	if !errors.As(err, &tr) || tr.FES != nvme.FESInvalidHeaderField || tr.FEI != 3 || len(tr.Header) != 8 {
		t.Fatalf("Read = %v, want a TermReqError FES 1 FEI 3", err)
	}
	if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "FES 0x1") || !strings.Contains(err.Error(), "FEI 0x3") {
		t.Errorf("error %q lacks ErrConnectionLost or FES/FEI", err)
	}
}

// A command the controller does not answer in time: the host tears the
// association down (Linux error recovery) and returns the context error.
func TestContextExpiryTearsDownAssociation(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{OnIO: func(*fakeConn, *nvme.Command, []byte) bool { return true }})
	c := dialFake(t, f, Options{})
	ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
	defer cancel()
	err := c.Read(ctx, 1, 0, make([]byte, 4096))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Read = %v, want DeadlineExceeded and ErrConnectionLost", err)
	}
	if c.Err() == nil {
		t.Error("association still up")
	}
}

// Errors expose the NVMe status: path errors (SCT 3, no DNR) are told apart.
func TestCommandErrorExposesStatus(t *testing.T) {
	tests := []struct {
		status         nvme.Status
		path, ana, dnr bool
	}{
		{nvme.StatusLBAOutOfRange, false, false, true},
		{nvme.StatusInternalError, false, false, false},
		{nvme.StatusANAInaccessible, true, true, false},
		{nvme.StatusANATransition, true, true, false},
		{nvme.StatusANATransition.WithDNR(), false, true, true},
		{nvme.StatusInternalPathError, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.status.String(), func(t *testing.T) {
			f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
				fc.sendResp(cmd.CID(), tt.status, 0, 0)
				return true
			}})
			c := dialFake(t, f, Options{})
			err := c.Write(testContext(t), 1, 0, make([]byte, 4096), false)
			var s nvme.Status
			if !errors.As(err, &s) || s != tt.status {
				t.Fatalf("Write = %v, want status %v", err, tt.status)
			}
			if IsPathError(err) != tt.path || IsANAError(err) != tt.ana || s.DNR() != tt.dnr {
				t.Errorf("IsPathError %v IsANAError %v DNR %v", IsPathError(err), IsANAError(err), s.DNR())
			}
			if !strings.Contains(err.Error(), "Write on queue 1") {
				t.Errorf("error %q does not name the command", err)
			}
			if c.Err() != nil {
				t.Errorf("a status error ended the association: %v", c.Err())
			}
		})
	}
}

// Write Zeroes sets DEAC when DLFEAT allows; DSM always carries 4096 bytes
// (the fake records a violation otherwise).
func TestWriteZeroesAndDeallocate(t *testing.T) {
	var cdw12 atomic.Uint32
	f := newFakeTarget(t, fakeConfig{IOCCSZ: 4})
	f.cfg.OnIO = func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if cmd.Opcode() == nvme.IOWriteZeroes {
			cdw12.Store(cmd.CDW(12))
		}
		return false
	}
	c := dialFake(t, f, Options{})
	ctx := testContext(t)
	data := pattern(8*4096, 9)
	if err := c.Write(ctx, 1, 0, data, false); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteZeroes(ctx, 1, 0, 2); err != nil {
		t.Fatal(err)
	}
	if got := cdw12.Load(); got != 1|nvme.WZDEAC {
		t.Errorf("Write Zeroes CDW12 = %#x, want NLB 1 with DEAC", got)
	}
	if err := c.Deallocate(ctx, 1, []Range{{SLBA: 4, Blocks: 2}, {SLBA: 7, Blocks: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := c.Read(ctx, 1, 0, got); err != nil {
		t.Fatal(err)
	}
	for blk := 0; blk < 8; blk++ {
		zero := blk < 2 || blk == 4 || blk == 5 || blk == 7
		want := data[blk*4096 : (blk+1)*4096]
		if zero {
			want = make([]byte, 4096)
		}
		if !bytes.Equal(got[blk*4096:(blk+1)*4096], want) {
			t.Errorf("block %d: zeroed %v expected", blk, zero)
		}
	}
	f.checkClean(t)
}

func TestIOArgumentChecks(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{MDTS: 1})
	c := dialFake(t, f, Options{})
	ctx := testContext(t)
	for name, err := range map[string]error{
		"unaligned":        c.Read(ctx, 1, 0, make([]byte, 100)),
		"empty":            c.Write(ctx, 1, 0, nil, false),
		"over MDTS":        c.Read(ctx, 1, 0, make([]byte, 3*4096)),
		"unknown ns":       c.Read(ctx, 2, 0, make([]byte, 4096)),
		"zero WriteZeroes": c.WriteZeroes(ctx, 1, 0, 0),
		"no DSM ranges":    c.Deallocate(ctx, 1, nil),
		"Submit no Done":   c.Submit(ctx, &IO{Op: OpRead, NSID: 1, Data: make([]byte, 4096)}),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if c.MaxTransferSize() != 8192 {
		t.Errorf("MaxTransferSize() = %d, want 8192 for MDTS 1", c.MaxTransferSize())
	}
}
