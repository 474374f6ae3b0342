#!/usr/bin/env bash
# setup.sh prepares everything the e2e tests in tests/e2e need to boot a real
# Linux NVMe/TCP host (Debian 12's own kernel) under qemu:
#
#   host:  qemu-system-x86_64, cpio, depmod (kmod), gzip, flock   (apt-get install if missing)
#   cache: $BASALT_E2E_CACHE (default /var/cache/basalt-e2e)
#            debs/        the guest packages, fetched with `apt-get download`
#            rootfs/      those packages unpacked with `dpkg -x` (never installed)
#                         (debs/ and rootfs/ are removed once the initrd is built)
#            vmlinuz      the guest kernel
#            initrd.img   gzip'd cpio (newc): busybox, nvme-cli, e2fsprogs, ndctl,
#                         libs, modules and /init; a per-run cpio holding /test.sh is
#                         appended to it by the Go harness (tests/e2e/vm.go)
#            stamp        sha256 of this script: when it matches, nothing is redone
#
# Guest contract (what /init does; tests/e2e/vm.go relies on it):
#   mounts proc, sys, devtmpfs, tmpfs on /tmp and /run; loads the modules in
#   /etc/modules.boot (via /sbin/modload, which any script may call for more,
#   e.g. `modload nvmet-tcp`); configures eth0 10.0.2.15/24 gw 10.0.2.2 (slirp);
#   prints BASALT-E2E-BOOTED; runs `sh /test.sh` bounded by basalt.timeout=<s>
#   from the kernel command line (default 300); prints the kernel log between
#   BASALT-E2E-DMESG-BEGIN and BASALT-E2E-DMESG-END, then BASALT-E2E-EXIT=<rc>,
#   and powers off.
#
# Idempotent; safe to run concurrently (flock). Needs root only when something
# is missing.
set -euo pipefail

CACHE="${BASALT_E2E_CACHE:-/var/cache/basalt-e2e}"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
STAMP_WANT="$(sha256sum "$SELF" | cut -d' ' -f1)"

