# shellcheck shell=bash
# Measurement helpers for compare.sh (sourced). Raw results go to $RAW:
#   SYSTEM.bb.TAG.json        basalt-bench JSON (a list of results)
#   SYSTEM.fio.WORKLOAD.json  fio JSON; SYSTEM.fio.WORKLOAD.cpu: daemon CPU seconds
# bench/report turns them into results.json, results.md and plots.

SYS_PIDS=()
SYS_DOWN=()
SOCKET_PID=""

# pick_fio_engine: io_uring where the kernel allows it, else libaio.
pick_fio_engine() {
	mkdir -p "$WORK/disk"
	if fio --name=probe --ioengine=io_uring --direct=1 --filename="$WORK/disk/probe" --size=1m \
		--rw=read --bs=4k --runtime=1 --output=/dev/null >/dev/null 2>&1; then
		echo io_uring
	else
		echo libaio
	fi
	rm -f "$WORK/disk/probe"
}

# rotational: what the disk under $WORK reports (Ceph picks its HDD or SSD
# profile from it).
rotational() {
	local src dev
	src=$(df --output=source "$WORK" | tail -1)
	dev=$(basename "$src")
	[ -e "/sys/block/$dev" ] || dev=$(lsblk -no pkname "$src" 2>/dev/null | head -1)
	cat "/sys/block/$dev/queue/rotational" 2>/dev/null || echo '?'
}

write_meta() {
	local cpu mem disk
	cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
	mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
	disk=$(df -h "$WORK" | awk 'NR==2 {print $1 " (" $2 ")"}')
	cat <<META
{"date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "machine": "$(nproc) cores ($cpu), $mem RAM, kernel $(uname -r), disk $disk, rotational=$(rotational)",
 "config": "size ${SIZE_MIB} MiB, ramp ${RAMP} s + runtime ${RUNTIME} s per point, W1-W5 at QD ${QD} x 1 job, sweep QDs ${SWEEP_QDS// /,}; disk: fio ${FIO_ENGINE} O_DIRECT on a file; Ceph $(ceph --version 2>/dev/null | awk '{print $3}'): 1 mon, 1 mgr, 3 BlueStore OSDs on files (WAL/DB on tmpfs), pool size 3, rbd_cache=false, BlueStore profile ${CEPH_PROFILE:-auto}, driven by ${RBD_ENGINE:-?}; Basalt: basalt-bench over NVMe/TCP; socket: basalt-bench against its echo server over loopback TCP, no storage; everything on 127.0.0.1",
 "small": $([ "$SMALL" = 1 ] && echo true || echo false)}
META
}

# cpu_of PIDS...: total utime+stime of the processes, in clock ticks.
cpu_of() {
	local pid total=0 f
	local -a fields
	for pid in "$@"; do
		f=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
		read -r -a fields <<<"$f"
		# after the command name: field 3 (state) is fields[0]; utime 14, stime 15.
		total=$((total + fields[11] + fields[12]))
	done
	echo "$total"
}

# fio_shape WORKLOAD: fio options for a workload name.
fio_shape() {
	case $1 in
	W1) echo "--rw=randread --bs=4k --iodepth=$QD" ;;
	W2) echo "--rw=randwrite --bs=4k --iodepth=$QD" ;;
	W3) echo "--rw=randrw --rwmixread=80 --bs=8k --iodepth=$QD" ;;
	W4) echo "--rw=randrw --rwmixread=70 --percentage_random=80 --bs=16k --iodepth=$QD" ;;
	W5) echo "--rw=randrw --rwmixread=50 --percentage_random=50 --bs=32k --iodepth=$QD" ;;
	QD1-read) echo "--rw=randread --bs=4k --iodepth=1" ;;
	QD1-write) echo "--rw=randwrite --bs=4k --iodepth=1" ;;
	sweep-read-qd*) echo "--rw=randread --bs=4k --iodepth=${1#sweep-read-qd}" ;;
	sweep-write-qd*) echo "--rw=randwrite --bs=4k --iodepth=${1#sweep-write-qd}" ;;
	*) die "unknown workload $1" ;;
	esac
}

