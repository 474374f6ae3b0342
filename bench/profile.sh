#!/usr/bin/env bash
# bench/profile.sh — where the time goes: a CPU profile of the 3-node
# cluster (bench/systems/basalt-rf3.sh, the same cluster compare.sh
# measures) under W2 (4 KiB random write, QD 32), taken with perf on all
# three basaltd processes. basaltd has no pprof endpoint; perf samples the
# Go binaries through their frame pointers and symbol table, kernel included.
#
#   bench/profile.sh                      rf 3, 1 GiB volume, 5 s ramp + 30 s profiled
#   SYSTEM=basalt-rf2 PRESET=W1 bench/profile.sh
#
# Writes $OUT/profile-$PRESET-$SYSTEM.txt (summary: the run, CPU per node,
# by package, top functions self and inclusive); perf.data stays in $WORK.
# Environment: SYSTEM [basalt-rf3], PRESET [W2], QD [32], SIZE_MIB [1024],
# RAMP [5], RUNTIME [30], FREQ (samples/s) [999], WORK
# [/var/tmp/basalt-profile], OUT [docs/bench]; BASALT_RAFT_LOG_MIB and
# BASALT_BUFFER_MIB as for compare.sh (bench/systems/cluster.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SYSTEM=${SYSTEM:-basalt-rf3} PRESET=${PRESET:-W2} QD=${QD:-32} SIZE_MIB=${SIZE_MIB:-1024}
RAMP=${RAMP:-5} RUNTIME=${RUNTIME:-30} FREQ=${FREQ:-999}
WORK=${WORK:-/var/tmp/basalt-profile} OUT=${OUT:-docs/bench}
RAW=$WORK/raw BIN=$WORK/bin
log() { echo "   $*" >&2; }
die() { echo "profile: $*" >&2; exit 1; }
command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=/dev/null
source "$ROOT/bench/systems/$SYSTEM.sh"
trap system_down_all EXIT
trap 'exit 130' INT TERM

rm -rf "$RAW" && mkdir -p "$RAW" "$BIN" "$OUT"
for c in basaltd basaltctl basalt-bench; do go build -o "$BIN/$c" "./cmd/$c"; done
system_up
dev=(--addr "$SYS_ADDRS" --nqn "$SYS_NQN" --path-timeout 30s)
"$BIN/basalt-bench" prefill "${dev[@]}" --progress off >&2
pids=$(IFS=,; echo "${SYS_PIDS[*]}")
leader=$(cluster_ctl -o json volume show bench | sed -n 's/.*"leader_name": *"\([^"]*\)".*/\1/p' | head -1)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
timeout $((RAMP + RUNTIME + 60)) "$BIN/basalt-bench" run "${dev[@]}" --preset "$PRESET" --qd "$QD" --ramp "${RAMP}s" --runtime "${RUNTIME}s" \
	--cpu-pid "$pids" --progress off >"$RAW/bench.txt" &
bpid=$!
sleep "$RAMP"
log "perf record -F $FREQ -g -p $pids for $RUNTIME s"
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }'; }
sw0=(); for p in "${SYS_PIDS[@]}"; do sw0+=("$(switches "$p")"); done
perf record -F "$FREQ" -g -p "$pids" -o "$WORK/perf.data" -- sleep "$RUNTIME" 2>"$RAW/perf.err" >&2
wait "$bpid" || die "basalt-bench failed or hung: $(tail -2 "$RAW/bench.txt"); node logs in $RAW after teardown"
sw1=(); for p in "${SYS_PIDS[@]}"; do sw1+=("$(switches "$p")"); done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
set +o pipefail # head closes perf's pipes below

# by_package: perf's flat self profile folded into Go packages (the symbol
# up to the '.' that follows its last '/'), the kernel and other DSOs.
by_package() {
	perf report -i "$WORK/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
		awk '/^ *[0-9.]+%/ {
			p = $1; sub("%", "", p); dso = $2; sym = $0; sub(/.*\] /, "", sym)
			if (dso ~ /kernel/) k = "[kernel] " ((sym ~ /tcp|skb|ip_|net_|sock|inet|__dev_queue|loopback/) ? "network" : \
				(sym ~ /futex|sched|schedule|switch|wake|idle|pick_|enqueue|dequeue|update_/) ? "scheduler, futex" : \
				(sym ~ /copy|memcpy|memset|clear_page|page|folio|shmem|filemap|mem/) ? "memory, page cache" : \
				(sym ~ /epoll|ep_|poll/) ? "epoll" : (sym ~ /ext4|xfs|bio|blk|nvme|virtio|iomap|jbd2/) ? "block, filesystem" : "other")
			else if (dso != "basaltd") k = dso
			else { n = sym; sub(/\(.*/, "", n); i = match(n, /\/[^\/]*$/); s = (i ? substr(n, i + 1) : n); j = index(s, ".");
				k = (i ? substr(n, 1, i) : "") (j ? substr(s, 1, j - 1) : s) }
			t[k] += p }
			END { for (k in t) printf "%6.2f%%  %s\n", t[k], k }' | sort -rn | head -30
}

{
	echo "# CPU profile: $SYSTEM under $PRESET (QD $QD), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# machine: $(nproc) cores, load average $load0 before, $load1 after (the machine is shared)"
	echo "# perf record -F $FREQ -g -p <the three basaltd> for $RUNTIME s after a $RAMP s ramp; volume ${SIZE_MIB} MiB, prefilled"
	echo
	echo "## basalt-bench"
	cat "$RAW/bench.txt"
	echo
	echo "## samples per basaltd (node1..3 = pids ${SYS_PIDS[*]}; the volume's leader: $leader)"
	perf script -i "$WORK/perf.data" -F pid 2>/dev/null | awk -v pids="${SYS_PIDS[*]}" '
		{ n[$1]++; t++ } END { k = split(pids, p, " "); for (i = 1; i <= k; i++)
			printf "  node%d (pid %s)  %5.1f%%\n", i, p[i], 100 * n[p[i]] / (t ? t : 1) }'
	echo
	echo "## thread context switches per I/O (voluntary + involuntary, all threads, over the profiled window)"
	iops=$(awk 'END { gsub(",", "", $7); print $7 + 0 }' "$RAW/bench.txt")
	for i in 0 1 2; do
		awk -v n=$((i + 1)) -v d=$((sw1[i] - sw0[i])) -v iops="$iops" -v t="$RUNTIME" \
			'BEGIN { printf "  node%d  %6.2f  (%d/s)\n", n, (iops > 0 ? d / (iops * t) : 0), d / t }'
	done
	echo
	echo "## Go runtime, inclusive: the monitor thread, idle threads looking for work, allocation, collection"
	perf report -i "$WORK/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
		grep -E '\] (runtime\.(sysmon|findRunnable|mallocgc|gcBgMarkWorker|usleep\.abi0|futex\.abi0))$' | head -8
	echo
	echo "## self time by package (kernel split by subsystem)"
	by_package
	echo
	echo "## top functions, self"
	perf report -i "$WORK/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -E '^ *[0-9.]+%' | head -45
	echo
	echo "## top functions, inclusive (self + callees)"
	perf report -i "$WORK/perf.data" --children --sort sym --stdio -g none 2>/dev/null | grep -E '^ *[0-9.]+%' | head -70
} >"$OUT/profile-$PRESET-$SYSTEM.txt"
log "wrote $OUT/profile-$PRESET-$SYSTEM.txt (perf.data: $WORK/perf.data)"
