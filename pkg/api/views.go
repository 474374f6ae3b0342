package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"basalt/pkg/cluster"
)

// survey is every node's local status, gathered for one answer.
type survey struct {
	nodes  []cluster.Node
	status map[cluster.NodeID]cluster.LocalStatus
	scrub  map[cluster.NodeID]*ScrubView
	errs   map[cluster.NodeID]string
	stale  bool
}

// peerTimeout bounds the wait for one node's status.
const peerTimeout = 800 * time.Millisecond

// gather confirms this node's metadata with the leader (best effort) and
// asks every node for its local status, in parallel.
func (s *Server) gather(ctx context.Context) *survey {
	sv := &survey{nodes: s.c.Nodes(), status: map[cluster.NodeID]cluster.LocalStatus{},
		scrub: map[cluster.NodeID]*ScrubView{}, errs: map[cluster.NodeID]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bctx, cancel := context.WithTimeout(ctx, peerTimeout)
		defer cancel()
		if err := s.c.ReadBarrier(bctx); err != nil {
			mu.Lock()
			sv.stale = true
			mu.Unlock()
		}
	}()
	for _, n := range sv.nodes {
		if n.ID == s.c.Self().ID {
			local := s.local()
			mu.Lock()
			sv.status[n.ID], sv.scrub[n.ID] = local.LocalStatus, local.Scrub
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			st, err := s.cfg.Client.At(n.APIAddr).Local(pctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sv.errs[n.ID] = err.Error()
				return
			}
			sv.status[n.ID], sv.scrub[n.ID] = st.LocalStatus, st.Scrub
		}()
	}
	wg.Wait()
	return sv
}

// volumeStatus returns node id's status of volume gid.
func (sv *survey) volumeStatus(id cluster.NodeID, gid cluster.GroupID) (cluster.VolumeStatus, bool) {
	for _, vs := range sv.status[id].Volumes {
		if vs.ID == gid {
			return vs, true
		}
	}
	return cluster.VolumeStatus{}, false
}

// volumeLeader returns the node that says it leads volume gid, else the
// leader most replicas name.
func (sv *survey) volumeLeader(v *cluster.Volume) cluster.NodeID {
	votes := map[cluster.NodeID]int{}
	for _, r := range v.Replicas {
		vs, ok := sv.volumeStatus(r, v.ID)
		if ok && vs.Raft.Role == "leader" {
			return r
		}
		if ok && vs.Leader != 0 {
			votes[vs.Leader]++
		}
	}
	best, n := cluster.NodeID(0), 0
	for id, c := range votes {
		if c > n || (c == n && id < best) {
			best, n = id, c
		}
	}
	return best
}

func (sv *survey) node(id cluster.NodeID) cluster.Node {
	for _, n := range sv.nodes {
		if n.ID == id {
			return n
		}
	}
	return cluster.Node{ID: id, Name: id.String()}
}

func (s *Server) getCluster(r *http.Request) (int, any, error) {
	sv := s.gather(r.Context())
	st := s.c.State()
	leader := s.c.MetadataGroup().Leader()
	cv := ClusterView{Self: s.c.Self().ID, Leader: leader, Nodes: len(sv.nodes), NodesUp: len(sv.status),
		Volumes: len(st.Volumes), Applied: s.c.Machine().AppliedIndex(), Stale: sv.stale}
	if leader != 0 {
		cv.LeaderName = sv.node(leader).Name
	}
	for _, v := range st.VolumeList() {
		switch h, _ := s.health(sv, v); h {
		case "healthy":
			cv.VolumesHealthy++
		case "recovering":
			cv.VolumesRecovering++
		case "degraded":
			cv.VolumesDegraded++
		}
		for _, r := range v.Replicas {
			if vs, ok := sv.volumeStatus(r, v.ID); ok && vs.Failed != "" {
				cv.Failed = append(cv.Failed, FailedReplica{Volume: v.Name, Node: r, NodeName: sv.node(r).Name,
					Reason: vs.Failed})
			}
		}
	}
	switch {
	case leader == 0:
		cv.Health = "unavailable"
	case cv.NodesUp < cv.Nodes || cv.VolumesHealthy < cv.Volumes:
		cv.Health = "degraded"
	default:
		cv.Health = "healthy"
	}
	return http.StatusOK, cv, nil
}