# run_fio SYSTEM WORKLOAD TARGET_OPTS [PIDS...]: one fio point; the daemon CPU
# is sampled at the end of the ramp and after the run.
run_fio() {
	local sys=$1 w=$2 target=$3
	shift 3
	local out=$RAW/$sys.fio.$w.json c0 c1
	# shellcheck disable=SC2046,SC2086
	fio --name="$w" $target $(fio_shape "$w") --numjobs=1 --time_based --runtime="$RUNTIME" \
		--ramp_time="$RAMP" --norandommap --randrepeat=0 --lat_percentiles=1 --group_reporting \
		--output-format=json --output="$out" >/dev/null 2>"$out.err" &
	local fpid=$!
	sleep "$RAMP"
	c0=$(cpu_of "$@")
	wait "$fpid" || { log "fio $sys $w failed: $(tail -3 "$out.err")"; return 1; }
	c1=$(cpu_of "$@")
	[ $# -gt 0 ] && echo "$((c1 - c0))" >"$RAW/$sys.fio.$w.cpu"
	log "$(printf '%-16s %-16s' "$sys" "$w") $(fio_summary "$out")"
}

fio_summary() {
	grep -m2 -E '"iops" :' "$1" | awk '{gsub(",","",$3); s+=$3} END {printf "%.0f IOPS (fio)", s}'
}

# bb SYSTEM TAG ARGS...: one basalt-bench invocation (a list of points).
# A system that stops answering must not hang the whole comparison: the
# invocation is bounded by 16 points' time plus 5 minutes.
bb() {
	local sys=$1 tag=$2
	shift 2
	timeout $((16 * (RAMP + RUNTIME) + 300)) "$BIN/basalt-bench" run "$@" --ramp "${RAMP}s" --runtime "${RUNTIME}s" \
		--progress "${PROGRESS:-auto}" --json "$RAW/$sys.bb.$tag.json" >"$RAW/$sys.bb.$tag.txt" ||
		{ log "basalt-bench $sys $tag failed or hung (rc $?): $(tail -2 "$RAW/$sys.bb.$tag.txt" | tr '\n' ' ')"; return 0; }
	sed 's/^/   /' "$RAW/$sys.bb.$tag.txt" | sed -n '1!p' >&2
}

# bb_all SYSTEM DEVICE_ARGS... : the presets and the two sweeps.
bb_all() {
	local sys=$1
	shift
	local pids
	pids=$(IFS=,; echo "${SYS_PIDS[*]}")
	log "$sys: W1-W5, QD 1"
	bb "$sys" main "$@" --preset "${PRESETS// /,}" --qd "$QD" --cpu-pid "$pids"
	log "$sys: 4 KiB random read sweep, QD ${SWEEP_QDS// /,}"
	bb "$sys" sweep-read "$@" --bs 4k --read 100 --random 100 --qd "${SWEEP_QDS// /,}" --label sweep-read --cpu-pid "$pids"
	log "$sys: 4 KiB random write sweep"
	bb "$sys" sweep-write "$@" --bs 4k --read 0 --random 100 --qd "${SWEEP_QDS// /,}" --label sweep-write --cpu-pid "$pids"
}

all_workloads() {
	local q
	echo "$PRESETS"
	for q in $SWEEP_QDS; do echo "sweep-read-qd$q"; done
	for q in $SWEEP_QDS; do echo "sweep-write-qd$q"; done
}

# measure_socket: the network floor. basalt-bench's echo server, a process
# of its own like a storage daemon, answers every I/O over loopback TCP and
# stores nothing; its CPU per I/O is reported like a daemon's. Presets only:
# nothing to prefill, and the sweeps would add nothing to a floor.
measure_socket() {
	local out=$RAW/socket.server.log addr="" pid _
	"$BIN/basalt-bench" socket-server --listen 127.0.0.1:0 >"$out" 2>&1 &
	pid=$!
	SOCKET_PID=$pid
	SYS_DOWN+=(socket_down)
	for _ in $(seq 100); do
		addr=$(sed -n 's/^listening on //p' "$out")
		[ -n "$addr" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$addr" ] || die "basalt-bench socket-server did not start: $(tail -3 "$out")"
	SYS_PIDS=("$pid")
	log "socket: W1-W5, QD 1 against the echo server at $addr (pid $pid)"
	bb socket main --engine socket --addr "$addr" --preset "${PRESETS// /,}" --qd "$QD" --cpu-pid "$pid"
	system_down_all
}

# socket_down stops measure_socket's echo server.
socket_down() {
	[ -n "${SOCKET_PID:-}" ] || return 0
	kill -TERM "$SOCKET_PID" 2>/dev/null || true
	wait "$SOCKET_PID" 2>/dev/null || true
	SOCKET_PID=""
}

measure_disk() {
	local f=$WORK/disk/fio.img w
	mkdir -p "$WORK/disk"
	log "prefilling $f (${SIZE_MIB} MiB, sequential 1 MiB writes)"
	fio --name=prefill --filename="$f" --size="$SIZE" --rw=write --bs=1m --iodepth=16 \
		--ioengine="$FIO_ENGINE" --direct=1 --output=/dev/null >/dev/null
	for w in $(all_workloads); do
		run_fio disk "$w" "--ioengine=$FIO_ENGINE --direct=1 --filename=$f --size=$SIZE"
	done
	rm -f "$f"
}

measure_ceph() {
	# shellcheck disable=SC2034 # read by bench/ceph.sh
	CEPH_DIR=$WORK/ceph CEPH_SHM=/dev/shm/basalt-compare-ceph CEPH_IMAGE_SIZE=$SIZE
	# shellcheck disable=SC2034 # read by bench/ceph.sh
	CEPH_OSD_SIZE=$((SIZE * 2 > 8 << 30 ? SIZE * 2 : 8 << 30))
	ceph_up
	local dev=(--engine rbd --ceph-conf "$CEPH_CONF" --pool "$CEPH_POOL" --image "$CEPH_IMAGE")
	SYS_PIDS=("${CEPH_PIDS[@]}")
	if [ "$RBD_ENGINE" = basalt-bench ]; then
		log "prefilling rbd/$CEPH_IMAGE with basalt-bench"
		"$BIN/basalt-bench" prefill "${dev[@]}" --progress "${PROGRESS:-auto}" >&2
		bb_all ceph-size3 "${dev[@]}"
	else
		log "prefilling rbd/$CEPH_IMAGE with fio"
		CEPH_CONF=$CEPH_CONF fio --name=prefill --ioengine=rbd --clientname=admin --pool="$CEPH_POOL" \
			--rbdname="$CEPH_IMAGE" --rw=write --bs=1m --iodepth=16 --output=/dev/null >/dev/null
	fi
	if [ "$FIO_CROSSCHECK" = 1 ] || [ "$RBD_ENGINE" = fio ]; then
		local sys=ceph-size3-fio ws=$PRESETS w
		[ "$RBD_ENGINE" = fio ] && { sys=ceph-size3; ws=$(all_workloads); }
		log "fio rbd engine: ${ws//$'\n'/ }"
		for w in $ws; do
			CEPH_CONF=$CEPH_CONF run_fio "$sys" "$w" \
				"--ioengine=rbd --clientname=admin --pool=$CEPH_POOL --rbdname=$CEPH_IMAGE" "${CEPH_PIDS[@]}"
		done
	fi
	ceph_down
	SYS_PIDS=()
}

# measure_basalt NAME: bench/systems/NAME.sh defines system_up, which sets
# SYS_ADDRS (comma-separated paths), SYS_NQN and SYS_PIDS, registers its
# teardown in SYS_DOWN, and returns 2 when the system is not available yet.
# It may define system_settle, run after the prefill: it returns once the
# system is done with it (a cluster's followers caught up).
measure_basalt() {
	local name=$1 rc=0
	[ -f "$ROOT/bench/systems/$name.sh" ] || die "no bench/systems/$name.sh"
	unset -f system_settle # optional: only the systems that define it
	# shellcheck source=/dev/null
	source "$ROOT/bench/systems/$name.sh"
	system_up || rc=$?
	if [ $rc = 2 ]; then
		log "$name is not available yet: skipped"
		return 0
	fi
	[ $rc = 0 ] || die "$name did not start"
	local dev=(--addr "$SYS_ADDRS" --nqn "$SYS_NQN" --path-timeout 30s)
	log "prefilling $SYS_NQN with basalt-bench"
	"$BIN/basalt-bench" prefill "${dev[@]}" --progress "${PROGRESS:-auto}" >&2
	if declare -F system_settle >/dev/null; then
		system_settle || die "$name did not settle after the prefill"
	fi
	bb_all "$name" "${dev[@]}"
	system_down_all
}

system_down_all() {
	local f
	for f in "${SYS_DOWN[@]}"; do "$f" || true; done
	SYS_DOWN=()
	SYS_PIDS=()
}
