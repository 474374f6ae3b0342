# cutoff.sh: a Linux host writing 1 MiB O_DIRECT blocks (every one goes
# through R2T) loses its only path in the middle of its writes; the Go side
# cuts it (cut_path) and then deletes the volume and stops the node. The host
# must give up on the dead controller (ctrl_loss_tmo) with its writers
# failing, never hanging, and disconnect.
# Needs: ADDR PORT SUBNQN HOSTNQN.

cut_writer() {
	_n=0
	while [ ! -f /tmp/stop ]; do
		dd if=/tmp/patC of="$1" bs=1M seek="$2" count=8 oflag=direct 2>>/tmp/cw.err || break
		_n=$((_n + 1))
		echo "$_n" >"/tmp/cw.$2"
	done
	echo done >"/tmp/cw.$2.rc"
}

writers_done() {
	for _o in 0 16 32 48; do [ -f "/tmp/cw.$_o.rc" ] || return 1; done
}

cutoff_flow() {
	phase cutoff-connect
	step "connect with reconnect_delay=1 ctrl_loss_tmo=4"
	capture connect timeout 60 nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn "$HOSTNQN" \
		--reconnect-delay=1 --ctrl-loss-tmo=4
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	dev=$(ns_for "$SUBNQN" 1)
	ctrl=$(ctrl_for "$SUBNQN") || die "no controller for $SUBNQN"
	kv dev "$dev"
	make_pattern /tmp/patC 8

	step "four writers of 1 MiB O_DIRECT blocks"
	rm -f /tmp/stop /tmp/cw.*
	for off in 0 16 32 48; do cut_writer "$dev" "$off" & done
	wait_until 60 "writer progress" test -s /tmp/cw.48

	phase cutoff
	step "cut the path in the middle of the writes"
	cut_path
	wait_until 30 "the controller to leave state live" state_is_not "$ctrl" live
	kv state_after_cut "$(ctrl_state "$ctrl")"
	touch /tmp/stop
	wait_until 60 "every writer to end (failed I/O, not hung)" writers_done
	kv writer_errors "$(grep -c . /tmp/cw.err 2>/dev/null || echo 0)"
	wait_until 60 "the host to drop the dead controller" no_ctrl_for "$SUBNQN"
	step "done"
}
