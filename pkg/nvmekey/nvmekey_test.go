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

// TestOptions checks that each option widens a parse by what it names and
// no more, and that the canonical parse refuses what it widens to.
func TestOptions(t *testing.T) {
	key32, key48, key64 := make([]byte, 32), make([]byte, 48), make([]byte, 64)
	key48[47] = 1
	tls00 := Encode(TLSPSKPrefix, 0, key48)
	padded := Encode(TLSPSKPrefix, 2, key48) // 52 bytes: "==" after a digit with 4 spare bits
	i := strings.Index(padded, "==")
	laxPad := padded[:i-1] + string(padded[i-1]+1) + padded[i:]
	for _, tc := range []struct {
		name, in string
		tls      bool
		opt      Option
	}{
		{"no final colon", strings.TrimSuffix(specDHCHAP, ":"), false, FinalColonOptional()},
		{"newline", specDHCHAP[:20] + "\r\n" + specDHCHAP[20:], false, SkipNewlines()},
		{"trailing newline without colon", strings.TrimSuffix(specDHCHAP, ":") + "\n", false, SkipNewlines()},
		{"tls newline", docTLSPSK[:20] + "\n" + docTLSPSK[20:], true, SkipNewlines()},
		{"nonzero pad bits", laxPad, true, NonzeroPadBits()},
		{"tls hash 00, 32 bytes", Encode(TLSPSKPrefix, 0, key32), true, TLSHashNone()},
		{"tls hash 00, 48 bytes", tls00, true, TLSHashNone()},
	} {
		parse := ParseDHCHAP
		if tc.tls {
			parse = ParseTLSPSK
		}
		if _, err := parse(tc.in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: accepted without the option (%v)", tc.name, err)
		}
		all := []Option{FinalColonOptional(), SkipNewlines(), NonzeroPadBits(), TLSHashNone()}
		if tc.name == "trailing newline without colon" {
			all = all[:2] // it needs both
		} else if _, err := parse(tc.in, tc.opt); err != nil {
			t.Errorf("%s: refused with its option: %v", tc.name, err)
		}
		if _, err := parse(tc.in, all...); err != nil {
			t.Errorf("%s: refused with every option: %v", tc.name, err)
		}
	}
	// What the options still refuse.
	for _, tc := range []struct{ name, in, want string }{
		{"tls hash 00, 64 bytes", Encode(TLSPSKPrefix, 0, key64), "64-byte key with hash identifier 00"},
		{"tls hash 03", Encode(TLSPSKPrefix, 3, key32), "want 00 (none), 01"},
		{"tls 32 bytes with 02", Encode(TLSPSKPrefix, 2, key32), "32-byte key"},
		{"tls no final colon", strings.TrimSuffix(docTLSPSK, ":"), "end with ':'"},
	} {
		_, err := ParseTLSPSK(tc.in, TLSHashNone(), SkipNewlines(), NonzeroPadBits())
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParseDHCHAP(strings.Replace(specDHCHAP, ":00:", ":04:", 1), FinalColonOptional(), TLSHashNone()); err == nil {
		t.Error("dhchap hash 04 accepted with options")
	}
}

// FuzzParse checks that parsing never panics and that what parses is
// canonical: it encodes back to the same text.
func FuzzParse(f *testing.F) {
	f.Add(specDHCHAP)
	f.Add(docTLSPSK)
	f.Add("DHHC-1:03:" + strings.Repeat("A", 88) + ":")
	f.Add(strings.TrimSuffix(specDHCHAP, ":"))
	f.Add(Encode(TLSPSKPrefix, 0, make([]byte, 48)))
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
		// What the widest parse takes re-encodes to canonical text of
		// the same key.
		all := []Option{FinalColonOptional(), SkipNewlines(), NonzeroPadBits(), TLSHashNone()}
		if k, err := ParseDHCHAP(s, all...); err == nil {
			if c, err := ParseDHCHAP(Encode(DHCHAPPrefix, k.Transform, k.Secret)); err != nil || c.Transform != k.Transform || string(c.Secret) != string(k.Secret) {
				t.Fatalf("%q: %+v re-encodes to %+v, %v", s, k, c, err)
			}
		}
		if k, err := ParseTLSPSK(s, all...); err == nil {
			if c, err := ParseTLSPSK(Encode(TLSPSKPrefix, k.Transform, k.Secret), TLSHashNone()); err != nil || c.Transform != k.Transform || string(c.Secret) != string(k.Secret) {
				t.Fatalf("%q: %+v re-encodes to %+v, %v", s, k, c, err)
			}
		}
	})
}
