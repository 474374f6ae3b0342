#!/usr/bin/env bash
# setup.sh prepares everything the e2e tests in tests/e2e need to boot a real
# Linux NVMe/TCP host under qemu, in two guests built the same way:
#
#   debian12  Debian 12's own kernel (6.1), nvme-cli 2.3, e2fsprogs, ndctl
#             (no in-band authentication, no TLS)
#   debian13  Debian 13's kernel (6.12, CONFIG_NVME_HOST_AUTH, CONFIG_NVME_TCP_TLS,
#             CONFIG_NVME_TARGET_AUTH, CONFIG_NVME_TARGET_TCP_TLS), nvme-cli
#             2.13, keyutils (keyctl), ktls-utils (tlshd), e2fsprogs
#
#   host:  qemu-system-x86_64, cpio, depmod (kmod), gzip, xz, flock
#          (apt-get install if missing)
#   cache: $BASALT_E2E_CACHE (default /var/cache/basalt-e2e); debian12 in it,
#          debian13 in its trixie/ subdirectory, each with:
#            debs/        the guest packages, fetched with `apt-get download`
#            rootfs/      those packages unpacked with `dpkg -x` (never installed)
#                         (debs/ and rootfs/ are removed once the initrd is built)
#            vmlinuz      the guest kernel
#            initrd.img   gzip'd cpio (newc): busybox, the tools, libs, modules
#                         (decompressed) and /init; a per-run cpio holding
#                         /test.sh is appended to it by the Go harness
#                         (tests/e2e/vm.go)
#            stamp        sha256 of this script and the guest's name: when it
#                         matches, nothing is redone for that guest
#          trixie/apt/    debian13's own apt configuration, sources list (suite
#                         trixie of the Debian mirror the machine's own sources
#                         name) and package lists: the machine's apt sources are
#                         read, never written (APT_CONFIG points apt there)
#
# Guest contract (what /init does in both guests; tests/e2e/vm.go relies on it):
#   mounts proc, sys, devtmpfs, tmpfs on /tmp and /run; loads the modules in
#   /etc/modules.boot (via /sbin/modload, which any script may call for more,
#   e.g. `modload nvmet-tcp`); configures eth0 10.0.2.15/24 gw 10.0.2.2 (slirp);
#   prints BASALT-E2E-BOOTED; runs `sh /test.sh` bounded by basalt.timeout=<s>
#   from the kernel command line (default 300); prints the kernel log between
#   BASALT-E2E-DMESG-BEGIN and BASALT-E2E-DMESG-END, then BASALT-E2E-EXIT=<rc>,
#   and powers off.
#
# Usage: setup.sh [GUEST...] (default: both). Idempotent; safe to run
# concurrently (flock). Needs root only when something is missing.
set -euo pipefail

CACHE="${BASALT_E2E_CACHE:-/var/cache/basalt-e2e}"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
SELF_SUM="$(sha256sum "$SELF" | cut -d' ' -f1)"
G_APT_CONFIG=

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

# apt_update_once: `apt-get update` once per run for the current guest's apt
# configuration (G_APT_CONFIG: empty for the machine's own).
declare -A APT_UPDATED
apt_update_once() {
	local key=${G_APT_CONFIG:-machine}
	if [[ -z ${APT_UPDATED[$key]:-} ]]; then
		retry 3 g_apt apt-get -q update >&2 || die "apt-get update failed (apt config: ${G_APT_CONFIG:-default})"
		APT_UPDATED[$key]=1
	fi
}

# g_apt CMD...: run an apt command with the current guest's apt configuration.
g_apt() {
	if [[ -n $G_APT_CONFIG ]]; then
		APT_CONFIG=$G_APT_CONFIG "$@"
	else
		"$@"
	fi
}

need_root() {
	[[ $(id -u) -eq 0 ]] || die "must run as root to $1"
}

install_host_tools() {
	local missing=0 c
	for c in qemu-system-x86_64 cpio depmod gzip xz flock; do
		command -v "$c" >/dev/null 2>&1 || missing=1
	done
	((missing == 0)) && return 0
	need_root "install host packages"
	apt_update_once
	log "installing host packages"
	DEBIAN_FRONTEND=noninteractive retry 3 apt-get install -y -q --no-install-recommends \
		qemu-system-x86 cpio kmod gzip xz-utils util-linux >&2 || die "apt-get install failed"
}

