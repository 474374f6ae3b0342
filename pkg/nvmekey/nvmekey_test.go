package nvmekey

import (
	"errors"
	"strings"
	"testing"
)

// Published examples: the DH-HMAC-CHAP secret of the NVMe specification's
// example and a PSK that `nvme gen-tls-key` printed in the kernel's
// documentation.
const (
	specDHCHAP = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	docTLSPSK  = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
)

func TestParseKnown(t *testing.T) {
	for _, hh := range []string{"00", "01", "02", "03"} {
		s := strings.Replace(specDHCHAP, ":00:", ":"+hh+":", 1)
		k, err := ParseDHCHAP(s)
		if err != nil || len(k.Secret) != 32 || int(k.Transform) != int(hh[1]-'0') {
			t.Errorf("%s: %+v, %v", hh, k, err)
		}
		if got := Encode(DHCHAPPrefix, k.Transform, k.Secret); got != s {
			t.Errorf("re-encoded %q, want %q", got, s)
		}
	}
	k, err := ParseTLSPSK(docTLSPSK)
	if err != nil || len(k.Secret) != 32 || k.Transform != TransformSHA256 {
		t.Fatalf("%+v, %v", k, err)
	}
}

func TestRefused(t *testing.T) {
	key48 := make([]byte, 48)
	key16 := make([]byte, 16)
	for _, tc := range []struct {
		name, in, want string
		tls            bool
	}{
		{"empty", "", "does not start with", false},
		{"tls prefix for dhchap", docTLSPSK, "does not start with", false},
		{"dhchap prefix for tls", specDHCHAP, "does not start with", true},
		{"lower case", strings.ToLower(specDHCHAP), "does not start with", false},
		{"no hash id", "DHHC-1:x:abc:", "hash identifier", false},
		{"hash id 04", strings.Replace(specDHCHAP, ":00:", ":04:", 1), "hash identifier 04", false},
		{"no final colon", strings.TrimSuffix(specDHCHAP, ":"), "end with ':'", false},
		{"bad base64", "DHHC-1:00:!!!!:", "base64", false},
		{"newline", specDHCHAP[:20] + "\n" + specDHCHAP[20:], "base64", false},
		{"unpadded", strings.TrimRight(Encode(DHCHAPPrefix, 0, key48), ":="), "end with ':'", false},
		{"short key", Encode(DHCHAPPrefix, 1, key16), "16-byte key", false},
		{"crc", strings.Replace(specDHCHAP, "ia6z", "ib6z", 1), "CRC-32", false},
		{"tls hash 00", Encode(TLSPSKPrefix, 0, key48[:32]), "hash identifier 00", true},
		{"tls hash 03", Encode(TLSPSKPrefix, 3, key48[:32]), "hash identifier 03", true},
		{"tls 48 bytes with 01", Encode(TLSPSKPrefix, 1, key48), "48-byte key", true},
		{"tls 64 bytes", Encode(TLSPSKPrefix, 2, make([]byte, 64)), "64-byte key", true},
	} {
		parse := ParseDHCHAP
		if tc.tls {
			parse = ParseTLSPSK
		}
		_, err := parse(tc.in)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && len(tc.in) > 16 && strings.Contains(err.Error(), tc.in[13:]) {
			t.Errorf("%s: the error repeats the secret: %v", tc.name, err)
		}
	}
}

func TestGenerate(t *testing.T) {
	a, err := GenerateDHCHAP()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateDHCHAP()
	if k, err := ParseDHCHAP(a); err != nil || k.Transform != TransformSHA256 || len(k.Secret) != 32 || a == b {
		t.Fatalf("%q %q: %+v %v", a, b, k, err)
	}
	p, err := GenerateTLSPSK()
	if err != nil {
		t.Fatal(err)
	}
	if k, err := ParseTLSPSK(p); err != nil || k.Transform != TransformSHA256 || len(k.Secret) != 32 {
		t.Fatalf("%q: %+v %v", p, k, err)
	}
	if len(a) != 59 || len(p) != 65 { // the lengths nvme-cli prints
		t.Errorf("lengths %d, %d", len(a), len(p))
	}
}

// FuzzParse checks that parsing never panics and that what parses is
// canonical: it encodes back to the same text.
func FuzzParse(f *testing.F) {
	f.Add(specDHCHAP)
	f.Add(docTLSPSK)
	f.Add("DHHC-1:03:" + strings.Repeat("A", 88) + ":")
	f.Fuzz(func(t *testing.T, s string) {
		if k, err := ParseDHCHAP(s); err == nil {
			if got := Encode(DHCHAPPrefix, k.Transform, k.Secret); got != s {
				t.Fatalf("%q parsed but encodes to %q", s, got)
			}
		}
		if k, err := ParseTLSPSK(s); err == nil {
			if got := Encode(TLSPSKPrefix, k.Transform, k.Secret); got != s {
				t.Fatalf("%q parsed but encodes to %q", s, got)
			}
		}
	})
}
