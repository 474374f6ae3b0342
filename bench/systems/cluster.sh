# shellcheck shell=bash
# Shared by basalt-rf3.sh and basalt-rf2.sh: the 3-node cluster of
# scripts/run.sh, started in the bench's scratch directory.
#
#   node i (1..3): basaltd --config $dir/node$i/basaltd.toml
#     NVMe/TCP, Raft and API on free 127.0.0.1 ports (picked at start)
#     [store]    three drive files of max(SIZE_MIB, 1 GiB) each under
#                $WORK (the disk under test, like Ceph's OSD files and
#                the disk's fio file), parity 1 (k+1 across the drives)
#     Raft log on /dev/shm (256 MiB; the reference gives Ceph's WAL/DB
#                persistent memory, here tmpfs); the store stages writes
#                in memory (256 MiB): the Raft log holds them until destaged
#   one volume "bench" of SIZE_MIB MiB with replication factor RF, created
#   with basaltctl once every node is active, used once it reports healthy.
#
# It sets SYS_ADDRS (all three NVMe/TCP addresses: basalt-bench follows
# ANA to the volume's leader, like the Linux host), SYS_NQN, SYS_PIDS (the
# three basaltd, for CPU per I/O) and registers basalt_cluster_down.

CLUSTER_PORTS=()

