# hostflow.sh: the acceptance flow of a Linux NVMe/TCP host against a target at
# $ADDR:$PORT serving $SUBNQN (namespace 1) to $HOSTNQN only.
# Needs: ADDR PORT SUBNQN HOSTNQN OTHER_HOSTNQN.

host_flow() {
	phase discover
	step "discover"
	capture discover timeout 60 nvme discover -t tcp -a "$ADDR" -s "$PORT" --hostnqn "$HOSTNQN"

	step "discover as a host that is not on the subsystem's host list"
	echo "BASALT-E2E-BEGIN discover-other"
	timeout 60 nvme discover -t tcp -a "$ADDR" -s "$PORT" --hostnqn "$OTHER_HOSTNQN" 2>&1
	echo "BASALT-E2E-END discover-other"

	phase reject-host
	step "connect as a host that is not on the subsystem's host list (must fail)"
	must_fail nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn "$OTHER_HOSTNQN"
	ctrl_for "$SUBNQN" >/dev/null && die "a controller exists for a host that is not allowed"

	phase io
	step "connect"
	capture connect timeout 60 nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn "$HOSTNQN"
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	dev=$(ns_for "$SUBNQN" 1)
	ctrl=$(ctrl_for "$SUBNQN") || die "no controller for $SUBNQN"
	kv dev "$dev"
	kv ctrl "$ctrl"
	kv state "$(ctrl_state "$ctrl")"
	kv transport "$(cat /sys/class/nvme/"$ctrl"/transport)"
	kv address "$(tr -d '\n' <"/sys/class/nvme/$ctrl/address" | tr ',' ' ')"
	size=$(blockdev --getsize64 "$dev") || die "blockdev --getsize64 $dev"
	kv size64 "$size"
	kv logical_block_size "$(blockdev --getss "$dev")"
	capture list nvme list
	capture id-ctrl nvme id-ctrl "/dev/$ctrl"
	capture id-ns nvme id-ns "$dev"

	step "block I/O (O_DIRECT) at the start and at the end of the namespace"
	make_pattern /tmp/patA 8
	make_pattern /tmp/patL 1
	last=$((size / 1048576 - 1))
	write_region "$dev" /tmp/patA 0 8
	write_region "$dev" /tmp/patL "$last" 1
	verify_region "$dev" /tmp/patA 0 8
	verify_region "$dev" /tmp/patL "$last" 1
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'

	step "ext4: mkfs, mount, write files"
	run mkfs.ext4 -F -q "$dev"
	run mount -t ext4 "$dev" /mnt
	i=1
	while [ "$i" -le 16 ]; do
		run dd if=/dev/urandom of="/mnt/f$i" bs=4k count=$((i * 16)) 2>/dev/null
		i=$((i + 1))
	done
	run mkdir /mnt/dir
	run cp /tmp/patA /mnt/dir/big
	(cd /mnt && sha256sum f* dir/big) >/tmp/sums || die "sha256sum"
	kv files "$(wc -l </tmp/sums)"
	run sync
	run umount /mnt
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'

	step "ext4: fsck, remount, verify checksums"
	capture fsck e2fsck -fn "$dev"
	run mount -t ext4 "$dev" /mnt
	capture sha256-check sh -c 'cd /mnt && sha256sum -c /tmp/sums'
	run umount /mnt

	step "disconnect"
	capture disconnect nvme disconnect -n "$SUBNQN"
	wait_until 30 "removal of the controller" no_ctrl_for "$SUBNQN"
	[ -b "$dev" ] && die "$dev still present after disconnect"
	step "done"
}
