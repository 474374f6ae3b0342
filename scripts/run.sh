#!/usr/bin/env bash
# make run: starts a local Basalt node serving one 4 GiB thin volume over
# NVMe/TCP and prints the nvme-cli commands to attach it. Stays in the
# foreground; Ctrl-C stops it cleanly; running it again finds the data where
# it was left (state lives in $RUN_DIR, default ./.basalt).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-$PWD/.basalt}
BIN=${BIN:-bin}
PORT=${BASALT_PORT:-4420}
LISTEN=${BASALT_LISTEN:-0.0.0.0:$PORT}
# Hosts on this machine use 127.0.0.1; a host in a qemu VM with user-mode
# networking reaches this machine as 10.0.2.2: BASALT_ADVERTISE=10.0.2.2:4420.
ADVERTISE=${BASALT_ADVERTISE:-127.0.0.1:$PORT}
mkdir -p "$RUN_DIR"
cfg=$RUN_DIR/node1.toml
cat >"$cfg" <<CFG
[node]
name = "node1"

[nvme]
listen = "$LISTEN"
advertise = "$ADVERTISE"
port_id = 1

[[subsystem]]
nqn = "nqn.2026-11.io.basalt:vol1"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "file"
  path = "$RUN_DIR/node1-vol1.img"
  size = "4GiB"
  block_size = 4096
CFG
echo "basalt: config $cfg, data in $RUN_DIR (Ctrl-C to stop)"
exec "$BIN/basaltd" --config "$cfg"
