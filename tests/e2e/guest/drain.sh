# drain.sh: a Linux host attached through native NVMe multipath to a volume
# of a 4-node cluster (rf 3), while the node that leads the volume is drained
# (its replica moves to the fourth node), then while the new leader is killed
# -9. Assembled after multipath.sh, whose helpers and I/O loop it uses. The
# caller defines node_drain (the Go side drains the leader's node),
# node_drained (it returns once that node holds nothing) and node_kill (it
# kills the volume's leader).
# Needs: ADDR PORT (the node asked for discovery) SUBNQN HOSTNQN NPATHS.
#
# How the host learns the new path: Linux adds no path by itself. nvme-cli
# (Debian 12: 2.3) keeps a persistent discovery controller
# (connect-all --persistent); the target sends it a Discovery Log Page Change
# event (AEN 0x0070F002) whenever its discovery log changes; the kernel turns
# that into a "change" uevent with NVME_AEN=0x70f002; nvme-cli's udev rule
# (70-nvmf-autoconnect.rules) then starts nvmf-connect@.service, which runs
# `nvme connect-all --device=<that discovery controller> ...`. The guest has
# neither udev nor systemd: busybox's uevent applet runs /tmp/rescan.sh for
# every uevent, and that hook does what the rule and the unit do.

DISCOVERY_NQN=nqn.2014-08.org.nvmexpress.discovery

