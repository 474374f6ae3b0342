package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// print writes v as JSON with -o json, else as table.
func (o *options) print(v any, table func(io.Writer)) error {
	if o.output == "json" {
		enc := json.NewEncoder(o.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// humanSize writes a byte count in binary units.
func humanSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func nodeName(id cluster.NodeID, name string) string {
	if id == 0 {
		return "none"
	}
	if name == "" {
		return id.String()
	}
	return name
}

func printCluster(w io.Writer, v api.ClusterView) {
	fmt.Fprintf(w, "Health:\t%s\n", v.Health)
	fmt.Fprintf(w, "Metadata leader:\t%s\n", nodeName(v.Leader, v.LeaderName))
	fmt.Fprintf(w, "Nodes up:\t%d of %d\n", v.NodesUp, v.Nodes)
	fmt.Fprintf(w, "Volumes healthy:\t%d of %d\n", v.VolumesHealthy, v.Volumes)
	if v.VolumesRecovering+v.VolumesDegraded > 0 {
		fmt.Fprintf(w, "Volumes recovering / degraded:\t%d / %d (basaltctl volume list says which)\n",
			v.VolumesRecovering, v.VolumesDegraded)
	}
	fmt.Fprintf(w, "Answered by:\t%s (metadata index %d)\n", v.Self, v.Applied)
	if v.Stale {
		fmt.Fprintf(w, "Warning:\tthis node could not reach the metadata leader; what it shows may be out of date\n")
	}
	for _, f := range v.Failed {
		fmt.Fprintf(w, "Failed:\tvolume %s on %s: %s\n", f.Volume, nodeName(f.Node, f.NodeName), f.Reason)
	}
}

func printNodes(w io.Writer, nodes []api.NodeView) {
	fmt.Fprintln(w, "ID\tNAME\tUP\tSTATE\tNVME\tAPI\tRAFT\tREPLICAS\tLEADING\tNOTE")
	for _, n := range nodes {
		up := "yes"
		if !n.Up {
			up = "NO"
		}
		note := n.Error
		if n.MetadataLeader {
			note = strings.TrimSpace("metadata leader " + note)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", n.ID, n.Name, up, n.State, n.NVMeAddr, n.APIAddr,
			n.RaftAddr, n.Replicas, n.Leading, note)
	}
	printScrubs(w, nodes)
}

// printScrubs writes the scrub schedules of the nodes that have one; the
// counts are those of the last completed pass, and of the running one
// so far ("+N").
func printScrubs(w io.Writer, nodes []api.NodeView) {
	header := false
	for _, n := range nodes {
		sc := n.Scrub
		if sc == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "SCRUB\tSTATE\tEVERY\tLAST COMPLETED\tNEXT DUE\tREPAIRED\tUNRECOVERABLE")
			header = true
		}
		state, every := "off", "-"
		if sc.Enabled {
			state, every = "idle", shortDuration(sc.Interval)
		}
		repaired, lost := fmt.Sprint(sc.Last.Repaired), fmt.Sprint(sc.Last.Unrecoverable)
		if sc.InProgress {
			state = fmt.Sprintf("running %.0f%%", 100*sc.Fraction)
			if sc.Pass != nil {
				repaired += fmt.Sprintf(" +%d", sc.Pass.Repaired)
				lost += fmt.Sprintf(" +%d", sc.Pass.Unrecoverable)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, state, every, when(sc.LastCompleted, "never"),
			when(sc.NextDue, "-"), repaired, lost)
	}
}

// when writes a time in UTC to the minute, or none if it is zero.
func when(t time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// shortDuration drops the zero minutes and seconds of a Go duration
// ("168h0m0s" → "168h", "1h30m0s" → "1h30m").
func shortDuration(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil || d == 0 {
		return s
	}
	out := d.String()
	if t, ok := strings.CutSuffix(out, "m0s"); ok {
		if h, ok := strings.CutSuffix(t, "h0"); ok {
			return h + "h"
		}
		return t + "m"
	}
	return out
}

func printVolumes(w io.Writer, vols []api.VolumeView) {
	if len(vols) == 0 {
		fmt.Fprintln(w, "no volumes; create one with: basaltctl volume create NAME --size 4GiB")
		return
	}
	fmt.Fprintln(w, "NAME\tSIZE\tRF\tLEADER\tHEALTH\tHOSTS\tNQN")
	for _, v := range vols {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.Name, sizeText(v), v.RF, nodeName(v.Leader, v.LeaderName),
			healthText(v), hostsText(v), v.NQN)
	}
}

// healthText is the health word with its detail: "degraded (2 of 3 replicas
// up to date)", "recovering (41%, ETA 1m20s)".
func healthText(v api.VolumeView) string {
	if v.HealthDetail == "" {
		return v.Health
	}
	return v.Health + " (" + v.HealthDetail + ")"
}

func sizeText(v api.VolumeView) string {
	s := humanSize(v.Size)
	if v.PendingSize > v.Size {
		s += " (growing to " + humanSize(v.PendingSize) + ")"
	}
	return s
}

// hostsText is the list's HOSTS column: the hosts, each with the
// mechanisms of its credentials, or what admits hosts without a list.
func hostsText(v api.VolumeView) string {
	hosts := make([]string, 0, len(v.Hosts)+1)
	if v.AllowAnyHost {
		hosts = append(hosts, "ANY HOST")
	} else if len(v.Hosts) == 0 {
		return api.NoHostNote(v.Name)
	}
	for _, h := range v.Hosts {
		if a := v.HostAuth[h]; a != "" && a != "none" {
			h += " (" + a + ")"
		}
		hosts = append(hosts, h)
	}
	return strings.Join(hosts, ",")
}

// printHosts writes the Hosts lines of volume show: one per host with
// its credentials' mechanisms.
func printHosts(w io.Writer, v api.VolumeView) {
	switch {
	case v.AllowAnyHost:
		fmt.Fprintf(w, "Hosts:\tANY HOST that reaches a node's NVMe port may read and write it (allow_any_host; "+
			"basaltctl volume set %s --allow-any-host=false admits only the listed ones)\n", v.Name)
	case len(v.Hosts) == 0:
		fmt.Fprintf(w, "Hosts:\t%s\n", api.NoHostNote(v.Name))
	}
	for i, h := range v.Hosts {
		label := "Hosts:"
		if i > 0 || v.AllowAnyHost {
			label = ""
		}
		auth := v.HostAuth[h]
		if auth == "" {
			auth = "none"
		}
		fmt.Fprintf(w, "%s\t%s (auth: %s)\n", label, h, auth)
	}
}

func printVolume(w io.Writer, v api.VolumeView, via string) {
	fmt.Fprintf(w, "Volume:\t%s\n", v.Name)
	fmt.Fprintf(w, "NQN:\t%s\n", v.NQN)
	fmt.Fprintf(w, "Size:\t%s (%d bytes, %d-byte blocks)\n", sizeText(v), v.Size, v.BlockSize)
	fmt.Fprintf(w, "Health:\t%s\n", healthText(v))
	for _, p := range v.Paths {
		if p.Failed != "" {
			fmt.Fprintf(w, "Failed:\ton %s: %s\n", nodeName(p.Node, p.Name), p.Failed)
		}
	}
	fmt.Fprintf(w, "Leader:\t%s\n", nodeName(v.Leader, v.LeaderName))
	fmt.Fprintf(w, "Replicas:\t%d\n", v.RF)
	if len(v.Want) > 0 || len(v.Learners) > 0 {
		fmt.Fprintf(w, "Moving to:\t%v (catching up: %v)\n", v.Want, v.Learners)
	}
	printHosts(w, v)
	fmt.Fprintf(w, "Limits:\t%s\n", qosText(v.QoS))        // qos.go
	fmt.Fprintf(w, "Encryption:\t%s\n", encryptionText(v)) // encryption.go
	printCompression(w, v)
	fmt.Fprintf(w, "UUID / NGUID:\t%s / %x\n", v.UUID.UUIDString(), v.NGUID[:])
	fmt.Fprintf(w, "ANA group:\t%d\n", v.ANAGroup)
	fmt.Fprintf(w, "Created:\t%s\n", v.Created)
	if v.Note != "" {
		fmt.Fprintf(w, "Note:\t%s\n", v.Note)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NODE\tADDRESS\tANA STATE\tRAFT\tAPPLIED\tCONNECTED\tNOTE")
	for _, p := range v.Paths {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", nodeName(p.Node, p.Name), p.NVMeAddr, p.ANAState, p.Role,
			p.Applied, p.Controllers, p.Error)
	}
	c := v.Connect
	if via != "" {
		c = rewriteConnect(v, via)
	}
	fmt.Fprintln(w)
	where := "a Linux host"
	if via != "" {
		where = "a host that reaches the nodes at " + via
	}
	fmt.Fprintf(w, "Attach from %s (modprobe nvme-tcp first):\n", where)
	fmt.Fprintf(w, "  every path at once:   %s\n", c.ConnectAll)
	fmt.Fprintf(w, "  list the paths:       %s\n", c.Discover)
	for i, cmd := range c.Connect {
		label := "  or path by path:"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "%-23s %s\n", label, cmd)
	}
	fmt.Fprintf(w, "  (attach every path: only the leader's path%s serves I/O and the others are ANA\n"+
		"   inaccessible until a failover, so a single path gives a controller but no usable block device\n"+
		"   whenever its node does not lead the volume)\n", leaderNote(v))
	if via != "" {
		fmt.Fprintf(w, "  (connect-all follows the addresses the nodes advertise; for it to work from there,\n"+
			"   start the nodes with advertise addresses on %s)\n", via)
	}
	if c.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", c.Note)
	}
}

