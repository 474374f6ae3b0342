package dhchap

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"testing"

	"basalt/pkg/nvme"
)

// Known-answer vectors. They were computed by an independent script
// (Python's hmac, hashlib, zlib and big integers) that composes the bytes
// in the order Linux does in nvme_auth_extract_key, nvme_auth_transform_key,
// nvme_auth_augmented_challenge, nvme_auth_dhchap_setup_host_response and
// nvme_auth_dhchap_setup_ctrl_response, with RFC 7919's ffdhe2048.
const (
	katHostNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"
	katSubNQN  = "nqn.2024-01.io.basalt:kat"
	// key 00 01 .. 1f, transformed with SHA-256
	katSecret1 = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	katT1      = "6c7b81cb2a746f74454b1d7140f3153b51ca99459fcef7a86a17f27695b87cd8"
	// key 64 65 .. 93 (48 bytes), no transformation
	katSecret0 = "DHHC-1:00:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:"
	// key c8 .. ff 00 .. 07 (64 bytes), transformed with SHA-512 (with the subsystem NQN)
	katSecret3 = "DHHC-1:03:yMnKy8zNzs/Q0dLT1NXW19jZ2tvc3d7f4OHi4+Tl5ufo6err7O3u7/Dx8vP09fb3+Pn6+/z9/v8AAQIDBAUGB24FqBs=:"
	katT3      = "92aa815c8d84d07211772bb2ed857e568f5b18b6b29ade7cbb4019ab41fa2235b1d5fdb56e389b81f43089e3a6ea991d4a7f1183acb9b0aa4dd8ae95a41ea28d"
	// R1 with SHA-256, null group, C1 = a0 a1 .. af a0 .. af, S1 = 01020304h, T_ID 7
	katR1Null = "b5634e4a2c698430ce471d02f4c037a4411894c4d045387c81107955e754cf2d"
	// ffdhe2048 with x_ctrl = 1234567890abcdef1234567890abcdefh, x_host = fedcba0987654321fedcba0987654321h:
	// SHA-256 of g^x_ctrl, g^x_host and of the shared secret, the augmented C1, and R1
	katYCtrlDigest = "01fada54fb79d1b32365bb5c114c38dd09458b0eab7b54892ffa0c4534361a3f"
	katYHostDigest = "2055f0fd56fd7889feeab17d83f31227c7ed52d4ab40bc444ee45a69bbd00e7a"
	katKsDigest    = "9b90be434c00267db935579311842ad1de1789dfb6badd96c8644c38f75294e8"
	katAug         = "9d18350828d2758351e2eec81722ed797fc08fdb89f1093a2b15a89248461c32"
	katR1DH        = "6ba218bf5e5497fd3490def3ddea1ad125cc5ba5774ab1aac73485ffb99cdc8d"
	// R2 with SHA-384 keyed by katSecret3 transformed, C2 = 50+i%7 (48 bytes), S2 = deadbeefh, T_ID 7
	katR2 = "95d2814212c9113bcaf5cf3adaa420fc77054916383844f3d6a38b43e7b2e3ce3a845a13d17cb0dd875e35506d978ba2"
	// R1 with SHA-512 keyed by the untransformed katSecret0, C1 = 00 .. 3f, S1 = 5, T_ID ffffh
	katR1Raw512 = "f9e65437e872989caea00b59cb35c0ab4700f5a2b7b93aec5fcbe9c54f08c15d66e3d4ecb146b5e3168846c0207c9d2efab85bea08b45e5c14406ba41b87161a"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSecret(t *testing.T, s string) Secret {
	t.Helper()
	sec, err := ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func seqBytes(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

func TestKnownAnswerTransform(t *testing.T) {
	s1 := mustSecret(t, katSecret1)
	if s1.Transform != nvme.AuthHashSHA256 || !bytes.Equal(s1.Key, seqBytes(32, func(i int) byte { return byte(i) })) {
		t.Fatalf("parsed %v", s1)
	}
	if got := hex.EncodeToString(s1.TransformedKey(katHostNQN)); got != katT1 {
		t.Errorf("transform SHA-256: %s, want %s", got, katT1)
	}
	s3 := mustSecret(t, katSecret3)
	if got := hex.EncodeToString(s3.TransformedKey(katSubNQN)); got != katT3 {
		t.Errorf("transform SHA-512: %s, want %s", got, katT3)
	}
	s0 := mustSecret(t, katSecret0)
	if !bytes.Equal(s0.TransformedKey(katHostNQN), s0.Key) || len(s0.Key) != 48 {
		t.Errorf("no transformation changed the key")
	}
	for _, s := range []string{katSecret0, katSecret1, katSecret3} {
		if got := mustSecret(t, s).Encode(); got != s {
			t.Errorf("Encode: %s, want %s", got, s)
		}
	}
}

func TestKnownAnswerResponses(t *testing.T) {
	c1 := seqBytes(32, func(i int) byte { return 0xA0 + byte(i%16) })
	t1 := mustSecret(t, katSecret1).TransformedKey(katHostNQN)
	if got := hex.EncodeToString(HostResponse(nvme.AuthHashSHA256, t1, c1, 0x01020304, 7, katHostNQN, katSubNQN)); got != katR1Null {
		t.Errorf("R1 null group: %s, want %s", got, katR1Null)
	}
	c2 := seqBytes(48, func(i int) byte { return 0x50 + byte(i%7) })
	t3 := mustSecret(t, katSecret3).TransformedKey(katSubNQN)
	if got := hex.EncodeToString(ControllerResponse(nvme.AuthHashSHA384, t3, c2, 0xdeadbeef, 7, katHostNQN, katSubNQN)); got != katR2 {
		t.Errorf("R2: %s, want %s", got, katR2)
	}
	raw := mustSecret(t, katSecret0).TransformedKey(katHostNQN)
	c1b := seqBytes(64, func(i int) byte { return byte(i) })
	if got := hex.EncodeToString(HostResponse(nvme.AuthHashSHA512, raw, c1b, 5, 0xFFFF, katHostNQN, katSubNQN)); got != katR1Raw512 {
		t.Errorf("R1 SHA-512: %s, want %s", got, katR1Raw512)
	}
}

func TestKnownAnswerDH(t *testing.T) {
	g := lookupGroup(nvme.AuthDHGroupFFDHE2048)
	pair := func(x string) *KeyPair {
		k, _ := new(big.Int).SetString(x, 16)
		y := new(big.Int).Exp(big.NewInt(2), k, g.p)
		return &KeyPair{g: g, private: k, Public: y.FillBytes(make([]byte, 256))}
	}
	ctrl, host := pair("1234567890abcdef1234567890abcdef"), pair("fedcba0987654321fedcba0987654321")
	check := func(what string, b []byte, want string) {
		t.Helper()
		if d := sha256.Sum256(b); hex.EncodeToString(d[:]) != want {
			t.Errorf("%s: digest %x, want %s", what, d, want)
		}
	}
	check("g^x_ctrl", ctrl.Public, katYCtrlDigest)
	check("g^x_host", host.Public, katYHostDigest)
	ks1, err := ctrl.SharedSecret(host.Public)
	if err != nil {
		t.Fatal(err)
	}
	ks2, err := host.SharedSecret(ctrl.Public)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ks1, ks2) || len(ks1) != 256 {
		t.Fatalf("shared secrets differ or are not 256 bytes")
	}
	check("Ks", ks1, katKsDigest)
	c1 := seqBytes(32, func(i int) byte { return 0xA0 + byte(i%16) })
	aug := AugmentedChallenge(nvme.AuthHashSHA256, ks1, c1)
	if hex.EncodeToString(aug) != katAug {
		t.Errorf("augmented challenge %x, want %s", aug, katAug)
	}
	t1 := mustSecret(t, katSecret1).TransformedKey(katHostNQN)
	if got := hex.EncodeToString(HostResponse(nvme.AuthHashSHA256, t1, aug, 0x01020304, 7, katHostNQN, katSubNQN)); got != katR1DH {
		t.Errorf("R1 ffdhe2048: %s, want %s", got, katR1DH)
	}
}

// eScaled returns floor(2^n × e), from the series Σ 1/k!.
func eScaled(n uint) *big.Int {
	const guard = 64
	term := new(big.Int).Lsh(big.NewInt(1), n+guard)
	sum := new(big.Int)
	for k := int64(1); term.Sign() > 0; k++ {
		sum.Add(sum, term)
		term.Quo(term, big.NewInt(k))
	}
	return sum.Rsh(sum, guard)
}

// TestGroupPrimes derives each prime from RFC 7919's definition,
// p = 2^b − 2^{b−64} + {⌊2^{b−130} e⌋ + X} × 2^64 − 1, with the RFC's X,
// compares it with the table and checks that p and (p−1)/2 are prime.
func TestGroupPrimes(t *testing.T) {
	xs := map[nvme.AuthDHGroupID]int64{
		nvme.AuthDHGroupFFDHE2048: 560316, nvme.AuthDHGroupFFDHE3072: 2625351, nvme.AuthDHGroupFFDHE4096: 5736041,
		nvme.AuthDHGroupFFDHE6144: 15705020, nvme.AuthDHGroupFFDHE8192: 10965728,
	}
	for id, x := range xs {
		g := lookupGroup(id)
		b := uint(g.p.BitLen())
		p := new(big.Int).Lsh(big.NewInt(1), b)
		p.Sub(p, new(big.Int).Lsh(big.NewInt(1), b-64))
		m := eScaled(b - 130)
		m.Add(m, big.NewInt(x))
		p.Add(p, m.Lsh(m, 64))
		p.Sub(p, big.NewInt(1))
		if p.Cmp(g.p) != 0 {
			t.Errorf("%s: the table differs from RFC 7919's formula", g.name)
			continue
		}
		if testing.Short() && b > 3072 {
			continue
		}
		if !p.ProbablyPrime(1) || !new(big.Int).Rsh(p, 1).ProbablyPrime(1) {
			t.Errorf("%s: not a safe prime", g.name)
		}
		if PublicValueSize(id) != int(b/8) {
			t.Errorf("%s: value size %d", g.name, PublicValueSize(id))
		}
	}
}
