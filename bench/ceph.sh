# shellcheck shell=bash
# Ceph RBD for the comparison, deployed by hand:
# 1 mon, 1 mgr, 3 OSDs (BlueStore on files, WAL and DB on tmpfs), each OSD its
# own CRUSH host, pool size 3, one image; everything on 127.0.0.1, in the
# foreground under this script, torn down by ceph_down. Sourced by compare.sh.
#
# Inputs:  CEPH_DIR (state), CEPH_SHM (tmpfs dir for WAL/DB), CEPH_IMAGE_SIZE
#          (bytes), CEPH_OSD_SIZE (bytes per OSD data file), CEPH_MON_PORT
#          (v2; v1 is +3389, default 3300/6789), CEPH_PROFILE (hdd|ssd|auto).
# Outputs: CEPH_CONF, CEPH_PIDS (mon mgr osd0 osd1 osd2), CEPH_POOL, CEPH_IMAGE.

CEPH_POOL=${CEPH_POOL:-rbd}
CEPH_IMAGE=${CEPH_IMAGE:-bench}
CEPH_PIDS=()

ceph_log() { echo "[ceph] $*" >&2; }

ceph_cmd() { timeout 60 ceph -c "$CEPH_CONF" "$@"; }

ceph_write_conf() {
	local fsid=$1 v2=${CEPH_MON_PORT:-3300} v1=$((${CEPH_MON_PORT:-3300} + 3389))
	cat >"$CEPH_CONF" <<CONF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$v2,v1:127.0.0.1:$v1]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv6 = false
ms_bind_ipv4 = true
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
run_dir = $CEPH_DIR/run
admin_socket = $CEPH_DIR/run/\$name.asok
log_file = $CEPH_DIR/log/\$name.log
keyring = $CEPH_DIR/keyring/\$name.keyring
osd_pool_default_size = 3
osd_pool_default_min_size = 2
osd_pool_default_pg_autoscale_mode = off
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000
rbd_cache = false
rbd_default_features = 61

[mon]
mon_data = $CEPH_DIR/mon/\$cluster-\$id
mon_allow_pool_delete = true
keyring = $CEPH_DIR/mon/\$cluster-\$id/keyring

[mgr]
mgr_data = $CEPH_DIR/mgr/\$cluster-\$id
keyring = $CEPH_DIR/mgr/\$cluster-\$id/keyring

[osd]
osd_data = $CEPH_DIR/osd/\$cluster-\$id
keyring = $CEPH_DIR/osd/\$cluster-\$id/keyring
osd_objectstore = bluestore
bluestore_block_path = $CEPH_DIR/disks/\$cluster-\$id.img
bluestore_block_create = true
bluestore_block_size = $CEPH_OSD_SIZE
bluestore_block_db_path = $CEPH_SHM/\$cluster-\$id-db
bluestore_block_db_create = true
bluestore_block_db_size = $((1 << 30))
bluestore_block_wal_path = $CEPH_SHM/\$cluster-\$id-wal
bluestore_block_wal_create = true
bluestore_block_wal_size = $((512 << 20))
osd_memory_target = 1610612736
CONF
	if [ "${CEPH_PROFILE:-auto}" = ssd ]; then
		echo "bluestore_debug_enforce_settings = ssd" >>"$CEPH_CONF"
	elif [ "${CEPH_PROFILE:-auto}" = hdd ]; then
		echo "bluestore_debug_enforce_settings = hdd" >>"$CEPH_CONF"
	fi
	for i in 0 1 2; do
		printf '\n[osd.%d]\ncrush_location = root=default host=node%d\n' "$i" "$i" >>"$CEPH_CONF"
	done
}

ceph_start_mon() {
	local fsid=$1 v2=${CEPH_MON_PORT:-3300} v1=$((${CEPH_MON_PORT:-3300} + 3389)) k=$CEPH_DIR/keyring
	ceph-authtool --create-keyring "$k/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	ceph-authtool --create-keyring "$k/client.admin.keyring" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
	ceph-authtool "$k/mon.keyring" --import-keyring "$k/client.admin.keyring" >/dev/null
	monmaptool --create --addv a "[v2:127.0.0.1:$v2,v1:127.0.0.1:$v1]" --fsid "$fsid" "$CEPH_DIR/monmap" >/dev/null
	mkdir -p "$CEPH_DIR/mon/ceph-a"
	ceph-mon -c "$CEPH_CONF" --mkfs -i a --monmap "$CEPH_DIR/monmap" --keyring "$k/mon.keyring"
	ceph-mon -c "$CEPH_CONF" -i a -f >"$CEPH_DIR/log/mon.a.out" 2>&1 &
	CEPH_PIDS+=($!)
	local n=0
	until ceph_cmd -s >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -lt 60 ] || { ceph_log "monitor did not come up; see $CEPH_DIR/log"; return 1; }
		sleep 1
	done
}