# cluster_free_ports N: N distinct TCP ports nobody listens on, below the
# kernel's ephemeral range (so no outgoing connection takes one meanwhile).
cluster_free_ports() {
	local n=$1 p used
	used=$(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); print a[n]}' | sort -u)
	CLUSTER_PORTS=()
	while [ ${#CLUSTER_PORTS[@]} -lt "$n" ]; do
		p=$((20000 + RANDOM % 12000))
		grep -qx "$p" <<<"$used" && continue
		[[ " ${CLUSTER_PORTS[*]} " == *" $p "* ]] && continue
		CLUSTER_PORTS+=("$p")
	done
}

# cluster_config I DIR SHM: node I's basaltd.toml on stdout. Ports:
# CLUSTER_PORTS[3(j-1)+0,1,2] are node j's NVMe, Raft and API ports.
cluster_config() {
	local i=$1 dir=$2 shm=$3 j drive_mib=$((SIZE_MIB > 1024 ? SIZE_MIB : 1024))
	# One cluster UUID per cluster directory: every initial member bootstraps with it.
	[ -s "$dir/cluster-id" ] || cat /proc/sys/kernel/random/uuid >"$dir/cluster-id"
	local nv=${CLUSTER_PORTS[3 * (i - 1)]} rf=${CLUSTER_PORTS[3 * (i - 1) + 1]} api=${CLUSTER_PORTS[3 * (i - 1) + 2]}
	cat <<CFG
# Written by bench/systems/cluster.sh.
[node]
name = "node$i"
data_dir = "$dir/node$i"

[nvme]
listen = "127.0.0.1:$nv"
advertise = "127.0.0.1:$nv"

[log]
level = "warn"

[cluster]
node_id = $i
raft_listen = "127.0.0.1:$rf"
api_listen = "127.0.0.1:$api"
bootstrap = true
initial_cluster_id = "$(cat "$dir/cluster-id")"

[security]
dir = "$dir/security/node$i"
CFG
	for j in 1 2 3; do
		cat <<PEER
  [[cluster.peer]]
  id = $j
  name = "node$j"
  raft = "127.0.0.1:${CLUSTER_PORTS[3 * (j - 1) + 1]}"
  nvme = "127.0.0.1:${CLUSTER_PORTS[3 * (j - 1)]}"
  api = "127.0.0.1:${CLUSTER_PORTS[3 * (j - 1) + 2]}"
PEER
	done
	cat <<CFG

[store]
drives = ["$dir/node$i/drive0", "$dir/node$i/drive1", "$dir/node$i/drive2"]
drive_size = "${drive_mib}MiB"
buffer = "memory"
buffer_size = "${BASALT_BUFFER_MIB:-256}MiB"
parity = 1

[raft_log]
path = "$shm/node$i.raft"
size = "${BASALT_RAFT_LOG_MIB:-256}MiB"
CFG
}

# The API is HTTPS with tokens, as make run sets it up: basaltd pki init
# writes $CLUSTER_DIR/security (basalt_cluster_up), admin.json among it.
cluster_ctl() {
	BASALT_CREDENTIALS=$CLUSTER_DIR/security/admin.json \
		"$BIN/basaltctl" --api "https://127.0.0.1:${CLUSTER_PORTS[2]}" --timeout 10s "$@"
}

# cluster_wait WHAT SECONDS CMD...: poll CMD every 0.5 s; fail (with the
# nodes' last log lines) when it never succeeds or a node exits.
cluster_wait() {
	local what=$1 secs=$2 n=0 pid
	shift 2
	until "$@"; do
		for pid in "${SYS_PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null || { log "a basaltd exited while waiting for $what"; cluster_logs; return 1; }
		done
		n=$((n + 1))
		[ $n -lt $((secs * 2)) ] || { log "timed out after $secs s waiting for $what"; cluster_logs; return 1; }
		sleep 0.5
	done
}

cluster_logs() { tail -n 8 "$CLUSTER_DIR"/node*.log >&2 || true; }

cluster_active() {
	cluster_ctl -o json cluster status 2>/dev/null | grep -q '"nodes_up": 3' &&
		[ "$(cluster_ctl -o json node list 2>/dev/null | grep -c '"state": "active"')" = 3 ]
}

cluster_healthy() { cluster_ctl -o json volume show bench 2>/dev/null | grep -q '"health": "healthy"'; }

# cluster_caught_up: every replica of the volume (a path with a Raft role)
# has applied the same index. After a prefill nothing more is written, so
# they meet once the followers have caught up with the leader.
cluster_caught_up() {
	local applied
	applied=$(cluster_ctl -o json volume show bench 2>/dev/null | awk '
		/"role":/ { replica = 1 }
		/"applied":/ { if (replica) { gsub(/[^0-9]/, "", $2); print $2 }; replica = 0 }' | sort -u)
	[ -n "$applied" ] && [ "$(wc -l <<<"$applied")" = 1 ]
}

# system_settle: called by lib.sh after the prefill. A prefill writes at
# hundreds of MiB/s, and a follower that falls behind by more than the Raft
# log (256 MiB) catches up from a snapshot: measuring then would count that
# work against the workloads.
system_settle() { cluster_wait "every replica to apply the prefill" 300 cluster_caught_up; }

# basalt_cluster_up RF: start the three nodes, create the volume, wait.
basalt_cluster_up() {
	local rf=$1 i
	CLUSTER_NAME=basalt-rf$rf CLUSTER_DIR=$WORK/basalt-rf$rf CLUSTER_SHM=/dev/shm/basalt-compare-rf$rf
	rm -rf "$CLUSTER_DIR" "$CLUSTER_SHM"
	mkdir -p "$CLUSTER_SHM"
	cluster_free_ports 9
	SYS_PIDS=()
	SYS_DOWN+=(basalt_cluster_down)
	mkdir -p "$CLUSTER_DIR"
	[ -s "$CLUSTER_DIR/cluster-id" ] || cat /proc/sys/kernel/random/uuid >"$CLUSTER_DIR/cluster-id"
	"$BIN/basaltd" pki init --dir "$CLUSTER_DIR/security" --cluster-id "$(cat "$CLUSTER_DIR/cluster-id")" \
		--nodes 1,2,3 --hosts 127.0.0.1 >/dev/null || return 1
	for i in 1 2 3; do
		mkdir -p "$CLUSTER_DIR/node$i"
		cluster_config "$i" "$CLUSTER_DIR" "$CLUSTER_SHM" >"$CLUSTER_DIR/node$i/basaltd.toml"
		"$BIN/basaltd" --config "$CLUSTER_DIR/node$i/basaltd.toml" >"$CLUSTER_DIR/node$i.log" 2>&1 &
		SYS_PIDS+=($!)
	done
	cluster_wait "3 active nodes" 90 cluster_active || return 1
	# --allow-any-host: the benchmark's hosts (basalt-bench with a generated
	# host NQN, fio, a kernel host) connect over loopback, a trusted network.
	cluster_ctl volume create bench --size "${SIZE_MIB}MiB" --rf "$rf" --allow-any-host >"$CLUSTER_DIR/create.out" 2>&1 ||
		{ cat "$CLUSTER_DIR/create.out" >&2; return 1; }
	cluster_wait "volume bench healthy" 90 cluster_healthy || return 1
	SYS_NQN=$(cluster_ctl -o json volume show bench | sed -n 's/.*"nqn": *"\([^"]*\)".*/\1/p' | head -1)
	[ -n "$SYS_NQN" ] || { log "volume show printed no NQN"; return 1; }
	SYS_ADDRS=127.0.0.1:${CLUSTER_PORTS[0]},127.0.0.1:${CLUSTER_PORTS[3]},127.0.0.1:${CLUSTER_PORTS[6]}
	log "cluster rf $rf: volume bench ${SIZE_MIB} MiB healthy; paths $SYS_ADDRS; NQN $SYS_NQN; basaltd ${SYS_PIDS[*]}"
	cluster_ctl volume show bench 2>/dev/null | sed 's/^/     /' | head -12 >&2 || true
}

basalt_cluster_down() {
	local pid
	for pid in "${SYS_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${SYS_PIDS[@]}"; do
		for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for pid in 1 2 3; do cp "$CLUSTER_DIR/node$pid.log" "$RAW/$CLUSTER_NAME.node$pid.log" 2>/dev/null || true; done
	rm -rf "$CLUSTER_DIR" "$CLUSTER_SHM"
}
