#!/usr/bin/env bash
# make run: starts a 3-node Basalt cluster on this machine (loopback), creates
# a 4 GiB thin volume replicated on all three nodes, allows one host on it
# with a DH-HMAC-CHAP secret, and prints how to attach it. Stays in the foreground; Ctrl-C stops the three nodes cleanly; running
# it again finds the volume and its data where they were left.
#
#   node   NVMe/TCP   API + /metrics   Raft
#   1      4420       9420             9520
#   2      4421       9421             9521
#   3      4422       9422             9522
#
# State lives in $RUN_DIR (default ./.basalt): each node's metadata and
# file-backed drives, and $RUN_DIR/security, which basaltd pki init writes on
# the first run and every run after keeps: the cluster CA, each node's
# certificate and the API tokens (nodeN/), and the basaltctl credentials
# files admin.json and reader.json. The API is HTTPS and needs a token:
#   export BASALT_CREDENTIALS=$RUN_DIR/security/admin.json
# Write buffers and Raft logs live on tmpfs (/dev/shm): fast, and honest
# that they do not survive a reboot of this machine.
#
# Environment:
#   BASALT_ADVERTISE_HOST  address hosts use to reach the nodes, put in the
#                          discovery logs (default 127.0.0.1). A qemu guest
#                          with user networking reaches this machine as
#                          10.0.2.2: BASALT_ADVERTISE_HOST=10.0.2.2 make run
#                          makes `nvme connect-all` work from the guest.
#                          (BASALT_ADVERTISE=HOST[:PORT] is accepted too.)
#   BASALT_LISTEN_HOST     address the NVMe listeners bind (default 0.0.0.0)
#   BASALT_VOLUME          volume name (default vol1); BASALT_VOLUME_SIZE (4GiB)
#   BASALT_STORE=0         keep replicas as plain files instead of the
#                          log-structured store
#   BASALT_LOG_LEVEL       debug, info (default), warn, error
#   BASALT_SHM_DIR         where the Raft logs go (default /dev/shm)
#   BASALT_HOSTNQN         the host NQN the volume admits (default: one drawn
#                          on the first run and kept in $RUN_DIR/hostnqn, like
#                          /etc/nvme/hostnqn; give a host's own to use it)
#   BASALT_DHCHAP=0        admit that host by its NQN alone, without the
#                          DH-HMAC-CHAP secret (kept in $RUN_DIR/dhchap-secret)
#   BASALT_NVME_PORT, BASALT_API_PORT, BASALT_RAFT_PORT
#                          node 1's ports (defaults 4420, 9420, 9520); nodes 2
#                          and 3 take the next two of each
#
# When a node exits (a crash, kill -9), the others keep serving and the
# node is restarted with a back-off (1 s, doubling while it keeps dying
# within 30 s of starting, at most 60 s), with the end of its log after
# three quick deaths in a row.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-$PWD/.basalt}
BIN=${BIN:-bin}
ADV=${BASALT_ADVERTISE_HOST:-${BASALT_ADVERTISE:-127.0.0.1}}
ADV=${ADV%:*}
LISTEN=${BASALT_LISTEN_HOST:-0.0.0.0}
VOLUME=${BASALT_VOLUME:-vol1}
VOLUME_SIZE=${BASALT_VOLUME_SIZE:-4GiB}
USE_STORE=${BASALT_STORE:-1}
LEVEL=${BASALT_LOG_LEVEL:-info}
SHM=${BASALT_SHM_DIR:-/dev/shm}
[ -d "$SHM" ] && [ -w "$SHM" ] || SHM=$RUN_DIR/shm
tag=$(printf %s "$RUN_DIR" | cksum | cut -d' ' -f1)
NVME_PORT=${BASALT_NVME_PORT:-4420}
API_PORT=${BASALT_API_PORT:-9420}
RAFT_PORT=${BASALT_RAFT_PORT:-9520}
API=https://127.0.0.1:$API_PORT
SEC=$RUN_DIR/security
ctl() { BASALT_CREDENTIALS=$SEC/admin.json "$BIN/basaltctl" --api "$API" "$@"; }

