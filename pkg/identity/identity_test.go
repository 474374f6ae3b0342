package identity

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestUUIDRoundTrip(t *testing.T) {
	c, n := NewClusterUUID(), NewNodeUUID()
	if c.IsZero() || n.IsZero() || ClusterUUID(n) == c {
		t.Fatalf("new UUIDs %v %v", c, n)
	}
	if c[6]>>4 != 4 || c[8]>>6 != 2 {
		t.Errorf("%v: not a version-4 RFC 9562 UUID", c)
	}
	got, err := ParseClusterUUID(strings.ToUpper(c.String()))
	if err != nil || got != c {
		t.Fatalf("parse %v: %v %v", c, got, err)
	}
	s := Stamp{Cluster: c, Node: n}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"cluster_uuid":"`+c.String()+`"`) {
		t.Fatalf("json %s %v", b, err)
	}
	var back Stamp
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("json round trip: %+v %v", back, err)
	}
	if !s.Complete() || s.IsZero() || !strings.Contains(s.String(), "node "+n.String()) {
		t.Errorf("stamp %v", s)
	}
	var half Stamp
	if b, err := json.Marshal(Stamp{Node: n}); err != nil || json.Unmarshal(b, &half) != nil || half != (Stamp{Node: n}) {
		t.Errorf("a stamp without its cluster UUID: %s %v, back %+v", b, err, half)
	}
	if (Stamp{Node: n}).String() != "cluster ? node "+n.String() {
		t.Errorf("partial stamp: %v", Stamp{Node: n})
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, s := range []string{"", "6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a", "6f1c2a94x0b3e-4d7a-9c55-2e8f10b6d3a1",
		"6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3ag", "00000000-0000-0000-0000-000000000000", "6f1c2a940b3e4d7a9c552e8f10b6d3a1"} {
		if _, err := ParseClusterUUID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseClusterUUID(%q) = %v, want ErrMalformed", s, err)
		}
		var n NodeUUID
		if err := n.UnmarshalText([]byte(s)); s != "" && !errors.Is(err, ErrMalformed) {
			t.Errorf("NodeUUID.UnmarshalText(%q) = %v, want ErrMalformed", s, err)
		}
	}
}