# write_rescan_hook: /tmp/rescan.sh, run by `uevent` with the uevent's
# variables in its environment (HOSTNQN is exported by the caller). Rescans
# are serialized (a mkdir lock: systemd runs one instance of a unit at a
# time) and logged to /tmp/rescan.log.
write_rescan_hook() {
	cat >/tmp/rescan.sh <<'HOOK'
[ "${ACTION:-}" = change ] && [ "${SUBSYSTEM:-}" = nvme ] && [ "${NVME_AEN:-}" = 0x70f002 ] || exit 0
dev=${DEVPATH##*/}
n=0
until mkdir /tmp/rescan.lock 2>/dev/null; do
	n=$((n + 1))
	[ "$n" -gt 600 ] && exit 1
	sleep 0.1
done
echo "aen $dev $NVME_TRTYPE $NVME_TRADDR:$NVME_TRSVCID at $(cut -d' ' -f1 /proc/uptime)" >>/tmp/rescan.log
nvme connect-all --device="$dev" --transport="$NVME_TRTYPE" --traddr="$NVME_TRADDR" --trsvcid="$NVME_TRSVCID" \
	--hostnqn="$HOSTNQN" --reconnect-delay=1 --ctrl-loss-tmo=120 >>/tmp/rescan.log 2>&1
echo "connect-all rc=$? done at $(cut -d' ' -f1 /proc/uptime)" >>/tmp/rescan.log
rmdir /tmp/rescan.lock
HOOK
}

# disc_ctrl: set DISC to the persistent discovery controller.
disc_ctrl() {
	DISC=
	for _c in /sys/class/nvme/nvme*; do
		rd "$_c/subsysnqn"
		if [ "$RD" = "$DISCOVERY_NQN" ]; then
			DISC=${_c##*/}
			return 0
		fi
	done
	return 1
}

# ctrl_ports: set PORTS to the trsvcids of the controllers of $SUBNQN.
ctrl_ports() {
	PORTS=
	find_ctrls
	for _c in $CTRLS; do
		ctrl_port "$_c"
		PORTS="$PORTS $PORT_OF"
	done
	PORTS="$PORTS "
}

# new_path_live: a live controller of $SUBNQN on a port that was not in
# INIT_PORTS exists, with its namespace's path; NEWC names it.
new_path_live() {
	NEWC=
	find_ctrls
	for _c in $CTRLS; do
		ctrl_port "$_c"
		case "$INIT_PORTS" in *" $PORT_OF "*) continue ;; esac
		ctrl_info "$_c"
		if [ "$ST" = live ] && [ "$ANA" != none ]; then
			NEWC=$_c
			return 0
		fi
	done
	return 1
}

drain_flow() {
	phase dr-connect
	step "rescan hook: busybox uevent runs what nvme-cli's udev rule would"
	write_rescan_hook
	: >/tmp/rescan.log
	export HOSTNQN
	uevent sh /tmp/rescan.sh &
	step "connect-all through one node, keeping the discovery controller"
	capture connect-all timeout 90 nvme connect-all -t tcp -a "$ADDR" -s "$PORT" --hostnqn "$HOSTNQN" \
		--reconnect-delay=1 --ctrl-loss-tmo=120 --persistent
	wait_until 60 "$NPATHS controllers for $SUBNQN" ctrls_at_least "$NPATHS"
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	wait_until 30 "1 live optimized and $((NPATHS - 1)) live inaccessible paths" paths_are 1 $((NPATHS - 1))
	disc_ctrl || die "no persistent discovery controller"
	kv discovery_ctrl "$DISC"
	dev=$(ns_for "$SUBNQN" 1)
	kv dev "$dev"
	ctrl_ports
	INIT_PORTS=$PORTS
	kv init_ports "$INIT_PORTS"
	optimized_ctrl || die "no optimized path"
	opt=$OPT
	ctrl_port "$opt"
	kv optimized_port_before "$PORT_OF"
	show_paths paths-before

	phase dr-io
	step "verified 4 KiB direct writes and reads in the background"
	make_pattern /tmp/patA 4
	make_pattern /tmp/patL 1
	write_region "$dev" /tmp/patA 0 4
	rm -f /tmp/stop /tmp/loop.rc /tmp/loop.count /tmp/loop.err /tmp/kill_now /tmp/kill_at
	io_loop "$dev" &
	wait_until 60 "10 verified blocks" loop_beyond 9
	loop_alive

	phase dr-drain
	step "drain the node that leads the volume (path $opt)"
	now_cs
	kv drain_cs "$NOW"
	node_drain
	wait_until 60 "another path to become optimized" other_optimized "$opt"
	now_cs
	kv handover_cs "$NOW"
	ctrl_port "$OPT"
	kv optimized_port_drain "$PORT_OF"
	loop_alive
	wait_until 120 "the new replica's path, added by the rescan hook" new_path_live
	now_cs
	kv new_path_cs "$NOW"
	ctrl_port "$NEWC"
	kv new_path_port "$PORT_OF"
	wait_until 60 "the drained node's path $opt to leave state live" ctrl_not_live "$opt"
	now_cs
	kv drained_path_dead_cs "$NOW"
	kv drained_path_state "$ST"
	loop_alive
	node_drained
	step "the drained node's path is gone for good: disconnect it"
	capture disconnect-drained nvme disconnect -d "$opt"
	wait_until 30 "1 live optimized and $((NPATHS - 1)) live inaccessible paths" paths_are 1 $((NPATHS - 1))
	show_paths paths-drained
	loop_count
	at=$COUNT
	wait_until 60 "10 more verified blocks after the drain" loop_beyond $((at + 9))
	loop_alive
	now_cs
	kv drain_end_cs "$NOW"

	phase dr-kill
	optimized_ctrl || die "no optimized path after the drain"
	opt2=$OPT
	step "kill -9 the node that now leads the volume (path $opt2), right before a write"
	echo "$opt2" >/tmp/kill_now
	wait_until 60 "the I/O loop to have the node killed" test -s /tmp/kill_at -o -s /tmp/loop.rc
	loop_alive
	read -r kill_block kill_cs dead_cs </tmp/kill_at
	kv kill_block "$kill_block"
	kv kill_cs "$kill_cs"
	kv dead_cs "$dead_cs"
	wait_until 60 "another path to become optimized" other_optimized "$opt2"
	now_cs
	kv new_optimized_cs "$NOW"
	loop_count
	at=$COUNT
	wait_until 60 "10 more verified blocks after the kill" loop_beyond $((at + 9))
	loop_alive
	touch /tmp/stop
	wait_until 60 "the I/O loop to stop" test -s /tmp/loop.rc
	kv loop_rc "$(cat /tmp/loop.rc)"
	loop_count
	kv loop_blocks "$COUNT"
	[ "$(cat /tmp/loop.rc)" = 0 ] || die "I/O loop failed: rc=$(cat /tmp/loop.rc): $(cat /tmp/loop.err)"
	capture loop-log cat /tmp/loop.log
	show_paths paths-after

	step "read back everything written before, during and after the drain and the kill"
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'
	verify_region "$dev" /tmp/patA 0 4
	n=$COUNT
	[ "$n" -gt "$LOOP_MAX" ] && n=$LOOP_MAX
	run dd if=/tmp/patL of=/tmp/loop.all bs=4k count="$n" 2>/dev/null
	run dd if="$dev" of=/tmp/loop.rball bs=4k skip="$LOOP_BASE" count="$n" iflag=direct 2>/dev/null
	cmp /tmp/loop.all /tmp/loop.rball || die "loop blocks read back differ"
	kv verified_loop_blocks "$n"

	step "disconnect everything"
	capture rescan-log cat /tmp/rescan.log
	capture disconnect-all nvme disconnect-all
	wait_until 30 "removal of the controllers" no_ctrl_for "$SUBNQN"
	step "done"
}
