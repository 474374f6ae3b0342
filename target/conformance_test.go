package target

import (
	"bytes"
	"testing"

	"basalt/pkg/nvme"
)

// The invalid-command cases an independent conformance run found answered
// with the wrong status (issue 14, part 9). NSIDs (NVMe Base 2.0 §3.2.1.2,
// §3.2.1.5): 1..NN are valid; a valid NSID that names no namespace is
// inactive and answers Invalid Field in Command, unless the command says
// otherwise (Identify CNS 00h returns zeroes); 0 and anything above NN are
// invalid and answer Invalid Namespace or Format, as does FFFFFFFFh where a
// command does not take the broadcast value.
func TestConformanceNSIDs(t *testing.T) {
	env := newEnv(t) // NN 128; NSIDs 1 and 2 active
	a := env.standard()
	nn := env.tgt.cfg.MaxNamespaces
	for _, tc := range []struct {
		name string
		cns  uint8
		nsid uint32
		want nvme.Status
	}{
		{"CNS 00h above NN", nvme.CNSNamespace, nn + 1, nvme.StatusInvalidNamespace},
		{"CNS 00h far above NN", nvme.CNSNamespace, 0xFFFFFFFE, nvme.StatusInvalidNamespace},
		{"CNS 00h broadcast", nvme.CNSNamespace, nvme.NSIDAll, nvme.StatusInvalidNamespace},
		{"CNS 00h zero", nvme.CNSNamespace, 0, nvme.StatusInvalidNamespace},
		{"CNS 03h above NN", nvme.CNSNSDescriptorList, nn + 1, nvme.StatusInvalidNamespace},
		{"CNS 03h inactive", nvme.CNSNSDescriptorList, nn, nvme.StatusInvalidField},
	} {
		cpl, _ := a.admin.do(t, identifyCmd(tc.cns, tc.nsid, 0), nil)
		expectStatus(t, tc.name, cpl, tc.want)
		if cpl.Status.Success() {
			continue
		}
		if e := lastError(t, a); e.ParamErrorLoc != nvme.SQEOffsetNSID || e.NSID != tc.nsid {
			t.Fatalf("%s: error log entry %+v", tc.name, e)
		}
	}
	// Allocated but inactive, below NN: CNS 00h keeps its zeroed structure.
	for _, nsid := range []uint32{3, nn} {
		_, data := a.admin.mustDo(t, identifyCmd(nvme.CNSNamespace, nsid, 0), nil)
		if !bytes.Equal(data, make([]byte, nvme.IdentifySize)) {
			t.Fatalf("Identify NS %d (inactive): not zeroed", nsid)
		}
	}
	// I/O commands: inactive → Invalid Field; invalid → Invalid Namespace.
	q := a.io[0]
	for _, tc := range []struct {
		name string
		cmd  nvme.Command
		want nvme.Status
	}{
		{"read inactive", rwCmd(nvme.IORead, 3, 0, 0, 512), nvme.StatusInvalidField},
		{"read inactive NN", rwCmd(nvme.IORead, nn, 0, 0, 512), nvme.StatusInvalidField},
		{"write zeroes inactive", rwCmd(nvme.IOWriteZeroes, 5, 0, 0, 0), nvme.StatusInvalidField},
		{"read above NN", rwCmd(nvme.IORead, nn+1, 0, 0, 512), nvme.StatusInvalidNamespace},
		{"read NSID 0", rwCmd(nvme.IORead, 0, 0, 0, 512), nvme.StatusInvalidNamespace},
		{"read broadcast", rwCmd(nvme.IORead, nvme.NSIDAll, 0, 0, 512), nvme.StatusInvalidNamespace},
	} {
		cpl, _ := q.do(t, tc.cmd, nil)
		expectStatus(t, tc.name, cpl, tc.want)
	}
	// A namespace being removed is inactive from the moment it leaves the
	// table.
	if err := env.sub.RemoveNamespace(2); err != nil {
		t.Fatal(err)
	}
	cpl, _ := q.do(t, rwCmd(nvme.IORead, 2, 0, 0, 4096), nil)
	expectStatus(t, "read removed", cpl, nvme.StatusInvalidField)
}

// lastError returns the newest Error Information log entry of a.
func lastError(t *testing.T, a *assoc) nvme.ErrorLogEntry {
	t.Helper()
	_, log := a.admin.mustDo(t, getLogCmd(nvme.LogError, 0, false, 0, nvme.ErrorLogEntrySize, 0), nil)
	return nvme.UnmarshalErrorLogEntry(log)
}

// NVMe-oF 1.1 §3.3 (nvmet_install_queue): an I/O Connect for a QID that
// is already connected on the controller is a Command Sequence Error, with
// the QID as the error location. (A second Connect on a queue that is
// itself connected stays Controller Busy: fabrics_test.go.)
func TestConformanceConnectQIDInUse(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := newFakeQueue(env.tgt, env.ports[0])
	defer q.sq.Release()
	r, _ := q.start(t, connectCmd(1, 31, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	cpl, _ := q.wait(t, r)
	expectStatus(t, "QID 1 again", cpl, nvme.StatusCommandSequenceError)
	if q.sq.Connected() {
		t.Fatal("queue connected after a failed Connect")
	}
	if r.errLoc != nvme.ConnectOffsetQID {
		t.Fatalf("error location %#x, want QID (%#x)", r.errLoc, nvme.ConnectOffsetQID)
	}
	// The first queue 1 is unharmed.
	a.io[0].mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
}

// Identify Controller SGLS bit 16 is 0: a data SGL longer than the data is
// Data SGL Length Invalid. For Dataset
// Management the data is NR+1 ranges; the one longer buffer accepted is
// the whole 4096-byte range list that Linux hosts always send (Linux
// nvme_setup_discard allocates NVME_DSM_MAX_RANGES ranges whatever NR is:
// refusing it would fail every discard, mkfs and fstrim included).
func TestConformanceDSMLength(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]
	dsm := func(nr int, sgl uint32) nvme.Command {
		c := newCmd(nvme.IODatasetMgmt)
		c.SetNSID(1)
		c.SetCDW(10, uint32(nr-1))
		c.SetCDW(11, nvme.DSMAttrDeallocate)
		c.SetSGL(0, sgl, nvme.SGLTransportDataBlock)
		return c
	}
	payload := make([]byte, nvme.DSMPayloadSize)
	for _, tc := range []struct {
		name    string
		nr      int
		sgl     uint32
		success bool
	}{
		{"exact, 1 range", 1, 16, true},
		{"exact, 3 ranges", 3, 48, true},
		{"exact, 256 ranges", 256, 4096, true},
		{"Linux 4096-byte list, 1 range", 1, 4096, true},
		{"one range longer", 1, 32, false},
		{"3 ranges in 64 bytes", 3, 64, false},
		{"2 ranges in 1024 bytes", 2, 1024, false},
		{"shorter", 2, 16, false},
		{"above the range list", 1, 8192, false},
	} {
		cpl, _ := q.do(t, dsm(tc.nr, tc.sgl), payload)
		want := nvme.StatusSuccess
		if !tc.success {
			want = nvme.StatusDataSGLLengthInvalid
		}
		expectStatus(t, tc.name, cpl, want)
	}
}
