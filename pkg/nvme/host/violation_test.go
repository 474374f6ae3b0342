package host

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"basalt/pkg/nvme"
)

// The host must catch controller-side protocol violations the way the Linux
// host does (mostly: error recovery, i.e. the connection is torn down), so
// that target bugs surface in our tests.
func TestControllerProtocolViolations(t *testing.T) {
	resp := func(fc *fakeConn, cid uint16) { fc.sendResp(cid, nvme.StatusSuccess, 0, 0) }
	tests := []struct {
		name     string
		write    bool // send a 64 KiB write (R2T path) instead of a 4 KiB read
		respond  func(fc *fakeConn, cmd *nvme.Command)
		want     string
		teardown bool // the association ends (else only the command fails)
	}{
		{"C2HData for an unknown CID", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID()+1, 0, make([]byte, 4096), nvme.FlagLastPDU, false)
		}, "no command in flight", true},
		{"stale CID generation", false, func(fc *fakeConn, cmd *nvme.Command) {
			resp(fc, cmd.CID()+1<<cidGenShift)
		}, "generation mismatch", true},
		{"CID beyond the queue", false, func(fc *fakeConn, cmd *nvme.Command) {
			resp(fc, 0x0FFF)
		}, "no such command slot", true},
		{"C2HData offset gap", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 1024), 0, false)
			fc.sendC2H(cmd.CID(), 2048, make([]byte, 2048), nvme.FlagLastPDU, false)
		}, "at offset 2048, expected 1024", true},
		{"C2HData overflow", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 8192), nvme.FlagLastPDU, false)
		}, "overflow", true},
		{"SUCCESS without LAST_PDU", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 4096), nvme.FlagSuccess, false)
		}, "SUCCESS set but not LAST_PDU", true},
		{"short read", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 2048), nvme.FlagLastPDU, false)
			resp(fc, cmd.CID())
		}, "short data-in", false},
		{"short read with SUCCESS", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 2048), nvme.FlagLastPDU|nvme.FlagSuccess, false)
		}, "short data-in", false},
		{"R2T for a read", false, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendR2T(cmd.CID(), 1, 0, 4096)
		}, "no data to send", true},
		{"R2T at the wrong offset", true, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendR2T(cmd.CID(), 1, 4096, 4096)
		}, "at offset 4096, expected 0", true},
		{"R2T beyond the data", true, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendR2T(cmd.CID(), 1, 0, 1<<20)
		}, "asks 1048576 bytes", true},
		{"R2T of length 0", true, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendR2T(cmd.CID(), 1, 0, 0)
		}, "length 0", true},
		{"write completed without its data", true, func(fc *fakeConn, cmd *nvme.Command) {
			resp(fc, cmd.CID())
		}, "0 of 65536 bytes were solicited", false},
		{"C2HData for a write", true, func(fc *fakeConn, cmd *nvme.Command) {
			fc.sendC2H(cmd.CID(), 0, make([]byte, 4096), nvme.FlagLastPDU, false)
		}, "without data-in", true},
		{"unknown PDU type", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 24)
			nvme.CommonHeader{Type: 0x08, HLEN: 24, PLEN: 24}.Encode(b)
			fc.send(b)
		}, "unsupported PDU type", true},
		{"CapsuleResp with HLEN 28", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 28)
			nvme.CommonHeader{Type: nvme.PDUCapsuleResp, HLEN: 28, PLEN: 28}.Encode(b)
			fc.send(b)
		}, "unexpected header length 28", true},
		{"C2HData with padding", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 32+4096)
			nvme.CommonHeader{Type: nvme.PDUC2HData, Flags: nvme.FlagLastPDU, HLEN: 24, PDO: 32, PLEN: uint32(len(b))}.Encode(b)
			nvme.DataHeader{CCCID: cmd.CID(), DATAL: 4096}.Encode(b)
			fc.send(b)
		}, "PDO 32", true},
		{"C2HData DATAL disagrees with PLEN", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 24+4096)
			nvme.CommonHeader{Type: nvme.PDUC2HData, Flags: nvme.FlagLastPDU, HLEN: 24, PDO: 24, PLEN: uint32(len(b))}.Encode(b)
			nvme.DataHeader{CCCID: cmd.CID(), DATAL: 4000}.Encode(b)
			fc.send(b)
		}, "does not match PLEN", true},
		{"header digest flag without negotiation", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 28)
			nvme.CommonHeader{Type: nvme.PDUCapsuleResp, Flags: nvme.FlagHDGSTF, HLEN: 24, PLEN: 28}.Encode(b)
			fc.send(b)
		}, "header digest flag true, negotiated false", true},
		{"malformed C2HTermReq", false, func(fc *fakeConn, cmd *nvme.Command) {
			b := make([]byte, 24)
			nvme.CommonHeader{Type: nvme.PDUC2HTermReq, HLEN: 24, PLEN: 200}.Encode(b)
			fc.send(b)
		}, "malformed C2HTermReq", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
				tt.respond(fc, cmd)
				return true
			}})
			c := dialFake(t, f, Options{})
			ctx := testContext(t)
			var err error
			if tt.write {
				err = c.Write(ctx, 1, 0, make([]byte, 65536), false)
			} else {
				err = c.Read(ctx, 1, 0, make([]byte, 4096))
			}
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrProtocol mentioning %q", err, tt.want)
			}
			if torn := errors.Is(err, ErrConnectionLost); torn != tt.teardown {
				t.Errorf("association torn down: %v, want %v (%v)", torn, tt.teardown, err)
			}
		})
	}
}

