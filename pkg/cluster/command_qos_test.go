package cluster

import (
	"errors"
	"testing"

	"basalt/pkg/qos"
)

func TestQoSAtCreateAndChangedOnline(t *testing.T) {
	c := create("db1", 2)
	c.Create.QoS = qos.Limits{IOPS: qos.Limit{Rate: 20000}, Bytes: qos.Limit{Rate: 400_000_000}}
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), c)
	if got := m.State().Volumes["db1"].QoS; got != c.Create.QoS {
		t.Fatalf("created with %v, want %v", got, c.Create.QoS)
	}
	// A change replaces the limits it names and keeps the others.
	res := applyOK(t, m, Command{Op: OpSetQoS, Volume: "db1", QoS: &QoSChange{
		ReadIOPS: &qos.Limit{Rate: 5000, Burst: 100}, Bytes: &qos.Limit{}}})
	want := qos.Limits{IOPS: qos.Limit{Rate: 20000}, ReadIOPS: qos.Limit{Rate: 5000, Burst: 100}}
	if res.Volume.QoS != want || m.State().Volumes["db1"].QoS != want {
		t.Fatalf("after set_qos: %v, want %v", res.Volume.QoS, want)
	}
	// The limits survive the state's encoding (snapshots, restarts).
	b, err := (&Command{Op: OpSetQoS, Volume: "db1", QoS: &QoSChange{WriteIOPS: &qos.Limit{Rate: 7}}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := DecodeCommand(b)
	if err != nil || dc.QoS == nil || dc.QoS.WriteIOPS == nil || dc.QoS.WriteIOPS.Rate != 7 || dc.QoS.IOPS != nil {
		t.Fatalf("decoded %+v, %v", dc.QoS, err)
	}
}

func TestQoSRefusesInvalidLimits(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), create("a", 1))
	bad := create("b", 1)
	bad.Create.QoS = qos.Limits{WriteBytes: qos.Limit{Burst: 4096}}
	for _, c := range []Command{
		bad,
		{Op: OpSetQoS, Volume: "a"},
		{Op: OpSetQoS, Volume: "a", QoS: &QoSChange{}},
		{Op: OpSetQoS, Volume: "a", QoS: &QoSChange{IOPS: &qos.Limit{Rate: qos.MaxRate + 1}}},
		{Op: OpSetQoS, Volume: "Bad Name", QoS: &QoSChange{IOPS: &qos.Limit{Rate: 1}}},
	} {
		if _, err := applyCmd(t, m, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %+v: %v, want ErrInvalid", c.Op, c.QoS, err)
		}
	}
	if _, err := applyCmd(t, m, Command{Op: OpSetQoS, Volume: "nope", QoS: &QoSChange{IOPS: &qos.Limit{Rate: 1}}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("set_qos on a missing volume: %v", err)
	}
	if v := m.State().Volumes["a"]; !v.QoS.IsZero() {
		t.Fatalf("a refused change left limits: %v", v.QoS)
	}
}

// FuzzSetQoSCommand: whatever set_qos entry arrives, applying it never
// leaves a volume with limits that do not validate, and a refused one
// changes nothing.
func FuzzSetQoSCommand(f *testing.F) {
	for _, ch := range []*QoSChange{
		{IOPS: &qos.Limit{Rate: 20000}},
		{WriteBytes: &qos.Limit{Rate: 400_000_000, Burst: 1 << 30}, ReadIOPS: &qos.Limit{}},
		{Bytes: &qos.Limit{Burst: 1}},
	} {
		b, _ := (&Command{Op: OpSetQoS, Volume: "a", QoS: ch}).Encode()
		f.Add(b)
	}
	f.Add([]byte(`{"op":"set_qos","volume":"a","qos":{"iops":{"rate":18446744073709551615}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := machineWith(t, &MemoryPersister{}, register(1), create("a", 1))
		before := m.State().Volumes["a"].QoS
		c, derr := DecodeCommand(b)
		if err := m.Apply(t.Context(), m.AppliedIndex()+1, b); err != nil {
			t.Fatal(err)
		}
		v := m.State().Volumes["a"]
		if v == nil {
			return // the entry deleted it
		}
		if err := v.QoS.Validate(); err != nil {
			t.Fatalf("the state holds invalid limits %v: %v", v.QoS, err)
		}
		if derr == nil && c.Op == OpSetQoS && c.Validate() != nil && v.QoS != before {
			t.Fatalf("a refused set_qos changed the limits to %v", v.QoS)
		}
	})
}
