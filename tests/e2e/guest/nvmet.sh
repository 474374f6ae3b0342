# nvmet.sh: the Linux kernel's own NVMe/TCP target (nvmet, nvmet-tcp) inside
# the guest, as a reference for the host flows. Namespace 1 is a brd RAM disk
# (/dev/ram0, 512-byte blocks). Not a file on tmpfs: nvmet's file backend
# implements Write Zeroes with fallocate(ZERO_RANGE), which tmpfs refuses, so
# mkfs.ext4 would log I/O errors.
# Needs: ADDR PORT SUBNQN HOSTNQN NS_MIB.

NVMET=/sys/kernel/config/nvmet

put() {
	echo "$1" >"$2" || die "cannot write '$1' to $2"
}

nvmet_setup() {
	phase nvmet-setup
	step "nvmet: configure subsystem $SUBNQN on $ADDR:$PORT"
	run modload nvmet nvmet-tcp
	[ -d "$NVMET" ] || run mount -t configfs configfs /sys/kernel/config
	run mkdir "$NVMET/hosts/$HOSTNQN"
	run mkdir "$NVMET/subsystems/$SUBNQN"
	put 0 "$NVMET/subsystems/$SUBNQN/attr_allow_any_host"
	run ln -s "$NVMET/hosts/$HOSTNQN" "$NVMET/subsystems/$SUBNQN/allowed_hosts/$HOSTNQN"
	run mkdir "$NVMET/subsystems/$SUBNQN/namespaces/1"
	run insmod "/lib/modules/$(uname -r)/kernel/drivers/block/brd.ko" rd_nr=1 rd_size=$((NS_MIB * 1024))
	wait_until 10 /dev/ram0 test -b /dev/ram0
	put /dev/ram0 "$NVMET/subsystems/$SUBNQN/namespaces/1/device_path"
	put 1 "$NVMET/subsystems/$SUBNQN/namespaces/1/enable"
	run mkdir "$NVMET/ports/1"
	put ipv4 "$NVMET/ports/1/addr_adrfam"
	put tcp "$NVMET/ports/1/addr_trtype"
	put "$ADDR" "$NVMET/ports/1/addr_traddr"
	put "$PORT" "$NVMET/ports/1/addr_trsvcid"
	target_restart
}

# Unlinking the only subsystem disables the port: connections are torn down
# and new ones refused, like a killed daemon.
target_kill() {
	run rm "$NVMET/ports/1/subsystems/$SUBNQN"
}

target_restart() {
	run ln -s "$NVMET/subsystems/$SUBNQN" "$NVMET/ports/1/subsystems/$SUBNQN"
}