for b in basaltd basaltctl; do
	[ -x "$BIN/$b" ] || { echo "run.sh: $BIN/$b missing: run 'make build' (or 'make run')" >&2; exit 1; }
done
mkdir -p "$RUN_DIR" "$SHM"

# The cluster's UUID, drawn on the first run and kept in $RUN_DIR: the nodes
# bootstrap with it once and check their state against it on every start
# after (a node whose Raft log is gone refuses to start); the CA's
# certificate names it.
idfile=$RUN_DIR/cluster-id
[ -s "$idfile" ] || cat /proc/sys/kernel/random/uuid >"$idfile"
if [ ! -s "$SEC/ca.crt" ]; then
	hosts=127.0.0.1,localhost
	[ "$ADV" = 127.0.0.1 ] || hosts=$hosts,$ADV
	"$BIN/basaltd" pki init --dir "$SEC" --cluster-id "$(cat "$idfile")" --nodes 1,2,3 --hosts "$hosts" \
		--api "$API" | sed 's/^/basalt: /'
fi

peers() {
	for j in 1 2 3; do
		cat <<PEER
  [[cluster.peer]]
  id = $j
  name = "node$j"
  raft = "127.0.0.1:$((RAFT_PORT - 1 + j))"
  nvme = "$ADV:$((NVME_PORT - 1 + j))"
  api = "127.0.0.1:$((API_PORT - 1 + j))"
PEER
	done
}

write_config() {
	local i=$1 dir=$RUN_DIR/node$1
	mkdir -p "$dir"
	{
		cat <<CFG
# Written by scripts/run.sh; rewritten on every run.
[node]
name = "node$i"
data_dir = "$dir"

[nvme]
listen = "$LISTEN:$((NVME_PORT - 1 + i))"
advertise = "$ADV:$((NVME_PORT - 1 + i))"

[log]
level = "$LEVEL"

[cluster]
node_id = $i
raft_listen = "127.0.0.1:$((RAFT_PORT - 1 + i))"
api_listen = "127.0.0.1:$((API_PORT - 1 + i))"
bootstrap = true
initial_cluster_id = "$(cat "$idfile")"

[security]
dir = "$SEC/node$i"
CFG
		peers
		if [ "$USE_STORE" != 0 ]; then
			cat <<CFG

[store]
drives = ["$dir/drive0", "$dir/drive1", "$dir/drive2"]
drive_size = "4GiB"
buffer = "memory"            # the Raft log on $SHM holds every write until destaged
buffer_size = "256MiB"
parity = 1
CFG
		fi
		cat <<CFG

[raft_log]
path = "$SHM/basalt-$tag-node$i.raft"
size = "256MiB"
CFG
	} >"$dir/basaltd.toml"
}

# The supervisor: one basaltd per node, restarted when it exits. pids[i] is
# node i's process (empty while it waits to restart), fails[i] how many
# times in a row it died within MIN_UP seconds of starting, due[i] when its
# restart is due (seconds since the epoch).
MIN_UP=30
declare -A pids=() fails=() due=() started=()
stop() {
	trap - INT TERM
	echo
	echo "basalt: stopping the cluster..."
	for p in "${pids[@]}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
	echo "basalt: stopped; state kept in $RUN_DIR"
	exit 0
}
trap stop INT TERM

start_node() {
	local i=$1
	echo "--- run.sh: starting node$i at $(date -u +%FT%TZ)" >>"$RUN_DIR/node$i.log"
	# setsid: a terminal's Ctrl-C reaches this script only; stop() then
	# sends each node one SIGTERM.
	setsid "$BIN/basaltd" --config "$RUN_DIR/node$i/basaltd.toml" 2>>"$RUN_DIR/node$i.log" &
	pids[$i]=$!
	started[$i]=$(date +%s)
}

