# shellcheck shell=bash
# Shared by basalt-rf3.sh and basalt-rf2.sh: start the cluster through
# $BASALT_CLUSTER_UP and read back where it listens.

basalt_cluster_up() {
	local rf=$1 dir=$WORK/basalt-rf$1 line
	rm -rf "$dir"
	mkdir -p "$dir"
	$BASALT_CLUSTER_UP "$rf" "$SIZE_MIB" "$dir" >"$dir/up.out" 2>"$dir/up.err" || { tail -5 "$dir/up.err" >&2; return 1; }
	while read -r line; do
		case $line in
		ADDRS=*) SYS_ADDRS=${line#ADDRS=} ;;
		NQN=*) SYS_NQN=${line#NQN=} ;;
		PIDS=*) read -r -a SYS_PIDS <<<"${line#PIDS=}" ;;
		esac
	done <"$dir/up.out"
	[ -n "${SYS_ADDRS:-}" ] && [ -n "${SYS_NQN:-}" ] || { echo "BASALT_CLUSTER_UP printed no ADDRS/NQN" >&2; return 1; }
	CLUSTER_DIR=$dir
	SYS_DOWN+=(basalt_cluster_down)
	log "cluster rf $rf: paths $SYS_ADDRS, NQN $SYS_NQN, daemons ${SYS_PIDS[*]}"
}

basalt_cluster_down() {
	local pid
	for pid in "${SYS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${SYS_PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	rm -rf "$CLUSTER_DIR"
}
