# shellcheck shell=bash
# basalt-rf2: the 3-node cluster with replication factor 2, one volume of
# SIZE_MIB MiB in the log-structured store (drive files on the disk under
# test, write buffer and Raft log on /dev/shm), prefilled by compare.sh;
# basalt-bench gets all three nodes' NVMe/TCP addresses and follows ANA.
# See cluster.sh.

# shellcheck source=bench/systems/cluster.sh
source "$ROOT/bench/systems/cluster.sh"

system_up() { basalt_cluster_up 2; }
