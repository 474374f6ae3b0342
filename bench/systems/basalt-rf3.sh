# shellcheck shell=bash
# basalt-rf3: the 3-node cluster (issue 4) with replication factor 3, one
# volume of SIZE_MIB MiB, every node's NVMe/TCP port a path.
#
# Plug-in point: set BASALT_CLUSTER_UP to a command that starts the cluster in
# the background with replication factor $1 and a volume of $2 MiB, data under
# $3, and prints three lines: ADDRS=host:port,host:port,host:port
# NQN=<volume subsystem NQN>  PIDS=<pid> <pid> <pid>  (the daemons, for CPU per
# I/O). Until the cluster lands this system is reported as not available.

# shellcheck source=bench/systems/cluster.sh
source "$ROOT/bench/systems/cluster.sh"

system_up() {
	[ -n "${BASALT_CLUSTER_UP:-}" ] || return 2
	basalt_cluster_up 3
}
