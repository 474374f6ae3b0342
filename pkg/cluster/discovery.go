package cluster

import (
	"net"

	"basalt/target"
)

// remoteSubsystems lists, for the discovery log of node self, every
// volume's subsystem as the other nodes holding a replica serve it: the
// volume's NQN and host access, and for each replica node but self the
// node's NVMe port (PORTID = node ID; TRADDR and TRSVCID split from
// NVMeAddr). self's own port is listed by the target for its local
// subsystems. A replica node missing from nodes, or whose NVMeAddr is not
// host:port, is left out; a volume with no other replica node is too.
// Volumes come in name order, ports in node ID order.
func remoteSubsystems(s *State, nodes []Node, self NodeID) []target.RemoteSubsystem {
	ports := nodePorts(nodes)
	var out []target.RemoteSubsystem
	for _, v := range s.VolumeList() {
		rs := target.RemoteSubsystem{NQN: v.NQN(), AllowAnyHost: v.AllowAnyHost, Hosts: v.Hosts}
		for _, n := range nodes { // in ID order
			if p, ok := ports[n.ID]; ok && n.ID != self && v.HasReplica(n.ID) {
				rs.Ports = append(rs.Ports, p)
			}
		}
		if len(rs.Ports) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// nodePorts returns the NVMe port of each node whose NVMeAddr is host:port.
func nodePorts(nodes []Node) map[NodeID]target.PortConfig {
	out := make(map[NodeID]target.PortConfig, len(nodes))
	for _, n := range nodes {
		host, port, err := net.SplitHostPort(n.NVMeAddr)
		if err != nil || host == "" || port == "" {
			continue
		}
		tls, err := target.ParseTLSMode(n.NVMeTLS)
		if err != nil {
			tls = target.TLSRequired // a mode this node does not know: do not tell hosts it is plain
		}
		out[n.ID] = target.PortConfig{ID: uint16(n.ID), TRADDR: host, TRSVCID: port, TLS: tls}
	}
	return out
}
