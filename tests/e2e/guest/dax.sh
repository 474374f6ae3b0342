# dax.sh: basaltd runs inside the guest, a one-node cluster whose Raft log,
# metadata and drives live on ext4 mounted -o dax on qemu's emulated NVDIMM;
# the guest's own kernel host connects to it over loopback (nvme-tcp), writes,
# flushes and verifies through it, survives a kill -9 of basaltd in the
# middle of flushed writes, and times 4 KiB QD 1 writes with the Raft log
# persisted by cache-line write-back (persist = "auto": MAP_SYNC, ModeDAX)
# then by msync (persist = "msync") on the same files, then by write-back again.
# Needs: HOSTNQN CLUSTER_ID VOLUME VOLUME_SIZE LAT_N, and basaltd, basaltctl
# and guestio in /bin (carried by the Go side).
#
# The emulated NVDIMM has no label space (no label-size= on -device nvdimm):
# the kernel shows its region as one label-less namespace, namespace0.0 in
# raw mode (/dev/pmem0). ndctl create-namespace -f -e namespace0.0 -m fsdax
# reconfigures it in place: it writes a pfn info block at the start of the
# namespace (struct pages kept on the device, map=dev, 2 MiB alignment), and
# /dev/pmem0 comes back in fsdax mode, a few MiB smaller.

DAXMNT=/mnt/pmem
API=https://127.0.0.1:9420
NVME_PORT=4420
SEC=/tmp/basalt-security # basaltd pki init writes it once (write_config)

ctl() { BASALT_CREDENTIALS=$SEC/admin.json basaltctl --api "$API" "$@"; }

# die, as lib.sh's, after the end of the last basaltd's log.
die() {
	[ -n "${BASALTD_LOG:-}" ] && basaltd_dump_log && basaltd_warnings
	echo "BASALT-E2E-FAIL $*"
	exit 1
}

