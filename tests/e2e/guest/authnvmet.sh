# authnvmet.sh: the kernel's own target (nvmet, Debian 13's 6.12) configured
# like Basalt for guest/auth.sh: subsystem SUBNQN (namespace 1 on a brd RAM
# disk) allowing HOST_PLAIN, HOST_DH, HOST_TLS and HOST_TLSDH; HOST_DH and
# HOST_TLSDH must authenticate (DH-HMAC-CHAP, DH_HASH and DH_GROUP, host
# secret DH_KEY, controller secret DH_CTRL_KEY); port 1 at ADDR:PORT is plain
# NVMe/TCP, port 2 at TLS_ADDR:TLS_PORT requires TLS 1.3 (the PSKs are looked
# up by tlshd in the .nvme keyring the host shares with it in this guest:
# auth.sh's insert_psk puts them there for both).
# Needs what auth.sh needs, plus NS_MIB.

NVMET=/sys/kernel/config/nvmet

put() {
	echo "$1" >"$2" || die "cannot write '$1' to $2"
}

nvmet_host() {
	run mkdir "$NVMET/hosts/$1"
	run ln -s "$NVMET/hosts/$1" "$NVMET/subsystems/$SUBNQN/allowed_hosts/$1"
}

# nvmet_dhchap HOSTNQN HASH DHGROUP: the host must authenticate, with the
# hash function and DH group nvmet then chooses.
nvmet_dhchap() {
	put "$2" "$NVMET/hosts/$1/dhchap_hash"
	put "$3" "$NVMET/hosts/$1/dhchap_dhgroup"
	put "$DH_KEY" "$NVMET/hosts/$1/dhchap_key"
	put "$DH_CTRL_KEY" "$NVMET/hosts/$1/dhchap_ctrl_key"
}

# target_dh_params HASH DHGROUP (auth.sh's hook): what HOST_DH authenticates
# with from now on.
target_dh_params() {
	put "$1" "$NVMET/hosts/$HOST_DH/dhchap_hash"
	put "$2" "$NVMET/hosts/$HOST_DH/dhchap_dhgroup"
	kv "nvmet_dh_params_$3" "$(cat "$NVMET/hosts/$HOST_DH/dhchap_hash") $(cat "$NVMET/hosts/$HOST_DH/dhchap_dhgroup")"
}

nvmet_port() {
	run mkdir "$NVMET/ports/$1"
	put ipv4 "$NVMET/ports/$1/addr_adrfam"
	put tcp "$NVMET/ports/$1/addr_trtype"
	put "$2" "$NVMET/ports/$1/addr_traddr"
	put "$3" "$NVMET/ports/$1/addr_trsvcid"
}

nvmet_auth_setup() {
	phase nvmet-setup
	step "nvmet: subsystem $SUBNQN, DH-HMAC-CHAP hosts, a plain and a TLS port"
	run modload nvmet nvmet-tcp
	[ -d "$NVMET" ] || run mount -t configfs configfs /sys/kernel/config
	run mkdir "$NVMET/subsystems/$SUBNQN"
	put 0 "$NVMET/subsystems/$SUBNQN/attr_allow_any_host"
	for _h in "$HOST_PLAIN" "$HOST_DH" "$HOST_TLS" "$HOST_TLSDH"; do
		nvmet_host "$_h"
	done
	nvmet_dhchap "$HOST_DH" "hmac(sha256)" null
	nvmet_dhchap "$HOST_TLSDH" "hmac(sha512)" ffdhe3072
	run mkdir "$NVMET/subsystems/$SUBNQN/namespaces/1"
	run insmod "/lib/modules/$(uname -r)/kernel/drivers/block/brd.ko" rd_nr=1 rd_size=$((NS_MIB * 1024))
	wait_until 10 /dev/ram0 test -b /dev/ram0
	put /dev/ram0 "$NVMET/subsystems/$SUBNQN/namespaces/1/device_path"
	put 1 "$NVMET/subsystems/$SUBNQN/namespaces/1/enable"
	nvmet_port 1 "$ADDR" "$PORT"
	nvmet_port 2 "$TLS_ADDR" "$TLS_PORT"
	put tls1.3 "$NVMET/ports/2/addr_tsas"
	kv nvmet_tls_treq "$(cat "$NVMET/ports/2/addr_treq")"
	kv nvmet_tls_tsas "$(cat "$NVMET/ports/2/addr_tsas")"
	run ln -s "$NVMET/subsystems/$SUBNQN" "$NVMET/ports/1/subsystems/$SUBNQN"
	run ln -s "$NVMET/subsystems/$SUBNQN" "$NVMET/ports/2/subsystems/$SUBNQN"
}

# keygen_check: nvme-cli's own generators (their output shows the formats
# the Go side writes the credentials in).
keygen_check() {
	step "nvme gen-tls-key, nvme gen-dhchap-key"
	capture gen-tls-key nvme gen-tls-key --hostnqn="$HOST_TLS" --subsysnqn="$SUBNQN"
	capture gen-dhchap-key nvme gen-dhchap-key --nqn="$HOST_DH" --hmac=1
}