ceph_start_mgr() {
	mkdir -p "$CEPH_DIR/mgr/ceph-x"
	ceph_cmd auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
		-o "$CEPH_DIR/mgr/ceph-x/keyring"
	ceph-mgr -c "$CEPH_CONF" -i x -f >"$CEPH_DIR/log/mgr.x.out" 2>&1 &
	CEPH_PIDS+=($!)
}

# ceph_start_osd: key first, `ceph osd new` with it, then mkfs (the usual
# --mkfs --mkkey fails with "failed to fetch mon config").
ceph_start_osd() {
	local uuid key id dir
	uuid=$(cat /proc/sys/kernel/random/uuid)
	key=$(ceph-authtool --gen-print-key)
	printf '{"cephx_secret": "%s"}\n' "$key" >"$CEPH_DIR/osd-secret.json"
	id=$(ceph_cmd osd new "$uuid" -i "$CEPH_DIR/osd-secret.json")
	dir=$CEPH_DIR/osd/ceph-$id
	mkdir -p "$dir"
	ceph-authtool --create-keyring "$dir/keyring" --name "osd.$id" --add-key "$key" >/dev/null
	ceph-osd -c "$CEPH_CONF" -i "$id" --mkfs --osd-uuid "$uuid" >"$CEPH_DIR/log/osd.$id.mkfs" 2>&1 ||
		{ ceph_log "mkfs of osd.$id failed:"; tail -5 "$CEPH_DIR/log/osd.$id.mkfs" >&2; return 1; }
	ceph-osd -c "$CEPH_CONF" -i "$id" -f >"$CEPH_DIR/log/osd.$id.out" 2>&1 &
	CEPH_PIDS+=($!)
}

ceph_wait_clean() {
	local n=0 stat
	while :; do
		stat=$(ceph_cmd pg stat 2>/dev/null || true)
		if echo "$stat" | grep -Eq '^[0-9]+ pgs: [0-9]+ active\+clean;'; then
			local total clean
			total=$(echo "$stat" | sed -E 's/^([0-9]+) pgs.*/\1/')
			clean=$(echo "$stat" | sed -E 's/^[0-9]+ pgs: ([0-9]+) active\+clean.*/\1/')
			[ "$total" = "$clean" ] && return 0
		fi
		n=$((n + 1))
		[ $n -lt 180 ] || { ceph_log "PGs not clean after 180 s: $stat"; return 1; }
		sleep 1
	done
}

# ceph_up deploys the cluster, creates the pool and the image.
ceph_up() {
	local fsid t0=$SECONDS
	fsid=$(cat /proc/sys/kernel/random/uuid)
	CEPH_CONF=$CEPH_DIR/ceph.conf
	rm -rf "$CEPH_DIR" "$CEPH_SHM"
	mkdir -p "$CEPH_DIR"/{run,log,keyring,mon,mgr,osd,disks} "$CEPH_SHM"
	ceph_write_conf "$fsid"
	ceph_log "deploying: mon"
	ceph_start_mon "$fsid" || return 1
	ceph_log "deploying: mgr"
	ceph_start_mgr || return 1
	for i in 0 1 2; do
		ceph_log "deploying: osd.$i (BlueStore on $CEPH_DIR/disks/ceph-$i.img, WAL/DB on $CEPH_SHM)"
		ceph_start_osd || return 1
	done
	ceph_cmd osd pool create "$CEPH_POOL" 64 64 replicated >/dev/null 2>&1
	ceph_cmd osd pool set "$CEPH_POOL" size 3 >/dev/null 2>&1
	ceph_cmd osd pool application enable "$CEPH_POOL" rbd >/dev/null 2>&1
	ceph_log "waiting for the PGs to be active+clean"
	ceph_wait_clean || return 1
	timeout 60 rbd -c "$CEPH_CONF" pool init "$CEPH_POOL"
	timeout 60 rbd -c "$CEPH_CONF" create --size "$((CEPH_IMAGE_SIZE >> 20))" "$CEPH_POOL/$CEPH_IMAGE"
	ceph_log "up in $((SECONDS - t0)) s: $(ceph_cmd osd tree 2>/dev/null | grep -c 'osd\.') OSDs, pool $CEPH_POOL size $(ceph_cmd osd pool get "$CEPH_POOL" size 2>/dev/null | awk '{print $2}'), image $CEPH_IMAGE $((CEPH_IMAGE_SIZE >> 20)) MiB"
}

ceph_down() {
	local pid
	for pid in "${CEPH_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${CEPH_PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	CEPH_PIDS=()
	rm -rf "$CEPH_DIR" "$CEPH_SHM"
	ceph_log "torn down"
}
