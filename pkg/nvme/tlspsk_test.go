package nvme

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The configured key and answers of libnvme's test/psk.c.
var (
	testPSK32 = []byte{0x55, 0x12, 0xDB, 0xB6, 0x73, 0x7D, 0x01, 0x06, 0xF6, 0x59, 0x75, 0xB7, 0x73, 0xDF, 0xB0, 0x11,
		0xFF, 0xC3, 0x44, 0xBC, 0xF4, 0x42, 0xE2, 0xDD, 0x6D, 0x8B, 0xC4, 0x87, 0x0B, 0x5D, 0x5B, 0x03}
	testPSK48 = append(append([]byte(nil), testPSK32...), testPSK32[16:]...)
)

func TestParseTLSPSKInterchange(t *testing.T) {
	cases := []struct {
		s    string
		hash TLSPSKHash
		key  []byte
	}{
		{"NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:", TLSPSKHashNone, testPSK32},
		{"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:", TLSPSKHashSHA256, testPSK32},
		{"NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:", TLSPSKHashSHA384, testPSK48},
	}
	for _, tt := range cases {
		c, err := ParseTLSPSK(tt.s)
		if err != nil || c.Hash != tt.hash || !bytes.Equal(c.Key, tt.key) {
			t.Errorf("ParseTLSPSK(%s) = %v, %v", tt.s, c, err)
		}
		if got := FormatTLSPSK(tt.hash, tt.key); got != tt.s {
			t.Errorf("FormatTLSPSK = %s, want %s", got, tt.s)
		}
	}
}

func TestParseTLSPSKRefusals(t *testing.T) {
	good := "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:"
	for _, s := range []string{
		"", "NVMeTLSkey-2:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
		"NVMeTLSkey-1:03:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
		"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrA:", // CRC
		"NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:", // 32 bytes with 02
		"NVMeTLSkey-1:01:!!!:", strings.TrimSuffix(good, ":"),
	} {
		if _, err := ParseTLSPSK(s); !errors.Is(err, ErrTLSPSK) {
			t.Errorf("ParseTLSPSK(%q): %v, want ErrTLSPSK", s, err)
		}
	}
}

// TestParseTLSPSKLenient pins what the target takes beyond nvme-cli's
// canonical text: CR and LF inside the base64, and nonzero bits after the
// key in the last digit.
func TestParseTLSPSKLenient(t *testing.T) {
	s02 := FormatTLSPSK(TLSPSKHashSHA384, testPSK48)
	i := strings.Index(s02, "==")
	for _, s := range []string{
		"NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3\nc9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ\r\n:",
		s02[:i-1] + "R" + s02[i:], // canonical "Q" is 010000b; its low 4 bits are spare
	} {
		if c, err := ParseTLSPSK(s); err != nil || len(c.Key) == 0 {
			t.Errorf("ParseTLSPSK(%q): %v", s, err)
		}
	}
}

// TestTLSPSKIdentities checks the version-1 identities against libnvme's
// answers for both derivations: the digest depends on the retained PSK,
// so it pins the retained-PSK derivation of each.
func TestTLSPSKIdentities(t *testing.T) {
	cases := []struct {
		key         []byte
		hash        TLSPSKHash
		rfc, compat string
	}{
		{testPSK32, TLSPSKHashSHA256,
			"NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
			"NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys 66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM="},
		{testPSK48, TLSPSKHashSHA384,
			"NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
			"NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz"},
	}
	for _, tt := range cases {
		psks := ConfiguredPSK{Hash: tt.hash, Key: tt.key}.TLSPSKs("nqn.psk-test-host", "nqn.psk-test-subsys")
		if len(psks) != 4 {
			t.Fatalf("%d PSKs", len(psks))
		}
		if psks[1].Identity != tt.rfc || psks[3].Identity != tt.compat {
			t.Errorf("identities\n%s\n%s\nwant\n%s\n%s", psks[1].Identity, psks[3].Identity, tt.rfc, tt.compat)
		}
		want0 := "NVMe0R0" + string('0'+byte(tt.hash)) + " nqn.psk-test-host nqn.psk-test-subsys"
		if psks[0].Identity != want0 || psks[2].Identity != want0 {
			t.Errorf("version 0 identity %q, want %q", psks[0].Identity, want0)
		}
		if bytes.Equal(psks[0].Key, psks[2].Key) || len(psks[0].Key) != len(tt.key) {
			t.Error("the two derivations give the same version-0 key, or a key of the wrong length")
		}
	}
}

func TestParsePSKIdentity(t *testing.T) {
	p, err := ParsePSKIdentity("NVMe1R02 nqn.h nqn.s abc=")
	if err != nil || p.Version != 1 || p.Hash != TLSPSKHashSHA384 || p.HostNQN != "nqn.h" || p.SubNQN != "nqn.s" || p.Digest != "abc=" {
		t.Fatalf("%+v, %v", p, err)
	}
	for _, id := range []string{"", "NVMe0R01 nqn.h", "NVMe0G01 nqn.h nqn.s", "NVMe2R01 a b", "NVMe0R03 a b", "NVMe0R01 a b c", "NVMe1R01 a b"} {
		if _, err := ParsePSKIdentity(id); !errors.Is(err, ErrTLSPSK) {
			t.Errorf("ParsePSKIdentity(%q): %v", id, err)
		}
	}
}

func FuzzParseTLSPSK(f *testing.F) {
	f.Add("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:")
	f.Add("NVMe1R02 nqn.h nqn.s abc=")
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := ParseTLSPSK(s); err == nil && len(c.Key) != 32 && len(c.Key) != 48 {
			t.Fatalf("%d-byte key", len(c.Key))
		}
		ParsePSKIdentity(s)
	})
}
