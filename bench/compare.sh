#!/usr/bin/env bash
# bench/compare.sh — one command (`make compare`): a raw socket, the raw local
# disk, Ceph RBD and Basalt, measured on this machine in one run with the same
# workloads (the presets W1-W5 and QD 1 of pkg/bench/spec.go, plus a 4 KiB random
# read/write queue-depth sweep), then docs/bench/results.{json,md} and PNG plots.
#
#   bench/compare.sh              full run: 4 GiB volume/image, 30 s per point
#   SMALL=1 bench/compare.sh      quick run: 1 GiB, 10 s per point (~25 min)
#
# Environment (defaults in brackets):
#   SYSTEMS      systems to measure, in order ["socket disk ceph basalt-rf3 basalt-rf2"];
#                socket: basalt-bench against its echo server over loopback TCP,
#                no storage (one round trip per I/O: the network floor);
#                each Basalt system NAME is started by bench/systems/NAME.sh
#                (basalt-rf3 and basalt-rf2: the 3-node cluster, replication
#                factor 3 / 2; basalt-node: one basaltd, file backend)
#   BASALT_RAFT_LOG_MIB, BASALT_BUFFER_MIB  the cluster nodes' Raft log and
#                write buffer on /dev/shm [256, 256: as scripts/run.sh]
#   SIZE_MIB     volume, image and disk-file size [4096; SMALL: 1024]
#   RUNTIME      measured seconds per point [30; SMALL: 10]
#   RAMP         warm-up seconds per point [5; SMALL: 2]
#   QD           queue depth of W1-W5 [32]
#   SWEEP_QDS    queue depths of the sweep ["1 2 4 8 16 32 64 128"]
#   FIO_CROSSCHECK  also run fio's rbd engine against Ceph [1]
#   CEPH_PROFILE BlueStore profile: auto (what the disk reports), ssd, hdd [auto]
#   WORK         scratch directory on the disk under test [/var/tmp/basalt-compare]
#   OUT          where results go [docs/bench]
#   NO_INSTALL=1 do not apt-get anything
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SMALL=${SMALL:-0}
if [ "$SMALL" = 1 ]; then
	SIZE_MIB=${SIZE_MIB:-1024} RUNTIME=${RUNTIME:-10} RAMP=${RAMP:-2}
else
	SIZE_MIB=${SIZE_MIB:-4096} RUNTIME=${RUNTIME:-30} RAMP=${RAMP:-5}
fi
QD=${QD:-32}
SWEEP_QDS=${SWEEP_QDS:-"1 2 4 8 16 32 64 128"}
SYSTEMS=${SYSTEMS:-"socket disk ceph basalt-rf3 basalt-rf2"}
FIO_CROSSCHECK=${FIO_CROSSCHECK:-1}
WORK=${WORK:-/var/tmp/basalt-compare}
OUT=${OUT:-docs/bench}
RAW=$WORK/raw
BIN=$WORK/bin
SIZE=$((SIZE_MIB << 20))
PRESETS="W1 W2 W3 W4 W5 QD1-read QD1-write"
PHASE=0
PHASES=$((3 + $(echo "$SYSTEMS" | wc -w)))

phase() { PHASE=$((PHASE + 1)); printf '\n== [%d/%d] %s (%s)\n' "$PHASE" "$PHASES" "$*" "$(date +%T)" >&2; }
log() { echo "   $*" >&2; }
die() { echo "compare: $*" >&2; exit 1; }

# shellcheck source=bench/ceph.sh
source "$ROOT/bench/ceph.sh"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

install_deps() {
	local need=() p
	command -v fio >/dev/null || need+=(fio)
	for p in ceph-mon ceph-mgr ceph-osd ceph rbd; do command -v "$p" >/dev/null || need+=("$p"); done
	[ -e /usr/include/rbd/librbd.h ] || need+=(librbd-dev)
	[ -e /usr/include/rados/librados.h ] || need+=(librados-dev)
	command -v gcc >/dev/null || need+=(gcc)
	[ ${#need[@]} -eq 0 ] && { log "fio, Ceph and librbd are installed"; return; }
	[ "${NO_INSTALL:-0}" = 1 ] && die "missing ${need[*]} and NO_INSTALL=1"
	log "installing fio ceph-mon ceph-mgr ceph-osd ceph-common librbd1 librbd-dev librados-dev gcc from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends fio ceph-mon ceph-mgr ceph-osd ceph-common librbd1 \
		librbd-dev librados-dev gcc libc6-dev >/dev/null
}

build() {
	mkdir -p "$BIN"
	go build -o "$BIN/basaltd" ./cmd/basaltd
	go build -o "$BIN/basaltctl" ./cmd/basaltctl
	if CGO_ENABLED=1 go build -tags ceph -o "$BIN/basalt-bench" ./cmd/basalt-bench; then
		RBD_ENGINE=basalt-bench
		log "basalt-bench built with its RBD backend (librbd): one load generator for every system"
	else
		go build -o "$BIN/basalt-bench" ./cmd/basalt-bench
		RBD_ENGINE=fio
		log "basalt-bench built WITHOUT librbd: Ceph is measured with fio's rbd engine only"
	fi
}

cleanup() {
	set +e
	[ ${#CEPH_PIDS[@]} -gt 0 ] && ceph_down
	system_down_all
}
trap cleanup EXIT
trap 'exit 130' INT TERM

main() {
	local t0=$SECONDS sys
	phase "setup: packages, build, machine"
	install_deps
	build
	rm -rf "$RAW"
	mkdir -p "$RAW" "$OUT"
	FIO_ENGINE=$(pick_fio_engine)
	write_meta >"$RAW/meta.json"
	log "size ${SIZE_MIB} MiB, ${RAMP}+${RUNTIME} s per point, QD $QD, sweep QDs: $SWEEP_QDS, fio engine $FIO_ENGINE"
	for sys in $SYSTEMS; do
		case $sys in
		socket) phase "raw socket: basalt-bench's echo server over loopback TCP (the network floor)"; measure_socket ;;
		disk) phase "raw disk: fio $FIO_ENGINE O_DIRECT on $WORK/disk"; measure_disk ;;
		ceph) phase "Ceph RBD: 1 mon, 1 mgr, 3 OSDs, pool size 3"; measure_ceph ;;
		*) phase "Basalt: $sys"; measure_basalt "$sys" ;;
		esac
	done
	phase "report: $OUT/results.json, results.md, plots"
	go run ./bench/report -raw "$RAW" -out "$OUT"
	phase "done in $(((SECONDS - t0) / 60)) min $(((SECONDS - t0) % 60)) s"
	# sed, not head: head would end early and pipefail turn SIGPIPE into a failure
	sed -n '/^| workload/,/^$/p' "$OUT/results.md" | sed -n '1,60p' >&2
}

main "$@"