# guest_profile NAME: set the G_* variables that describe guest NAME.
#   G_OUT          its cache directory (vmlinuz, initrd.img, stamp)
#   G_APT_CONFIG   apt configuration file for its packages ("" = the machine's)
#   G_KERNEL_RE    the versioned kernel package linux-image-amd64 depends on
#   G_PKGS         guest packages; the libraries are the runtime closure of the
#                  binaries copied into the initramfs (checked below: a library
#                  that resolves outside rootfs/ fails the build)
#   G_USR          "usr/" where the packages are /usr-merged (lib/modules, the
#                  dynamic loader and the libraries live under usr/), else ""
#   G_BINS         binaries copied (with their library closure), relative to
#                  rootfs/; the first is busybox
#   G_EXTRA_FILES  other files copied (relative to rootfs/)
#   G_BOOT_MODULES modules loaded at boot, with their modules.dep closure
#   G_EXTRA_MODULES modules shipped but loaded only on demand (`modload NAME`)
guest_profile() {
	G_EXTRA_FILES=()
	case $1 in
	debian12)
		G_OUT=$CACHE
		G_APT_CONFIG=
		G_KERNEL_RE='linux-image-6\.1\.0-[0-9]*-amd64'
		G_PKGS=(
			busybox
			nvme-cli libnvme1 libjson-c5 libuuid1 zlib1g libssl3 libdbus-1-3
			libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblzma5 libzstd1 liblz4-1
			e2fsprogs libext2fs2 libcom-err2 libblkid1 libss2
			ndctl libndctl6 libdaxctl1 libkeyutils1 libiniparser1 libudev1 libkmod2
			libc6 libgcc-s1
		)
		G_USR=
		G_BINS=(bin/busybox usr/sbin/nvme usr/bin/ndctl
			sbin/mke2fs sbin/mkfs.ext4 sbin/e2fsck sbin/fsck.ext4 sbin/dumpe2fs sbin/tune2fs)
		# crc32c is wanted by ext4/jbd2/libcrc32c through the crypto API
		# (softdeps); there is no modprobe helper in the guest, so it is
		# loaded explicitly.
		G_BOOT_MODULES=(
			crc32c_generic crc32c-intel libcrc32c crct10dif_generic
			virtio_pci virtio_net
			nvme-core nvme-fabrics nvme-tcp
			ext4
		)
		# nfit and nd_pmem expose qemu's emulated NVDIMM (-device nvdimm) as a
		# pmem region and block device that ndctl can put in fsdax mode
		# (tests/e2e/guest/dax.sh).
		G_EXTRA_MODULES=(nvmet nvmet-tcp configfs loop brd nfit nd_pmem)
		;;
	debian13)
		G_OUT=$CACHE/trixie
		G_APT_CONFIG=$G_OUT/apt/apt.conf
		G_KERNEL_RE='linux-image-6\.12\.[0-9]*+deb13-amd64'
		G_PKGS=(
			busybox
			nvme-cli libnvme1t64 libjson-c5 libkeyutils1 libssl3t64 zlib1g libzstd1
			keyutils
			ktls-utils libgnutls30t64 libglib2.0-0t64 libnl-3-200 libnl-genl-3-200
			libp11-kit0 libidn2-0 libunistring5 libtasn1-6 libnettle8t64 libhogweed6t64
			libgmp10 libffi8 libpcre2-8-0 libatomic1
			e2fsprogs libext2fs2t64 libcom-err2 libblkid1 libss2 libuuid1
			libc6 libgcc-s1
		)
		G_USR=usr/
		G_BINS=(usr/bin/busybox usr/sbin/nvme usr/bin/keyctl usr/sbin/tlshd
			usr/sbin/mke2fs usr/sbin/mkfs.ext4 usr/sbin/e2fsck usr/sbin/fsck.ext4
			usr/sbin/dumpe2fs usr/sbin/tune2fs)
		G_EXTRA_FILES=(etc/tlshd.conf)
		# Besides ext4's crc32c: the NVMe/TCP host with in-band
		# authentication (nvme-auth) and TLS (nvme-keyring holds the
		# .nvme keyring; tls is the kernel TLS ULP the handshake hands the
		# socket to, and its cipher gcm(aes): aesni-intel, gcm and
		# ghash-generic, which the crypto API would otherwise ask modprobe
		# for). virtio_pci and crct10dif are built in.
		G_BOOT_MODULES=(
			crc32c_generic crc32c-intel libcrc32c
			virtio_net
			nvme-auth nvme-keyring nvme-core nvme-fabrics nvme-tcp
			tls aesni-intel gcm ghash-generic
			ext4
		)
		G_EXTRA_MODULES=(nvmet nvmet-tcp configfs loop brd)
		;;
	*) die "unknown guest $1 (want debian12 or debian13)" ;;
	esac
	G_LDSO=${G_USR}lib64/ld-linux-x86-64.so.2
	STAMP_WANT="$SELF_SUM $1"
}

