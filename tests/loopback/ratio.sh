#!/bin/sh
# ratio.sh runs the loopback benchmark (BenchmarkBasalt and BenchmarkCeiling)
# and prints, per cell, the mean IOPS of each, Basalt's share of the
# ceiling, and the mean CPU time per I/O of each. Environment: BENCHTIME (default 2s), COUNT (default 3), BENCH (a
# -bench regexp to narrow the cells, default all), OUT (raw output file,
# default $TMPDIR/loopback-bench.txt, benchstat-compatible).
set -eu
cd "$(dirname "$0")/../.."
out=${OUT:-${TMPDIR:-/tmp}/loopback-bench.txt}
go test -run '^$' -bench "${BENCH:-Basalt|Ceiling}" -benchtime "${BENCHTIME:-2s}" \
	-count "${COUNT:-3}" ./tests/loopback | tee "$out"
awk '
/^Benchmark(Basalt|Ceiling)\// {
	name = $1
	sub(/-[0-9]+$/, "", name)             # GOMAXPROCS suffix
	engine = name; sub(/\/.*/, "", engine); sub(/^Benchmark/, "", engine)
	cell = name; sub(/^[^\/]*\//, "", cell)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "IOPS") { sum[engine, cell] += $i; n[engine, cell]++ }
		if ($(i + 1) == "cpu-ns/op") { cpu[engine, cell] += $i; m[engine, cell]++ }
	}
	if (!(cell in seen)) { seen[cell] = 1; order[++cells] = cell }
}
END {
	printf "\n%-34s %12s %12s %8s %12s %12s\n", "cell", "Basalt IOPS", "ceiling IOPS", "ratio",
		"Basalt cpu", "ceiling cpu"
	for (i = 1; i <= cells; i++) {
		c = order[i]
		b = n["Basalt", c] ? sum["Basalt", c] / n["Basalt", c] : 0
		k = n["Ceiling", c] ? sum["Ceiling", c] / n["Ceiling", c] : 0
		bc = m["Basalt", c] ? cpu["Basalt", c] / m["Basalt", c] : 0
		kc = m["Ceiling", c] ? cpu["Ceiling", c] / m["Ceiling", c] : 0
		printf "%-34s %12.0f %12.0f %7.0f%% %9.0f ns %9.0f ns\n", c, b, k, k ? 100 * b / k : 0, bc, kc
	}
}' "$out"