# node_exited reports node i's exit and schedules its restart: 1 s after the
# first quick death, doubling to at most 60 s while it keeps dying within
# MIN_UP seconds; after three quick deaths in a row it says so with the
# end of the node's log, and keeps trying at the back-off.
node_exited() {
	local i=$1 rc=0 now up delay
	wait "${pids[$i]}" 2>/dev/null || rc=$?
	pids[$i]=
	now=$(date +%s)
	up=$((now - ${started[$i]}))
	if [ "$up" -ge "$MIN_UP" ]; then fails[$i]=0; fi
	fails[$i]=$((${fails[$i]:-0} + 1))
	delay=$((1 << (${fails[$i]} - 1)))
	[ "$delay" -le 60 ] || delay=60
	due[$i]=$((now + delay))
	local how="with status $rc"
	[ "$rc" -gt 128 ] && how="killed by signal $((rc - 128))"
	echo "basalt: node$i exited $how after ${up}s; the other nodes keep serving;" \
		"restarting it in ${delay}s (log: $RUN_DIR/node$i.log)" >&2
	if [ "${fails[$i]}" -eq 3 ]; then
		echo "basalt: node$i has failed 3 times in a row within ${MIN_UP}s of starting; the end of its log:" >&2
		grep -v '^--- run.sh' "$RUN_DIR/node$i.log" | tail -n 15 | sed 's/^/  | /' >&2
		echo "basalt: still retrying every ${delay}s up to 60s; fix the cause or press Ctrl-C" >&2
	fi
}

# supervise runs one round: notices nodes that exited and restarts those due.
supervise() {
	local i now
	now=$(date +%s)
	for i in 1 2 3; do
		if [ -n "${pids[$i]}" ]; then
			kill -0 "${pids[$i]}" 2>/dev/null || node_exited "$i"
		elif [ "$now" -ge "${due[$i]}" ]; then
			echo "basalt: restarting node$i (attempt ${fails[$i]})" >&2
			start_node "$i"
		fi
	done
}

for i in 1 2 3; do
	write_config "$i"
	: >"$RUN_DIR/node$i.log"
	start_node "$i"
done
echo "basalt: 3 nodes starting (logs: $RUN_DIR/node{1,2,3}.log)"

ready=
for _ in $(seq 1 120); do
	supervise
	if ctl -o json cluster status 2>/dev/null | grep -q '"nodes_up": 3' &&
		ctl -o json node list 2>/dev/null | grep -q '"state": "active"' &&
		[ "$(ctl -o json node list 2>/dev/null | grep -c '"state": "active"')" = 3 ]; then
		ready=1
		break
	fi
	sleep 0.5
done
if [ -z "$ready" ]; then
	echo "run.sh: the cluster did not come up in 60 s; the end of each node's log:" >&2
	for i in 1 2 3; do echo "node$i:" >&2; tail -n 10 "$RUN_DIR/node$i.log" | sed 's/^/  | /' >&2; done
	stop
fi

