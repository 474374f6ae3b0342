package dhchap

import (
	"testing"

	"basalt/pkg/nvme"
)

// The decoders must never panic, and what they accept must re-encode to a
// prefix-equivalent message (trailing bytes are padding).

func FuzzDecodeNegotiate(f *testing.F) {
	f.Add(NewHostExchange(&HostConfig{}, 1).Negotiate())
	f.Add(make([]byte, 8))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeNegotiate(b)
		if err != nil {
			return
		}
		if m2, err := DecodeNegotiate(m.Encode()); err != nil || len(m2.Protocols) != len(m.Protocols) {
			t.Fatalf("re-encoding: %v", err)
		}
	})
}

func FuzzDecodeChallenge(f *testing.F) {
	f.Add((&Challenge{TID: 1, Hash: 1, Group: 1, C: make([]byte, 32), DHValue: make([]byte, 256)}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeChallenge(b)
		if err != nil {
			return
		}
		if _, err := DecodeChallenge(m.Encode()); err != nil {
			t.Fatal(err)
		}
		// The host must answer anything with a reply or a protocol error.
		x := NewHostExchange(&HostConfig{Secret: Secret{Key: make([]byte, 32)}}, m.TID)
		if _, err := x.HandleChallenge(b); err != nil && Explanation(err) == 0 {
			t.Fatalf("error without an explanation: %v", err)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	f.Add((&Reply{TID: 1, CValid: true, Seq: 3, Response: make([]byte, 32), C2: make([]byte, 32), DHValue: make([]byte, 256)}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeReply(b)
		if err != nil {
			return
		}
		if _, err := DecodeReply(m.Encode()); err != nil {
			t.Fatal(err)
		}
		cfg := &ControllerConfig{Credentials: []Credentials{{Host: Secret{Key: make([]byte, 32)}}}, Groups: []nvme.AuthDHGroupID{nvme.AuthDHGroupFFDHE2048}}
		cx, err := NewControllerExchange(cfg, NewHostExchange(&HostConfig{}, m.TID).Negotiate())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cx.Challenge(); err != nil {
			t.Fatal(err)
		}
		if err := cx.HandleReply(b); err == nil {
			t.Fatal("a fuzzed reply authenticated")
		}
	})
}

func FuzzDecodeSuccess1(f *testing.F) {
	f.Add((&Success1{TID: 1, HL: 32, RValid: true, Response: make([]byte, 32)}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeSuccess1(b)
		if err != nil {
			return
		}
		if _, err := DecodeSuccess1(m.Encode()); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeSuccess2AndFailure(f *testing.F) {
	f.Add((&Success2{TID: 1}).Encode())
	f.Add(Failure1(2, nvme.AuthFailureFailed))
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeSuccess2(b) //nolint:errcheck // only must not panic
		for _, id := range []nvme.AuthID{nvme.AuthIDFailure1, nvme.AuthIDFailure2} {
			if m, err := DecodeFailure(b, id); err == nil {
				if m2, err := DecodeFailure(m.Encode(), id); err != nil || m2 != m {
					t.Fatalf("re-encoding: %+v %v", m2, err)
				}
			}
		}
	})
}

func FuzzParseSecret(f *testing.F) {
	f.Add(katSecret1)
	f.Add(katSecret3)
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			return
		}
		if _, err := ParseSecret(sec.Encode()); err != nil {
			t.Fatal(err)
		}
	})
}