// Linux nvme_tcp_recv_pdu: a bad header digest is fatal for the connection.
func TestHeaderDigestErrorTearsDown(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		b := make([]byte, 28)
		nvme.CommonHeader{Type: nvme.PDUCapsuleResp, Flags: nvme.FlagHDGSTF, HLEN: 24, PLEN: 28}.Encode(b)
		(&nvme.Completion{CID: cmd.CID(), SQID: 1}).Encode(b[8:])
		binary.LittleEndian.PutUint32(b[24:], nvme.Digest(b[:24])^1)
		fc.send(b)
		return true
	}})
	c := dialFake(t, f, Options{HeaderDigest: true})
	err := c.Read(testContext(t), 1, 0, make([]byte, 4096))
	if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "header digest error") {
		t.Fatalf("Read = %v, want a torn-down connection for a header digest error", err)
	}
}

func TestANALogParsing(t *testing.T) {
	build := func(grp uint32, state nvme.ANAState, nsids ...uint32) []byte {
		b := make([]byte, 16+32+4*len(nsids))
		(&nvme.ANAHeader{CHGCNT: 7, NGRPS: 1}).Marshal(b)
		(&nvme.ANAGroupDescriptor{ANAGRPID: grp, NNSIDS: uint32(len(nsids)), CHGCNT: 3, State: state}).Marshal(b[16:])
		for i, id := range nsids {
			binary.LittleEndian.PutUint32(b[48+4*i:], id)
		}
		return b
	}
	l, err := parseANALog(build(2, nvme.ANANonOptimized, 1, 5), 4)
	if err != nil || l.CHGCNT != 7 || len(l.Groups) != 1 || l.Groups[0].ID != 2 {
		t.Fatalf("parse = %+v, %v", l, err)
	}
	if st, ok := l.StateOf(5); !ok || st != nvme.ANANonOptimized {
		t.Errorf("StateOf(5) = %v, %v", st, ok)
	}
	if _, ok := l.StateOf(3); ok {
		t.Error("StateOf(3) found a namespace that is not listed")
	}
	bad := map[string][]byte{
		"group 0":           build(0, nvme.ANAOptimized, 1),
		"group > ANAGRPMAX": build(9, nvme.ANAOptimized, 1),
		"state 0":           build(1, 0, 1),
		"NSIDs descending":  build(1, nvme.ANAOptimized, 5, 1),
		"truncated":         build(1, nvme.ANAOptimized, 1)[:40],
		"NNSIDS too large":  build(1, nvme.ANAOptimized, 1)[:48],
		"no header":         make([]byte, 8),
	}
	for name, b := range bad {
		if _, err := parseANALog(b, 4); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func TestNSDescriptorParsing(t *testing.T) {
	b := make([]byte, 4096)
	off := nvme.AppendNSDescriptor(b, 0, nvme.NIDTEUI64, []byte("EUI64xx!"))
	off = nvme.AppendNSDescriptor(b, off, nvme.NIDTUUID, []byte("uuid-uuid-uuid-u"))
	nvme.AppendNSDescriptor(b, off, nvme.NIDTCSI, []byte{0})
	ids, err := parseNSDescriptors(b)
	if err != nil || !ids.HasEUI64 || !ids.HasUUID || !ids.HasCSI || ids.HasNGUID || string(ids.UUID[:]) != "uuid-uuid-uuid-u" {
		t.Fatalf("parse = %+v, %v", ids, err)
	}
	b = make([]byte, 4096)
	off = nvme.AppendNSDescriptor(b, 0, nvme.NIDTCSI, []byte{0})
	nvme.AppendNSDescriptor(b, off, nvme.NIDTNGUID, []byte("short"))
	ids, err = parseNSDescriptors(b)
	if !errors.Is(err, ErrProtocol) || !ids.HasCSI || ids.HasNGUID {
		t.Fatalf("bogus NIDL: %+v, %v; want the CSI and ErrProtocol", ids, err)
	}
}

// FuzzCheckHeader: the header check never panics and accepts only PDUs a
// well-behaved controller sends.
func FuzzCheckHeader(f *testing.F) {
	f.Add([]byte{0x05, 0, 24, 0, 24, 0, 0, 0}, false, false)
	f.Add([]byte{0x07, 0x0F, 24, 28, 100, 0, 0, 0}, true, true)
	f.Add([]byte{0x03, 0, 24, 0, 40, 0, 0, 0}, false, false)
	f.Add([]byte{0x09, 1, 24, 0, 28, 0, 0, 0}, true, false)
	f.Fuzz(func(t *testing.T, b []byte, hd, dd bool) {
		if len(b) < 8 {
			return
		}
		ch := nvme.DecodeCommonHeader(b)
		if checkHeader(1, ch, digests{header: hd, data: dd}) != nil {
			return
		}
		if ch.HLEN != 24 {
			t.Fatalf("accepted HLEN %d", ch.HLEN)
		}
		if ch.Type == nvme.PDUC2HData && ch.PLEN <= uint32(ch.PDO) {
			t.Fatalf("accepted C2HData without data: %+v", ch)
		}
	})
}

func FuzzParseANALog(f *testing.F) {
	seed := make([]byte, 52)
	(&nvme.ANAHeader{CHGCNT: 1, NGRPS: 1}).Marshal(seed)
	(&nvme.ANAGroupDescriptor{ANAGRPID: 1, NNSIDS: 1, State: nvme.ANAOptimized}).Marshal(seed[16:])
	seed[48] = 1
	f.Add(seed, uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		l, err := parseANALog(b, max)
		if err != nil {
			return
		}
		for _, g := range l.Groups {
			if g.ID == 0 || g.ID > max || g.State == 0 {
				t.Fatalf("accepted group %+v", g)
			}
		}
	})
}

func FuzzParseNSDescriptors(f *testing.F) {
	b := make([]byte, 64)
	nvme.AppendNSDescriptor(b, 0, nvme.NIDTNGUID, make([]byte, 16))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { parseNSDescriptors(b) }) //nolint:errcheck // must not panic
}