// leaderNote names the node whose path is ANA optimized now, or "".
func leaderNote(v api.VolumeView) string {
	for _, p := range v.Paths {
		if p.ANAState == "optimized" {
			return fmt.Sprintf(" (now %s, %s)", nodeName(p.Node, p.Name), p.NVMeAddr)
		}
	}
	return ""
}

// rewriteConnect returns the commands with every node's host replaced by
// via (ports unchanged).
func rewriteConnect(v api.VolumeView, via string) api.Connect {
	paths := make([]api.PathView, len(v.Paths))
	for i, p := range v.Paths {
		paths[i] = p
		if _, port, err := net.SplitHostPort(p.NVMeAddr); err == nil {
			paths[i].NVMeAddr = net.JoinHostPort(via, port)
		}
	}
	vol := v.Volume
	c := api.Connect{Note: v.Connect.Note}
	for i, p := range paths {
		host, port, err := net.SplitHostPort(p.NVMeAddr)
		if err != nil {
			continue
		}
		if i == 0 {
			c.Discover = fmt.Sprintf("nvme discover -t tcp -a %s -s %s", host, port)
			c.ConnectAll = fmt.Sprintf("nvme connect-all -t tcp -a %s -s %s", host, port)
		}
		c.Connect = append(c.Connect, fmt.Sprintf("nvme connect -t tcp -a %s -s %s -n %s", host, port, vol.NQN()))
	}
	return c
}