# debian_mirror: the Debian archive the machine's own apt sources use (the
# first URI ending in /debian in /etc/apt/sources.list, *.list or *.sources),
# or $BASALT_E2E_DEBIAN_MIRROR. The files are only read.
debian_mirror() {
	local f uri
	if [[ -n ${BASALT_E2E_DEBIAN_MIRROR:-} ]]; then
		echo "$BASALT_E2E_DEBIAN_MIRROR"
		return 0
	fi
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		for uri in $(sed -n -e 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' \
			-e 's/^URIs:[[:space:]]*//p' "$f"); do
			case ${uri%/} in
			*/debian)
				echo "${uri%/}"
				return 0
				;;
			esac
		done
	done
	echo "http://deb.debian.org/debian"
}

# write_apt_config: debian13's apt configuration under G_OUT/apt: the suite
# trixie (main) of debian_mirror, its own lists and caches, and no other
# source. The machine's apt.conf.d still applies (proxies, for one).
write_apt_config() {
	local dir=$G_OUT/apt mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	mirror=$(debian_mirror)
	[[ -r $keyring ]] || die "no $keyring (install debian-archive-keyring)"
	mkdir -p "$dir"/lists/partial "$dir"/cache/archives/partial "$dir"/sources.list.d "$dir"/preferences.d
	echo "deb [signed-by=$keyring] $mirror trixie main" >"$dir/sources.list"
	cat >"$G_APT_CONFIG" <<APTCONF
// apt configuration for the Debian 13 e2e guest's packages (scripts/e2e/setup.sh)
Dir::Etc::sourcelist "$dir/sources.list";
Dir::Etc::sourceparts "$dir/sources.list.d";
Dir::Etc::preferences "$dir/preferences";
Dir::Etc::preferencesparts "$dir/preferences.d";
Dir::State::Lists "$dir/lists";
Dir::Cache "$dir/cache";
Dir::Cache::archives "$dir/cache/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled "false";
APTCONF
	log "debian13 packages from $mirror (suite trixie), apt config $G_APT_CONFIG"
}

download_debs() {
	local kpkg=$1 dir=$G_OUT/debs
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	log "downloading $kpkg ${G_PKGS[*]}"
	(cd "$dir.tmp" && retry 4 g_apt apt-get -q -o APT::Sandbox::User=root download "$kpkg" "${G_PKGS[@]}" >&2) ||
		die "apt-get download failed"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
}