dax_setup() {
	phase dax-setup
	run modload nfit nd_pmem
	wait_until 30 "the NVDIMM's namespace" test -e /sys/bus/nd/devices/namespace0.0
	capture ndctl-before ndctl list -N -R
	kv ns_mode_before "$(cat /sys/bus/nd/devices/namespace0.0/mode)"
	capture create-namespace ndctl create-namespace -f -e namespace0.0 -m fsdax
	# sysfs says "memory" for a namespace claimed by a pfn device; ndctl
	# calls that mode fsdax.
	kv ns_sysfs_mode "$(cat /sys/bus/nd/devices/namespace0.0/mode)"
	kv ns_mode "$(ndctl list -n namespace0.0 | sed -n 's/.*"mode": *"\([^"]*\)".*/\1/p')"
	wait_until 30 "/dev/pmem0" test -b /dev/pmem0
	kv pmem_dax "$(cat /sys/block/pmem0/queue/dax)"
	run mkfs.ext4 -q -F -b 4096 /dev/pmem0
	run mkdir -p "$DAXMNT"
	run mount -t ext4 -o dax /dev/pmem0 "$DAXMNT"
	kv dax_mount "$(grep " $DAXMNT " /proc/mounts)"
}

# persist_bench: pkg/pmem's Persist alone (no basaltd) on a file of the
# DAX mount, with MAP_SYNC and cache-line write-back, then with msync.
persist_bench() {
	phase dax-persist
	run guestio persist -file "$DAXMNT/bench.region" -n 2000 -label dax
	run guestio persist -file "$DAXMNT/bench.region" -n 2000 -label msync -msync
	run rm -f "$DAXMNT/bench.region"
}

# write_config PERSIST: basaltd.toml for the one-node cluster, its state on
# the DAX mount, raft_log.persist = PERSIST.
write_config() {
	[ -s "$SEC/ca.crt" ] || basaltd pki init --dir "$SEC" --cluster-id "$CLUSTER_ID" --nodes 1 --hosts 127.0.0.1 >/dev/null ||
		die "basaltd pki init"
	cat >/tmp/basaltd.toml <<EOF
[node]
name = "node1"
data_dir = "$DAXMNT/node1"

[nvme]
listen = "127.0.0.1:$NVME_PORT"
advertise = "127.0.0.1:$NVME_PORT"

[log]
level = "info"

[cluster]
node_id = 1
raft_listen = "127.0.0.1:9520"
api_listen = "127.0.0.1:9420"
bootstrap = true
initial_cluster_id = "$CLUSTER_ID"

[security]
dir = "$SEC/node1"

  [[cluster.peer]]
  id = 1
  name = "node1"
  raft = "127.0.0.1:9520"
  nvme = "127.0.0.1:$NVME_PORT"
  api = "127.0.0.1:9420"

[store]
drives = ["$DAXMNT/node1/d0", "$DAXMNT/node1/d1", "$DAXMNT/node1/d2"]
drive_size = "96MiB"
buffer = "memory"
buffer_size = "32MiB"
parity = 1
chunk_size = "32KiB"
segment_stripes = 8

[raft_log]
path = "$DAXMNT/raft.log"
size = "64MiB"
persist = "$1"
EOF
}

BASALTD_RUN=0
# basaltd_start PERSIST LABEL: start basaltd (log /tmp/basaltd.N.log), wait
# until its API answers, and report its "raft log mapped" line as
# raftlog_LABEL.
basaltd_start() {
	BASALTD_RUN=$((BASALTD_RUN + 1))
	BASALTD_LOG=/tmp/basaltd.$BASALTD_RUN.log
	write_config "$1"
	echo "+ basaltd (persist=$1, log $BASALTD_LOG)"
	basaltd --config /tmp/basaltd.toml >"$BASALTD_LOG" 2>&1 &
	BASALTD_PID=$!
	wait_until 90 "basaltd's API (run $BASALTD_RUN)" ctl cluster status
	kv "raftlog_$2" "$(grep 'raft log mapped' "$BASALTD_LOG" | tail -n 1)"
}

basaltd_dump_log() {
	echo "BASALT-E2E-BEGIN basaltd-log-$BASALTD_RUN"
	tail -n 40 "$BASALTD_LOG"
	echo "BASALT-E2E-END basaltd-log-$BASALTD_RUN"
}

# basaltd_signal SIG: send SIG and wait for the process; its status is
# left in BASALTD_RC.
basaltd_signal() {
	echo "+ kill -$1 basaltd ($BASALTD_PID)"
	kill "-$1" "$BASALTD_PID"
	wait "$BASALTD_PID"
	BASALTD_RC=$?
}

has_leader() { ctl -o json cluster status | grep -q '"leader": *[1-9]'; }
volume_healthy() { ctl -o json volume show "$VOLUME" | grep -q '"health": *"healthy"'; }
acked() { grep -c . "$1" 2>/dev/null || echo 0; }
acked_beyond() { [ "$(acked "$1")" -gt "$2" ]; }

dax_flow() {
	dax_setup
	persist_bench

	phase dax-start
	basaltd_start auto dax
	wait_until 60 "a metadata leader" has_leader
	capture volume-create ctl volume create "$VOLUME" --size "$VOLUME_SIZE" --rf 1 --host "$HOSTNQN"
	wait_until 60 "volume $VOLUME healthy" volume_healthy
	nqn=$(ctl -o json volume show "$VOLUME" | sed -n 's/.*"nqn": *"\([^"]*\)".*/\1/p' | head -n 1)
	[ -n "$nqn" ] || die "no NQN for volume $VOLUME"
	kv subnqn "$nqn"
	capture connect timeout 60 nvme connect -t tcp -a 127.0.0.1 -s "$NVME_PORT" -n "$nqn" --hostnqn "$HOSTNQN" \
		--reconnect-delay=1 --ctrl-loss-tmo=60
	wait_until 30 "namespace 1 of $nqn" has_ns "$nqn" 1
	dev=$(ns_for "$nqn" 1)
	ctrl=$(ctrl_for "$nqn") || die "no controller for $nqn"
	kv dev "$dev"

	phase dax-io
	step "write, flush and verify 256 blocks; write the latency region"
	run guestio write -dev "$dev" -lba 0 -n 256 -gen 1 -ack /tmp/ack.A
	run guestio verify -dev "$dev" -ack /tmp/ack.A
	run guestio write -dev "$dev" -lba 1024 -n "$LAT_N" -gen 1 -ack /tmp/ack.L

	phase dax-lat
	run guestio lat -dev "$dev" -lba 1024 -n "$LAT_N" -label dax

	phase dax-kill
	step "kill -9 basaltd in the middle of flushed writes, restart it on the same files"
	rm -f /tmp/stop /tmp/ack.B /tmp/writer.rc
	(
		guestio write -dev "$dev" -lba 8192 -n 8000 -gen 2 -ack /tmp/ack.B -stop /tmp/stop >/tmp/writer.out 2>&1
		echo $? >/tmp/writer.rc
	) &
	wait_until 120 "64 acknowledged writes before the kill" acked_beyond /tmp/ack.B 63
	basaltd_signal 9
	at_kill=$(acked /tmp/ack.B)
	kv acked_at_kill "$at_kill"
	kv basaltd_rc_kill "$BASALTD_RC"
	wait_until 30 "the controller to leave state live" state_is_not "$ctrl" live
	kv state_after_kill "$(ctrl_state "$ctrl")"
	[ -s /tmp/writer.rc ] && die "the writer ended while basaltd was down: $(cat /tmp/writer.out)"
	basaltd_start auto dax_restart
	wait_until 90 "the controller to reconnect" state_is "$ctrl" live
	wait_until 120 "64 acknowledged writes after the restart" acked_beyond /tmp/ack.B $((at_kill + 63))
	touch /tmp/stop
	wait_until 60 "the writer to end" test -s /tmp/writer.rc
	kv writer_rc "$(cat /tmp/writer.rc)"
	[ "$(cat /tmp/writer.rc)" = 0 ] || die "the writer failed: $(cat /tmp/writer.out)"
	kv acked_total "$(acked /tmp/ack.B)"
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'
	capture verify-after-kill sh -c "guestio verify -dev $dev -ack /tmp/ack.A && guestio verify -dev $dev -ack /tmp/ack.B"

	phase dax-msync
	step "restart basaltd with raft_log.persist = msync on the same files"
	basaltd_signal TERM
	kv basaltd_rc_term "$BASALTD_RC"
	basaltd_start msync msync
	wait_until 90 "the controller to reconnect" state_is "$ctrl" live
	run guestio verify -dev "$dev" -ack /tmp/ack.B
	run guestio lat -dev "$dev" -lba 1024 -n "$LAT_N" -label msync

	step "back to persist = auto for a second cache-line write-back run"
	basaltd_signal TERM
	kv basaltd_rc_term2 "$BASALTD_RC"
	basaltd_start auto dax_again
	wait_until 90 "the controller to reconnect" state_is "$ctrl" live
	run guestio lat -dev "$dev" -lba 1024 -n "$LAT_N" -label dax2

	phase dax-end
	capture disconnect nvme disconnect -n "$nqn"
	wait_until 30 "removal of the controller" no_ctrl_for "$nqn"
	basaltd_signal TERM
	kv basaltd_rc_end "$BASALTD_RC"
	basaltd_warnings
	step "done"
}

# basaltd_warnings: every run's WARN and ERROR lines, for the Go side to
# show when the test fails.
basaltd_warnings() {
	echo "BASALT-E2E-BEGIN basaltd-warnings"
	grep -h -E 'level=(WARN|ERROR)' /tmp/basaltd.*.log | tail -n 60
	echo "BASALT-E2E-END basaltd-warnings"
}