func (s *Server) getNodes(r *http.Request) (int, any, error) {
	sv := s.gather(r.Context())
	st := s.c.State()
	leader := s.c.MetadataGroup().Leader()
	out := make([]NodeView, 0, len(sv.nodes))
	for _, n := range sv.nodes {
		nv := NodeView{Node: n, MetadataLeader: n.ID == leader, Error: sv.errs[n.ID], Scrub: sv.scrub[n.ID]}
		if nv.State == "" {
			nv.State = "unregistered"
		}
		_, nv.Up = sv.status[n.ID]
		for _, v := range st.Volumes {
			if v.HasReplica(n.ID) {
				nv.Replicas++
			}
		}
		for _, vs := range sv.status[n.ID].Volumes {
			if vs.Raft.Role == "leader" {
				nv.Leading++
			}
		}
		out = append(out, nv)
	}
	return http.StatusOK, out, nil
}

func (s *Server) listVolumes(r *http.Request) (int, any, error) {
	sv := s.gather(r.Context())
	out := []VolumeView{}
	for _, v := range s.c.State().VolumeList() {
		out = append(out, s.view(sv, v, ""))
	}
	return http.StatusOK, out, nil
}

func (s *Server) getVolume(r *http.Request) (int, any, error) {
	name := r.PathValue("name")
	sv := s.gather(r.Context())
	v := s.c.State().Volumes[name]
	if v == nil {
		return 0, nil, fmt.Errorf("%w: volume %q", cluster.ErrNotFound, name)
	}
	return http.StatusOK, s.view(sv, v, ""), nil
}

// volumeView builds the view of a volume just changed.
func (s *Server) volumeView(ctx context.Context, v *cluster.Volume, note string) VolumeView {
	return s.view(s.gather(ctx), v, note)
}

// health returns the volume's health word and its detail: "healthy";
// "degraded" with how many replicas are up to date ("2 of 3"); "recovering"
// while a replica is being added, with how far it has caught up and, once
// two samples are apart, an ETA; "unavailable" with no leader (I/O waits).
func (s *Server) health(sv *survey, v *cluster.Volume) (string, string) {
	leader := sv.volumeLeader(v)
	if leader == 0 {
		return "unavailable", "no leader: I/O waits until a majority of replicas is up"
	}
	ls, _ := sv.volumeStatus(leader, v.ID)
	commit := ls.Raft.Commit
	up := 0
	for _, r := range v.Replicas {
		vs, ok := sv.volumeStatus(r, v.ID)
		if ok && vs.Error == "" && vs.Raft.Applied+cluster.CatchUpSlack >= commit {
			up++
		}
	}
	if len(v.Learners) > 0 || len(v.Want) > 0 {
		pct := 0.0
		if len(v.Learners) > 0 && commit > 0 {
			pct = 100
			for _, l := range v.Learners {
				pct = min(pct, catchUpPercent(ls.Raft, l))
			}
		}
		return "recovering", s.recovery.detail(v.ID, pct, s.cfg.Clock.Now())
	}
	if up < len(v.Replicas) {
		detail := fmt.Sprintf("%d of %d replicas up to date", up, len(v.Replicas))
		for _, r := range v.Replicas {
			if _, ok := ls.Raft.CatchingUp[r]; ok {
				detail += fmt.Sprintf("; %v catching up %.0f%%", r, catchUpPercent(ls.Raft, r))
			}
		}
		return "degraded", detail
	}
	return "healthy", ""
}

// catchUpPercent is how far member id has caught up, as the leader's
// status st tells: the bytes of the snapshot streaming to it, else its
// match index against the commit index.
func catchUpPercent(st cluster.GroupStatus, id cluster.NodeID) float64 {
	if cu, ok := st.CatchingUp[id]; ok && cu.SnapshotTotal > 0 {
		return min(100, 100*float64(cu.SnapshotSent)/float64(cu.SnapshotTotal))
	}
	if st.Commit == 0 {
		return 100
	}
	return min(100, 100*float64(st.Progress[id])/float64(st.Commit))
}

