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
