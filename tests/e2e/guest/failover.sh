# failover.sh: the path to the only target dies and comes back; the host must
# notice, keep its shell responsive, reconnect, resume the stalled I/O and read
# back what was written before. The caller defines target_kill and
# target_restart. Needs: ADDR PORT SUBNQN HOSTNQN.

bg_writer() {
	_n=0
	_rc=0
	while [ ! -f /tmp/stop ] && [ "$_n" -lt 1000 ]; do
		# 4 MiB of patB at 16 MiB, 64 KiB O_DIRECT writes.
		dd if=/tmp/patB of="$1" bs=64k seek=256 count=64 oflag=direct 2>/tmp/bg.err || {
			_rc=$?
			break
		}
		_n=$((_n + 1))
		echo "$_n" >/tmp/bg.count
	done
	echo "$_rc" >/tmp/bg.rc
}

bg_progress_beyond() { [ "$(cat /tmp/bg.count)" -gt "$1" ]; }

failover_flow() {
	phase failover-connect
	step "connect with reconnect_delay=1 ctrl_loss_tmo=30"
	capture connect timeout 60 nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn "$HOSTNQN" \
		--reconnect-delay=1 --ctrl-loss-tmo=30
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	dev=$(ns_for "$SUBNQN" 1)
	ctrl=$(ctrl_for "$SUBNQN") || die "no controller for $SUBNQN"
	kv dev "$dev"
	kv ctrl "$ctrl"

	step "write data before the failure"
	make_pattern /tmp/patA 8
	make_pattern /tmp/patB 4
	write_region "$dev" /tmp/patA 0 8
	verify_region "$dev" /tmp/patA 0 8

	step "background writer"
	rm -f /tmp/stop /tmp/bg.rc /tmp/bg.count /tmp/bg.err
	bg_writer "$dev" &
	wait_until 60 "background writer progress" test -s /tmp/bg.count

	phase failover
	step "kill the target"
	target_kill
	wait_until 30 "the controller to leave state live" state_is_not "$ctrl" live
	kv state_after_kill "$(ctrl_state "$ctrl")"
	sleep 2
	# The shell is alive while the I/O is stalled; the writer must not have exited.
	kv state_during_outage "$(ctrl_state "$ctrl")"
	[ -s /tmp/bg.rc ] && die "background writer exited during the outage: rc=$(cat /tmp/bg.rc) $(cat /tmp/bg.err)"
	at_restart=$(cat /tmp/bg.count)
	kv bg_count_at_restart "$at_restart"

	step "restart the target"
	target_restart
	wait_until 60 "the controller to reconnect" state_is "$ctrl" live
	kv state_after_restart "$(ctrl_state "$ctrl")"
	wait_until 60 "background writer progress after reconnect" bg_progress_beyond "$at_restart"
	touch /tmp/stop
	wait_until 60 "background writer exit" test -s /tmp/bg.rc
	kv bg_rc "$(cat /tmp/bg.rc)"
	kv bg_count "$(cat /tmp/bg.count)"
	[ "$(cat /tmp/bg.rc)" = 0 ] || die "background writer failed: $(cat /tmp/bg.err)"

	phase failover-after
	step "read back data written before and during the failure"
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'
	verify_region "$dev" /tmp/patA 0 8
	verify_region "$dev" /tmp/patB 16 4

	step "disconnect"
	capture disconnect nvme disconnect -n "$SUBNQN"
	wait_until 30 "removal of the controller" no_ctrl_for "$SUBNQN"
	step "done"
}
