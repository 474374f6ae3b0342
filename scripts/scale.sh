#!/usr/bin/env bash
# scale.sh: creates SCALE_VOLUMES volumes (default 1000; rf 3, 1 MiB, file
# replicas) on a three-node basaltd cluster and prints each node's idle CPU
# (utime+stime over SCALE_IDLE, default 20s) and RSS, before any volume and
# after, and per volume (tests/cluster TestScaleVolumes). With SCALE_PERF=1
# it also records node1 with perf during the loaded idle window and prints
# the functions that take the most of its CPU (needs perf and
# kernel.perf_event_paranoid <= 2). Figures only: nothing is asserted about
# them. It takes about 2.5 minutes for 1,000 volumes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
volumes=${SCALE_VOLUMES:-1000}
idle=${SCALE_IDLE:-20s}
perfdir=""
if [[ ${SCALE_PERF:-0} == 1 ]]; then
	perfdir=$(mktemp -d /tmp/basalt-scale-perf-XXXXXX)
	echo "perf data in $perfdir"
fi

BASALT_SCALE_VOLUMES=$volumes BASALT_SCALE_IDLE=$idle BASALT_SCALE_PERF=$perfdir \
	"$GO" test -tags invariants -run '^TestScaleVolumes$' -v -count=1 -timeout 30m ./tests/cluster/ |
	grep -v '^ *time=' | grep -v '^=== '

if [[ -n $perfdir && -f $perfdir/perf.data ]]; then
	echo "node1, share of its samples (children included):"
	perf report -i "$perfdir/perf.data" --children --stdio --sort symbol -g none 2>/dev/null |
		grep -E '^ +[0-9.]+%' | grep -E 'basalt/|raft/v3|badger|tcpPeer|findRunnable|selectgo' | head -40
fi