log() { printf 'e2e-setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# retry N CMD...: run CMD up to N times, sleeping 2,4,8.. s between tries.
retry() {
	local n=$1 i=1 delay=2
	shift
	until "$@"; do
		if ((i >= n)); then
			return 1
		fi
		log "retry $i/$n after failure: $*"
		sleep "$delay"
		i=$((i + 1))
		delay=$((delay * 2))
	done
}

APT_UPDATED=0
apt_update_once() {
	if ((APT_UPDATED == 0)); then
		retry 3 apt-get -q update >&2 || die "apt-get update failed"
		APT_UPDATED=1
	fi
}

need_root() {
	[[ $(id -u) -eq 0 ]] || die "must run as root to $1"
}

install_host_tools() {
	local missing=0 c
	for c in qemu-system-x86_64 cpio depmod gzip flock; do
		command -v "$c" >/dev/null 2>&1 || missing=1
	done
	((missing == 0)) && return 0
	need_root "install host packages"
	apt_update_once
	log "installing host packages"
	DEBIAN_FRONTEND=noninteractive retry 3 apt-get install -y -q --no-install-recommends \
		qemu-system-x86 cpio kmod gzip util-linux >&2 || die "apt-get install failed"
}

# Guest packages. The libraries are the runtime closure of the binaries copied
# into the initramfs (checked below: a library that resolves outside rootfs/
# fails the build).
GUEST_PKGS=(
	busybox
	nvme-cli libnvme1 libjson-c5 libuuid1 zlib1g libssl3 libdbus-1-3
	libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblzma5 libzstd1 liblz4-1
	e2fsprogs libext2fs2 libcom-err2 libblkid1 libss2
	ndctl libndctl6 libdaxctl1 libkeyutils1 libiniparser1 libudev1 libkmod2
	libc6 libgcc-s1
)

# Modules loaded at boot, with their modules.dep closure. crc32c is wanted by
# ext4/jbd2/libcrc32c through the crypto API (softdeps); there is no modprobe
# helper in the guest, so it is loaded explicitly.
BOOT_MODULES=(
	crc32c_generic crc32c-intel libcrc32c crct10dif_generic
	virtio_pci virtio_net
	nvme-core nvme-fabrics nvme-tcp
	ext4
)
# Modules shipped but loaded only on demand (`modload NAME`). nfit and
# nd_pmem expose qemu's emulated NVDIMM (-device nvdimm) as a pmem region and
# block device that ndctl can put in fsdax mode (tests/e2e/guest/dax.sh).
EXTRA_MODULES=(nvmet nvmet-tcp configfs loop brd nfit nd_pmem)

download_debs() {
	local kpkg=$1 dir=$CACHE/debs
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	log "downloading $kpkg ${GUEST_PKGS[*]}"
	(cd "$dir.tmp" && retry 4 apt-get -q -o APT::Sandbox::User=root download "$kpkg" "${GUEST_PKGS[@]}" >&2) ||
		die "apt-get download failed"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
}

unpack_rootfs() {
	local deb
	rm -rf "$CACHE/rootfs"
	mkdir -p "$CACHE/rootfs"
	for deb in "$CACHE"/debs/*.deb; do
		dpkg -x "$deb" "$CACHE/rootfs"
	done
}

# copy_file SRC(relative to rootfs) into the staging tree, keeping the path and
# following symlinks to the real file (which is copied too).
copy_file() {
	local rel=$1 src=$CACHE/rootfs/$1 dst=$STAGE/$1
	[[ -e $src || -L $src ]] || die "missing in rootfs: $rel"
	mkdir -p "$(dirname "$dst")"
	if [[ -L $src ]]; then
		local target
		target=$(readlink "$src")
		ln -sfn "$target" "$dst"
		if [[ $target == /* ]]; then
			copy_file "${target#/}"
		else
			copy_file "$(dirname "$rel")/$target"
		fi
	else
		cp -p "$src" "$dst"
	fi
}

# copy_libs BIN...: copy the shared-library closure of BIN (as resolved by the
# guest's own ld.so against rootfs/ only).
copy_libs() {
	local root=$CACHE/rootfs bin line lib
	local lp=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
	for bin in "$@"; do
		while read -r line; do
			case $line in
			*"=> not found"*) die "$bin: unresolved library: $line" ;;
			*"=> /"*)
				lib=${line#*=> }
				lib=${lib%% (*}
				[[ $lib == "$root"/* ]] || die "$bin: library resolved outside the guest rootfs: $lib"
				copy_file "${lib#"$root"/}"
				;;
			esac
		done < <("$root/lib64/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$lp" --list "$root/$bin")
	done
	copy_file lib64/ld-linux-x86-64.so.2
}

# module_closure NAME: print the .ko paths (relative to lib/modules/KVER) that
# must be insmod'ed, in order, to load NAME.
declare -A MOD_PATH MOD_DEPS MOD_SEEN
read_modules_dep() {
	local line path deps name
	while IFS= read -r line; do
		path=${line%%:*}
		deps=${line#*:}
		name=$(basename "$path" .ko)
		name=${name//-/_}
		MOD_PATH[$name]=$path
		MOD_DEPS[$name]=$deps
	done <"$MODDIR/modules.dep"
}
module_closure() {
	local name=${1//-/_} dep depname
	[[ -n ${MOD_PATH[$name]:-} ]] || die "module $1 not in modules.dep"
	[[ -n ${MOD_SEEN[$name]:-} ]] && return 0
	MOD_SEEN[$name]=1
	for dep in ${MOD_DEPS[$name]}; do
		depname=$(basename "$dep" .ko)
		module_closure "$depname"
	done
	echo "${MOD_PATH[$name]}"
}

write_init() {
	cat >"$STAGE/init" <<'INIT'
#!/bin/sh
# /init of the basalt e2e guest (generated by scripts/e2e/setup.sh).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp /run /mnt
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo 1 >/proc/sys/kernel/printk_devkmsg 2>/dev/null || true
budget=300
for arg in $(cat /proc/cmdline); do
	case $arg in basalt.timeout=*) budget=${arg#basalt.timeout=} ;; esac
done
modload $(cat /etc/modules.boot) || echo "BASALT-E2E-WARN: module load failed"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
echo "BASALT-E2E-BOOTED kernel=$(uname -r) uptime=$(cut -d' ' -f1 /proc/uptime)"
rc=125
if [ -f /test.sh ]; then
	timeout -s KILL "$budget" sh /test.sh </dev/null
	rc=$?
	[ "$rc" = 137 ] && echo "BASALT-E2E-GUEST-TIMEOUT after ${budget}s"
else
	echo "BASALT-E2E-NO-TEST-SCRIPT"
fi
echo "BASALT-E2E-DMESG-BEGIN"
dmesg
echo "BASALT-E2E-DMESG-END"
echo "BASALT-E2E-EXIT=$rc"
sync
poweroff -f
INIT
	chmod 0755 "$STAGE/init"

	cat >"$STAGE/sbin/modload" <<'MODLOAD'
#!/bin/sh
# modload NAME...: insmod NAME and its dependencies (from /etc/modules.closure).
rc=0
for want in "$@"; do
	want=$(echo "$want" | tr - _)
	line=$(grep "^$want " /etc/modules.closure) || { echo "modload: unknown module $want" >&2; rc=1; continue; }
	for ko in ${line#* }; do
		name=$(basename "$ko" .ko | tr - _)
		[ -d "/sys/module/$name" ] && continue
		insmod "/lib/modules/$(uname -r)/$ko" || { echo "modload: insmod $ko failed" >&2; rc=1; }
	done
done
exit $rc
MODLOAD
	chmod 0755 "$STAGE/sbin/modload"
}

build_initrd() {
	local kver=$1 name ko
	STAGE=$CACHE/stage
	MODDIR=$CACHE/rootfs/lib/modules/$kver
	rm -rf "$STAGE"
	mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt,root,lib/modules/"$kver"}

	depmod -b "$CACHE/rootfs" -F "$CACHE/rootfs/boot/System.map-$kver" "$kver"
	read_modules_dep
	: >"$STAGE/etc/modules.closure"
	for name in "${BOOT_MODULES[@]}" "${EXTRA_MODULES[@]}"; do
		MOD_SEEN=()
		echo "${name//-/_} $(module_closure "$name" | tr '\n' ' ')" >>"$STAGE/etc/modules.closure"
	done
	# shellcheck disable=SC2013 # words (paths), not lines
	for ko in $(cut -d' ' -f2- "$STAGE/etc/modules.closure"); do
		mkdir -p "$(dirname "$STAGE/lib/modules/$kver/$ko")"
		cp -p "$MODDIR/$ko" "$STAGE/lib/modules/$kver/$ko"
	done
	echo "${BOOT_MODULES[*]}" >"$STAGE/etc/modules.boot"

	copy_file bin/busybox
	copy_file usr/sbin/nvme
	copy_file usr/bin/ndctl
	for name in mke2fs mkfs.ext4 e2fsck fsck.ext4 dumpe2fs tune2fs; do
		copy_file "sbin/$name"
	done
	copy_libs bin/busybox usr/sbin/nvme sbin/mke2fs sbin/e2fsck usr/bin/ndctl
	# busybox applets, except where a real tool is shipped (dynamic busybox:
	# PATH decides, so e2fsprogs' mke2fs wins over the applet).
	for name in $("$CACHE/rootfs/lib64/ld-linux-x86-64.so.2" --library-path "$CACHE/rootfs/lib/x86_64-linux-gnu" "$CACHE/rootfs/bin/busybox" --list); do
		case $name in busybox | mke2fs | mkfs.* | e2fsck | fsck* | tune2fs | dumpe2fs | nvme | ndctl) continue ;; esac
		[[ -e $STAGE/bin/$name ]] || ln -s busybox "$STAGE/bin/$name"
	done
	ln -sfn bin/busybox "$STAGE/linuxrc" 2>/dev/null || true
	mkdir -p "$STAGE/etc/nvme"
	echo "root:x:0:0:root:/root:/bin/sh" >"$STAGE/etc/passwd"
	echo "root:x:0:" >"$STAGE/etc/group"
	write_init

	# Fixed mtimes, sorted names, renumbered inodes: the same inputs give
	# the same initrd.
	find "$STAGE" -exec touch -h -d @0 {} +
	(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --reproducible --quiet -R 0:0) |
		gzip -6 -n >"$CACHE/initrd.img.tmp"
	mv "$CACHE/initrd.img.tmp" "$CACHE/initrd.img"
	cp -p "$CACHE/rootfs/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
	echo "$kver" >"$CACHE/kernel-version"
	rm -rf "$STAGE" "$CACHE/rootfs" "$CACHE/debs"
}

main() {
	mkdir -p "$CACHE" 2>/dev/null || need_root "create $CACHE"
	exec 9>"$CACHE/.lock"
	flock -w 900 9 || die "could not lock $CACHE/.lock"

	install_host_tools
	if [[ -f $CACHE/stamp && $(cat "$CACHE/stamp") == "$STAMP_WANT" &&
		-s $CACHE/vmlinuz && -s $CACHE/initrd.img ]]; then
		log "cache up to date: $CACHE"
		return 0
	fi
	rm -f "$CACHE/stamp"

	local kpkg
	apt_update_once
	kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-6\.1\.0-[0-9]*-amd64\)$/\1/p' | head -n1)
	[[ -n $kpkg ]] || die "cannot resolve linux-image-6.1.0-*-amd64 from linux-image-amd64"
	download_debs "$kpkg"
	unpack_rootfs
	build_initrd "${kpkg#linux-image-}"
	echo "$STAMP_WANT" >"$CACHE/stamp"
	log "ready: $CACHE (kernel ${kpkg#linux-image-}, initrd $(du -h "$CACHE/initrd.img" | cut -f1))"
}

main "$@"
