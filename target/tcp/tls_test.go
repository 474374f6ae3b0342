package tcp

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
	"basalt/pkg/psktls"
	"basalt/pkg/psktls/psktlstest"
	"basalt/target"
)

// The NVMe/TCP secure channel through the Listener: TLS 1.3 with the PSK
// a host derives from its configured key (nvme-cli 2.13's derivation),
// then the ordinary NVMe/TCP exchange inside it.

var itConfiguredPSK = nvme.FormatTLSPSK(nvme.TLSPSKHashSHA256, bytes.Repeat([]byte{0x5a}, 32))

// startTLSTarget is startRealTarget with a TLS port in mode and the host
// itHostNQN holding itConfiguredPSK.
func startTLSTarget(t *testing.T, mode target.TLSMode) *realTarget {
	t.Helper()
	be, err := backend.NewMemory(itSize, itLBA)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.New(target.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := tg.AddSubsystem(target.SubsystemConfig{NQN: itSubNQN, Hosts: []string{itHostNQN},
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be, NGUID: [16]byte{1, 2, 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetHostSecrets(itHostNQN, target.HostSecrets{TLSPSK: itConfiguredPSK})
	port, err := tg.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: "4420", TLS: mode})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.TLSHandshakeTimeout = 2 * time.Second
	l, err := Listen(tg, port, "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	t.Cleanup(func() {
		l.Close()
		l.Wait()
		if err := <-served; err != ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
		tg.Close()
	})
	return &realTarget{t: tg, l: l, be: be}
}

// hostPSK is the TLS PSK `nvme connect --tls` offers for itHostNQN: the
// version-0 identity with libnvme 1.13's derivation (index 2), or
// another of TLSPSKs' list.
func hostPSK(t *testing.T, i int) nvme.TLSPSK {
	c, err := nvme.ParseTLSPSK(itConfiguredPSK)
	if err != nil {
		t.Fatal(err)
	}
	return c.TLSPSKs(itHostNQN, itSubNQN)[i]
}

// dialTLS opens a TLS connection with psk and returns a test host on it,
// before its ICReq.
func (rt *realTarget) dialTLS(t *testing.T, psk nvme.TLSPSK) (*testHost, error) {
	t.Helper()
	conn, err := net.Dial("tcp", rt.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	tc, err := psktlstest.Client(conn, psk.Identity, psk.Key, psktls.Hash(psk.Hash))
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return newTestHost(t, tc), nil
}

func TestTLSConnectAndIO(t *testing.T) {
	checkNoGoroutineLeaks(t)
	for _, mode := range []target.TLSMode{target.TLSOptional, target.TLSRequired} {
		for _, i := range []int{0, 1, 2, 3} { // v0/v1 identities, both derivations
			t.Run(fmt.Sprintf("%v/psk%d", mode, i), func(t *testing.T) {
				rt := startTLSTarget(t, mode)
				admin, err := rt.dialTLS(t, hostPSK(t, i))
				if err != nil {
					t.Fatal(err)
				}
				admin.icreq(0)
				cntlid := admin.connectCtrl(0, 31, nvme.CNTLIDDynamic, 0)
				const cc = 4<<20 | 6<<16
				admin.propertySet(nvme.PropCC, cc|1)
				for admin.propertyGet(nvme.PropCSTS, false)&1 == 0 {
					sleepBriefly()
				}
				io, err := rt.dialTLS(t, hostPSK(t, i))
				if err != nil {
					t.Fatal(err)
				}
				io.icreq(nvme.DigestHeader | nvme.DigestData)
				io.connectCtrl(1, 127, cntlid, nvme.CATTRDisableSQFlow)
				checkWritesAndReads(t, rt, io)
				admin.c.Close()
				io.expectClosed()
			})
		}
	}
}

// expectConnClosed checks that the target ends conn without sending
// anything an NVMe/TCP host could take for a PDU.
func expectConnClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the target kept the connection open")
	}
	if len(b) > 0 && b[0] != 0x15 { // a TLS alert at most
		t.Fatalf("target sent %x", b)
	}
}

func TestTLSRefusals(t *testing.T) {
	rt := startTLSTarget(t, target.TLSOptional)
	good := hostPSK(t, 2)
	t.Run("wrong-psk", func(t *testing.T) {
		bad := good
		bad.Key = bytes.Repeat([]byte{1}, 32)
		if _, err := rt.dialTLS(t, bad); err == nil {
			t.Fatal("handshake with the wrong key succeeded")
		}
	})
	t.Run("unknown-identity", func(t *testing.T) {
		other := good
		other.Identity = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:stranger " + itSubNQN
		if _, err := rt.dialTLS(t, other); err == nil {
			t.Fatal("handshake with an unknown identity succeeded")
		}
	})
	t.Run("identity-for-another-subsystem", func(t *testing.T) {
		// The host's PSK for the discovery subsystem, used for a Connect
		// to the NVM subsystem.
		c, _ := nvme.ParseTLSPSK(itConfiguredPSK)
		disc := c.TLSPSKs(itHostNQN, nvme.DiscoveryNQN)[2]
		h, err := rt.dialTLS(t, disc)
		if err != nil {
			t.Fatal(err)
		}
		h.icreq(0)
		cpl := h.connectStatus(0, itSubNQN)
		if cpl.Status != nvme.StatusConnectInvalidHost {
			t.Fatalf("Connect: %v, want Connect Invalid Host", cpl.Status)
		}
	})
	t.Run("plain-connect-from-tls-host", func(t *testing.T) {
		h := rt.dial(t, 0)
		if cpl := h.connectStatus(0, itSubNQN); cpl.Status != nvme.StatusConnectInvalidHost ||
			cpl.DW0 != nvme.ConnectInvalidParam(true, nvme.ConnectDataHostNQN) {
			t.Fatalf("Connect: %v DW0 %#x, want Connect Invalid Host at HOSTNQN", cpl.Status, cpl.DW0)
		}
	})
	t.Run("malformed-clienthello", func(t *testing.T) {
		conn, err := net.Dial("tcp", rt.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		junk := make([]byte, 300)
		rand.Read(junk)
		conn.Write(append([]byte{0x16, 3, 1, 1, 44, 1, 0, 1, 40}, junk...))
		expectConnClosed(t, conn)
	})
	t.Run("silent-after-first-byte", func(t *testing.T) {
		conn, err := net.Dial("tcp", rt.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte{0x16, 3, 1, 0x40}) // then nothing: the handshake deadline ends it
		expectConnClosed(t, conn)
	})
}

func TestTLSRequiredRefusesPlain(t *testing.T) {
	rt := startTLSTarget(t, target.TLSRequired)
	conn, err := net.Dial("tcp", rt.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var icreq [nvme.ICReqSize]byte
	nvme.ICReq{}.Encode(icreq[:])
	conn.Write(icreq[:])
	expectConnClosed(t, conn)
}

// connectStatus sends an admin Connect for itHostNQN to subnqn and returns
// its completion, successful or not.
func (h *testHost) connectStatus(qid uint16, subnqn string) nvme.Completion {
	h.t.Helper()
	c := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	c.EncodeConnect(nvme.ConnectCmd{QID: qid, SQSIZE: 31, KATO: 30000})
	var data [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{HostID: [16]byte{9}, CNTLID: nvme.CNTLIDDynamic, SubNQN: subnqn, HostNQN: itHostNQN}).Encode(data[:])
	h.sendCapsule(&c, data[:])
	return h.expectResp(c.CID())
}
