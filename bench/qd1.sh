#!/usr/bin/env bash
# bench/qd1.sh — QD 1 latency against its floors, side by side: basalt-bench
# against its echo server (one loopback round trip, no storage), against one
# basaltd with a file backend (bench/systems/basalt-node.sh: one round trip
# and one disk I/O), and against the 3-node cluster (basalt-rf3.sh: a read is
# one round trip and one disk read; a write two round trips and no disk, as
# it is acknowledged from the write buffer). All three run at once and are
# driven in turn, ROUNDS times, so that the machine's noise hits each alike.
#
#   bench/qd1.sh                 2 rounds, 1 + 5 s per point
#
# Prints one line per round and workload: mean latency of each (µs).
# Environment: ROUNDS [2], RAMP [1], RUNTIME [5], SIZE_MIB [256], WORK
# [/var/tmp/basalt-qd1].
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-2} RAMP=${RAMP:-1} RUNTIME=${RUNTIME:-5} SIZE_MIB=${SIZE_MIB:-256}
WORK=${WORK:-/var/tmp/basalt-qd1}
RAW=$WORK/raw BIN=$WORK/bin
log() { echo "   $*" >&2; }
die() { echo "qd1: $*" >&2; exit 1; }

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
rm -rf "$RAW" && mkdir -p "$RAW" "$BIN"
for c in basaltd basaltctl basalt-bench; do go build -o "$BIN/$c" "./cmd/$c"; done

"$BIN/basalt-bench" socket-server --listen 127.0.0.1:0 >"$RAW/socket.out" 2>&1 &
SOCKET_PID=$!
SYS_DOWN+=(socket_down)
trap system_down_all EXIT
trap 'exit 130' INT TERM
saddr=""
for _ in $(seq 100); do
	saddr=$(sed -n 's/^listening on //p' "$RAW/socket.out")
	[ -n "$saddr" ] && break
	sleep 0.1
done
[ -n "$saddr" ] || die "the echo server did not start: $(tail -3 "$RAW/socket.out")"

# shellcheck source=bench/systems/basalt-node.sh
source "$ROOT/bench/systems/basalt-node.sh"
system_up || die "basalt-node did not start"
node=(--addr "$SYS_ADDRS" --nqn "$SYS_NQN")
# shellcheck source=bench/systems/basalt-rf3.sh
source "$ROOT/bench/systems/basalt-rf3.sh"
system_up || die "basalt-rf3 did not start"
rf3=(--addr "$SYS_ADDRS" --nqn "$SYS_NQN" --path-timeout 30s)
log "prefilling both volumes (${SIZE_MIB} MiB)"
"$BIN/basalt-bench" prefill "${node[@]}" --progress off >&2
"$BIN/basalt-bench" prefill "${rf3[@]}" --progress off >&2

# mean_us ARGS...: one QD 1 run's mean latency in µs (the table's 9th column).
mean_us() {
	"$BIN/basalt-bench" run "$@" --ramp "${RAMP}s" --runtime "${RUNTIME}s" --progress off 2>/dev/null |
		tail -1 | awk '{print $9}'
}

for round in $(seq "$ROUNDS"); do
	for p in QD1-write QD1-read; do
		s=$(mean_us --engine socket --addr "$saddr" --preset "$p")
		n=$(mean_us "${node[@]}" --preset "$p")
		c=$(mean_us "${rf3[@]}" --preset "$p")
		echo "round $round $p mean µs: socket $s, basalt-node $n, basalt-rf3 $c"
	done
done