# The host the volume admits (volumes admit no host until one is listed):
# a host NQN drawn once and kept, like /etc/nvme/hostnqn, and its
# DH-HMAC-CHAP secret, generated by the cluster on the first run and kept
# in $RUN_DIR (0600); every run gives the volume the same pair.
HOSTNQN_FILE=$RUN_DIR/hostnqn SECRET_FILE=$RUN_DIR/dhchap-secret
[ -s "$HOSTNQN_FILE" ] || echo "nqn.2014-08.org.nvmexpress:uuid:$(cat /proc/sys/kernel/random/uuid)" >"$HOSTNQN_FILE"
HOSTNQN=${BASALT_HOSTNQN:-$(cat "$HOSTNQN_FILE")}
allow_host() {
	if [ "${BASALT_DHCHAP:-1}" = 0 ]; then
		ctl host add "$VOLUME" "$HOSTNQN" >/dev/null || stop
	elif [ -s "$SECRET_FILE" ]; then
		ctl host add "$VOLUME" "$HOSTNQN" --dhchap-secret "@$SECRET_FILE" >/dev/null || stop
	else
		local secret
		secret=$(ctl -o json host add "$VOLUME" "$HOSTNQN" --dhchap-secret generate |
			sed -n 's/.*"dhchap_secret": *"\(DHHC-1:[^"]*\)".*/\1/p' | head -1) || true
		[ -n "$secret" ] || { echo "run.sh: the cluster generated no DH-HMAC-CHAP secret" >&2; stop; }
		(umask 077 && printf '%s\n' "$secret" >"$SECRET_FILE")
	fi
}
if ctl volume show "$VOLUME" >/dev/null 2>&1; then
	echo "basalt: reusing volume $VOLUME (its data is where you left it)"
	if ctl -o json volume show "$VOLUME" | grep -q '"allow_any_host": true'; then
		ctl volume set "$VOLUME" --allow-any-host=false >/dev/null
		echo "basalt: volume $VOLUME admitted any host; now only its listed hosts"
	fi
else
	ctl volume create "$VOLUME" --size "$VOLUME_SIZE" --rf 3 >/dev/null
	echo "basalt: created volume $VOLUME ($VOLUME_SIZE, replicated on 3 nodes)"
fi
allow_host
for _ in $(seq 1 60); do
	ctl -o json volume show "$VOLUME" 2>/dev/null | grep -q '"health": "healthy"' && break
	sleep 0.5
done
echo
ctl volume show "$VOLUME" | sed '/^Attach from/,$d' # the commands for the allowed host follow
NQN=$(ctl -o json volume show "$VOLUME" | sed -n 's/.*"nqn": *"\([^"]*\)".*/\1/p' | head -1)
AUTH="--hostnqn $HOSTNQN"
if [ "${BASALT_DHCHAP:-1}" != 0 ]; then
	AUTH="$AUTH --dhchap-secret $(cat "$SECRET_FILE")"
	echo "Host allowed: $HOSTNQN, with the DH-HMAC-CHAP secret in $SECRET_FILE"
else
	echo "Host allowed: $HOSTNQN, by its NQN alone (BASALT_DHCHAP=0)"
fi
# connect_commands ADDR: the nvme-cli commands that attach every path from
# a host that reaches the nodes at ADDR, as the allowed host.
connect_commands() {
	echo "  every path at once:   nvme connect-all -t tcp -a $1 -s $NVME_PORT $AUTH"
	for j in 1 2 3; do
		echo "  or path $j:            nvme connect -t tcp -a $1 -s $((NVME_PORT - 1 + j)) -n $NQN $AUTH"
	done
}
if [ "$ADV" = 10.0.2.2 ]; then
	echo "Attach from a qemu guest (user networking; the nodes advertise 10.0.2.2; modprobe nvme-tcp first):"
	connect_commands 10.0.2.2
else
	echo "Attach from a Linux host (modprobe nvme-tcp first):"
	connect_commands "$ADV"
	echo "From a qemu guest (user networking reaches this machine as 10.0.2.2):"
	connect_commands 10.0.2.2
	echo "  (for connect-all from the guest, start with: BASALT_ADVERTISE_HOST=10.0.2.2 make run)"
fi
echo
echo "The API is HTTPS with tokens. Admin credentials: $SEC/admin.json (read-only: $SEC/reader.json)"
echo "  export BASALT_CREDENTIALS=$SEC/admin.json"
echo "Manage it with: $BIN/basaltctl (cluster status | node list | volume list | volume show $VOLUME)"
echo "Metrics: curl -s --cacert $SEC/ca.crt -H \"Authorization: Bearer \$TOKEN\" $API/metrics | grep ^basalt_"
echo "  (TOKEN: the \"token\" of $SEC/reader.json)"
echo "basalt: running; Ctrl-C stops all three nodes."
while :; do
	supervise
	sleep 1 &
	wait $! || true
done