// recoveryRates remembers each recovering volume's last progress sample,
// to estimate when it finishes.
type recoveryRates struct {
	mu      sync.Mutex
	samples map[cluster.GroupID]recoverySample
}

type recoverySample struct {
	pct float64
	at  time.Time
	eta time.Duration
}

// detail returns "41%" or "41%, ETA 1m20s" for a volume at pct now.
func (r *recoveryRates) detail(id cluster.GroupID, pct float64, now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == nil {
		r.samples = map[cluster.GroupID]recoverySample{}
	}
	last, ok := r.samples[id]
	cur := recoverySample{pct: pct, at: now, eta: last.eta}
	if ok && pct > last.pct && now.After(last.at) {
		rate := (pct - last.pct) / now.Sub(last.at).Seconds()
		cur.eta = time.Duration((100 - pct) / rate * float64(time.Second)).Round(time.Second)
	}
	if !ok || pct != last.pct {
		r.samples[id] = cur
	}
	if cur.eta > 0 {
		return fmt.Sprintf("%.0f%%, ETA %v", pct, cur.eta)
	}
	return fmt.Sprintf("%.0f%%", pct)
}

func (s *Server) view(sv *survey, v *cluster.Volume, note string) VolumeView {
	vv := VolumeView{Volume: *v.Public(), NQN: v.NQN(), RF: len(v.Replicas), Leader: sv.volumeLeader(v), Note: note}
	vv.Health, vv.HealthDetail = s.health(sv, v)
	if vv.Leader != 0 {
		vv.LeaderName = sv.node(vv.Leader).Name
	}
	for _, id := range v.Replicas {
		n := sv.node(id)
		p := PathView{Node: id, Name: n.Name, NVMeAddr: n.NVMeAddr, ANAState: "unknown", Error: sv.errs[id]}
		if vs, ok := sv.volumeStatus(id, v.ID); ok {
			p.ANAState, p.Role, p.Applied, p.Controllers = vs.ANAState, vs.Raft.Role, vs.Raft.Applied, vs.Controllers
			p.Failed, p.Compression = vs.Failed, vs.Compression
			if vs.Error != "" {
				p.Error = vs.Error
			}
		} else if p.Error == "" {
			p.Error = "the node does not serve the volume (yet)"
		}
		vv.Paths = append(vv.Paths, p)
	}
	vv.Connect = connectCommands(&vv.Volume, vv.Paths)
	return vv
}

// connectCommands returns the nvme-cli commands for the volume's paths.
// Every node's discovery service lists every path, so connect-all against
// any one node attaches them all.
func connectCommands(v *cluster.Volume, paths []PathView) Connect {
	var c Connect
	for _, p := range paths {
		host, port, err := net.SplitHostPort(p.NVMeAddr)
		if err != nil {
			continue
		}
		if c.Discover == "" {
			c.Discover = fmt.Sprintf("nvme discover -t tcp -a %s -s %s", host, port)
			c.ConnectAll = fmt.Sprintf("nvme connect-all -t tcp -a %s -s %s", host, port)
		}
		c.Connect = append(c.Connect, fmt.Sprintf("nvme connect -t tcp -a %s -s %s -n %s", host, port, v.NQN()))
	}
	switch {
	case !v.AllowAnyHost && len(v.Hosts) == 0:
		c.Note = NoHostNote(v.Name)
	case !v.AllowAnyHost:
		c.Note = "the host must connect as one of the allowed host NQNs (its /etc/nvme/hostnqn, or --hostnqn NQN)"
	}
	if usesDHCHAP(v) {
		c.Note = strings.TrimPrefix(c.Note+"; a host with a DH-HMAC-CHAP secret adds --hostnqn NQN --dhchap-secret "+
			"SECRET (and --dhchap-ctrl-secret SECRET when bidirectional)", "; ")
	}
	return c
}

// usesDHCHAP reports whether a host of v (a public copy) has a
// DH-HMAC-CHAP secret.
func usesDHCHAP(v *cluster.Volume) bool {
	for _, a := range v.HostAuth {
		if strings.HasPrefix(a, "dh-hmac-chap") {
			return true
		}
	}
	return false
}

// NoHostNote is what a volume that admits no host says.
func NoHostNote(volume string) string {
	return "no host allowed yet (basaltctl host add " + volume + " NQN)"
}