unpack_rootfs() {
	local deb
	rm -rf "$G_OUT/rootfs"
	mkdir -p "$G_OUT/rootfs"
	for deb in "$G_OUT"/debs/*.deb; do
		dpkg -x "$deb" "$G_OUT/rootfs"
	done
}

# copy_file SRC(relative to rootfs) into the staging tree, keeping the path and
# following symlinks to the real file (which is copied too).
copy_file() {
	local rel=$1 src=$G_OUT/rootfs/$1 dst=$STAGE/$1
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
	local root=$G_OUT/rootfs bin line lib
	local lp=$root/${G_USR}lib/x86_64-linux-gnu
	[[ -z $G_USR ]] && lp=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
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
		done < <("$root/$G_LDSO" --inhibit-cache --library-path "$lp" --list "$root/$bin")
	done
	copy_file "$G_LDSO"
}

# module_closure NAME: print the .ko paths (relative to lib/modules/KVER) that
# must be insmod'ed, in order, to load NAME.
declare -A MOD_PATH MOD_DEPS MOD_SEEN
read_modules_dep() {
	local line path deps name
	MOD_PATH=()
	MOD_DEPS=()
	while IFS= read -r line; do
		path=${line%%:*}
		deps=${line#*:}
		name=$(basename "${path%.xz}" .ko)
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
		depname=$(basename "${dep%.xz}" .ko)
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

# stage_dirs: the initramfs's directory skeleton. A /usr-merged guest gets
# bin, sbin, lib and lib64 as links into usr/, as Debian 13 has them.
stage_dirs() {
	local kver=$1 d
	rm -rf "$STAGE"
	mkdir -p "$STAGE"
	if [[ -n $G_USR ]]; then
		for d in bin sbin lib lib64; do
			mkdir -p "$STAGE/usr/$d"
			ln -s "usr/$d" "$STAGE/$d"
		done
	fi
	mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt,root,lib/modules/"$kver"}
}

# stage_modules KVER: the modules of G_BOOT_MODULES and G_EXTRA_MODULES with
# their closure, decompressed (busybox insmod loads plain .ko files), and
# /etc/modules.closure, /etc/modules.boot for modload.
stage_modules() {
	local kver=$1 name ko
	MODDIR=$G_OUT/rootfs/${G_USR}lib/modules/$kver
	depmod -b "$G_OUT/rootfs/${G_USR%/}" -F "$G_OUT/rootfs/boot/System.map-$kver" "$kver"
	read_modules_dep
	: >"$STAGE/etc/modules.closure"
	for name in "${G_BOOT_MODULES[@]}" "${G_EXTRA_MODULES[@]}"; do
		MOD_SEEN=()
		echo "${name//-/_} $(module_closure "$name" | sed 's/\.xz$//' | tr '\n' ' ')" >>"$STAGE/etc/modules.closure"
	done
	# shellcheck disable=SC2013 # words (paths), not lines
	for ko in $(cut -d' ' -f2- "$STAGE/etc/modules.closure"); do
		mkdir -p "$(dirname "$STAGE/lib/modules/$kver/$ko")"
		if [[ -f $MODDIR/$ko ]]; then
			cp -p "$MODDIR/$ko" "$STAGE/lib/modules/$kver/$ko"
		else
			xz -dc "$MODDIR/$ko.xz" >"$STAGE/lib/modules/$kver/$ko"
		fi
	done
	echo "${G_BOOT_MODULES[*]}" >"$STAGE/etc/modules.boot"
}

build_initrd() {
	local kver=$1 name bin busybox=${G_BINS[0]}
	STAGE=$G_OUT/stage
	stage_dirs "$kver"
	stage_modules "$kver"

	for bin in "${G_BINS[@]}" "${G_EXTRA_FILES[@]}"; do
		copy_file "$bin"
	done
	copy_libs "${G_BINS[@]}"
	# busybox applets, except where a real tool is shipped (dynamic busybox:
	# PATH decides, so e2fsprogs' mke2fs wins over the applet).
	for name in $("$G_OUT/rootfs/$G_LDSO" --library-path "$G_OUT/rootfs/${G_USR}lib/x86_64-linux-gnu" "$G_OUT/rootfs/$busybox" --list); do
		case $name in busybox | mke2fs | mkfs.* | e2fsck | fsck* | tune2fs | dumpe2fs | nvme | ndctl | keyctl) continue ;; esac
		[[ -e $STAGE/bin/$name ]] || ln -s busybox "$STAGE/bin/$name"
	done
	[[ -e $STAGE/bin/busybox ]] || ln -s "/$busybox" "$STAGE/bin/busybox"
	ln -sfn bin/busybox "$STAGE/linuxrc" 2>/dev/null || true
	mkdir -p "$STAGE/etc/nvme"
	echo "root:x:0:0:root:/root:/bin/sh" >"$STAGE/etc/passwd"
	echo "root:x:0:" >"$STAGE/etc/group"
	write_init

	# Fixed mtimes, sorted names, renumbered inodes: the same inputs give
	# the same initrd.
	find "$STAGE" -exec touch -h -d @0 {} +
	(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --reproducible --quiet -R 0:0) |
		gzip -6 -n >"$G_OUT/initrd.img.tmp"
	mv "$G_OUT/initrd.img.tmp" "$G_OUT/initrd.img"
	cp -p "$G_OUT/rootfs/boot/vmlinuz-$kver" "$G_OUT/vmlinuz"
	echo "$kver" >"$G_OUT/kernel-version"
	rm -rf "$STAGE" "$G_OUT/rootfs" "$G_OUT/debs"
}

# build_guest NAME: build guest NAME's kernel and initrd unless its stamp is
# current.
build_guest() {
	guest_profile "$1"
	mkdir -p "$G_OUT"
	if [[ -f $G_OUT/stamp && $(cat "$G_OUT/stamp") == "$STAMP_WANT" &&
		-s $G_OUT/vmlinuz && -s $G_OUT/initrd.img ]]; then
		log "$1: cache up to date: $G_OUT"
		return 0
	fi
	rm -f "$G_OUT/stamp"

	local kpkg
	[[ -n $G_APT_CONFIG ]] && write_apt_config
	apt_update_once
	kpkg=$(g_apt apt-cache depends linux-image-amd64 | sed -n "s/^ *Depends: \\($G_KERNEL_RE\\)\$/\\1/p" | head -n1)
	[[ -n $kpkg ]] || die "$1: cannot resolve $G_KERNEL_RE from linux-image-amd64"
	download_debs "$kpkg"
	unpack_rootfs
	build_initrd "${kpkg#linux-image-}"
	echo "$STAMP_WANT" >"$G_OUT/stamp"
	log "$1: ready: $G_OUT (kernel ${kpkg#linux-image-}, initrd $(du -h "$G_OUT/initrd.img" | cut -f1))"
}

main() {
	local guests=("$@") g
	((${#guests[@]} > 0)) || guests=(debian12 debian13)
	mkdir -p "$CACHE" 2>/dev/null || need_root "create $CACHE"
	exec 9>"$CACHE/.lock"
	flock -w 900 9 || die "could not lock $CACHE/.lock"

	install_host_tools
	for g in "${guests[@]}"; do
		build_guest "$g"
	done
}

main "$@"
