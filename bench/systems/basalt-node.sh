# shellcheck shell=bash
# basalt-node: one basaltd serving one volume from a file backend (O_DIRECT)
# on the disk under test, NVMe/TCP on 127.0.0.1. No replication: the
# single-node ceiling of the target and host paths.

system_up() {
	local dir=$WORK/basalt-node port=${BASALT_BENCH_PORT:-14420}
	rm -rf "$dir"
	mkdir -p "$dir"
	cat >"$dir/node1.toml" <<CFG
[node]
name = "node1"

[nvme]
listen = "127.0.0.1:$port"
advertise = "127.0.0.1:$port"
port_id = 1

[[subsystem]]
nqn = "nqn.2026-11.io.basalt:bench"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "file"
  path = "$dir/vol1.img"
  size = "${SIZE_MIB}MiB"
  block_size = 4096
CFG
	"$BIN/basaltd" --config "$dir/node1.toml" >"$dir/basaltd.log" 2>&1 &
	BASALT_NODE_PID=$!
	SYS_PIDS=("$BASALT_NODE_PID")
	SYS_ADDRS=127.0.0.1:$port
	# shellcheck disable=SC2034 # read by lib.sh
	SYS_NQN=nqn.2026-11.io.basalt:bench
	SYS_DOWN+=(basalt_node_down)
	local n=0
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
		n=$((n + 1))
		[ $n -lt 100 ] || { tail -5 "$dir/basaltd.log" >&2; return 1; }
		sleep 0.1
	done
	log "basaltd pid ${SYS_PIDS[0]} on $SYS_ADDRS, ${SIZE_MIB} MiB file backend"
}

# basalt_node_down stops the basaltd system_up started (its own PID: another
# system started after it may have set SYS_PIDS anew, as bench/qd1.sh does).
basalt_node_down() {
	local pid=${BASALT_NODE_PID:-}
	if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	BASALT_NODE_PID=""
	rm -rf "$WORK/basalt-node"
}
