#!/usr/bin/env bash
# soak.sh: long randomized runs of the deterministic simulation and of the
# crash tests, far beyond the seeds `make test` draws. Each part runs its
# seeds in chunks spread over SOAK_JOBS workers (default: the number of
# cores), prints a progress line every SOAK_PROGRESS seconds, and the run ends
# with a summary of seeds and time per part. It exits non-zero if any chunk
# failed, and prints, for every failing seed it can name, the command that
# replays it.
#
# Parts (SOAK_PARTS chooses them, in order) and their seed counts:
#
#   store             SOAK_STORE_SEEDS=3000      pkg/store TestCrashRecovery
#   store-concurrent  SOAK_STORE_CONC_SEEDS=500  pkg/store TestCrashRecoveryConcurrent
#   store-discard     SOAK_STORE_DISCARD_SEEDS=200  pkg/store TestCrashAfterDiscardRecoversEveryAcknowledgedWrite
#   store-staged      SOAK_STORE_STAGED_SEEDS=1000  pkg/store TestStagedCrashRecovery
#   cache             SOAK_CACHE_SEEDS=1000000   cache TestCrashWithConcurrentAppendsOverManySeeds
#   raftlog           SOAK_RAFTLOG_SEEDS=10000   replication TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord
#   sim               SOAK_SIM_SEEDS=10000       tests/sim TestSim
#
# Each part's first seed is drawn fresh (SOAK_FIRST=N fixes every part's);
# chunk k of a part runs seeds first+k*chunk .. first+(k+1)*chunk-1. Logs stay
# in SOAK_DIR (default a new directory under /tmp, printed at the start).
# SOAK_CHUNK_TIMEOUT (default 20m) bounds one chunk, so a seed that hangs is
# reported (its name is in the timeout's list of running tests) instead of
# stalling the soak.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

GO=${GO:-go}
JOBS=${SOAK_JOBS:-$(nproc)}
PARTS=${SOAK_PARTS:-"store store-concurrent store-discard store-staged cache raftlog sim"}
PROGRESS=${SOAK_PROGRESS:-60}
CHUNK_TIMEOUT=${SOAK_CHUNK_TIMEOUT:-20m}
DIR=${SOAK_DIR:-$(mktemp -d /tmp/basalt-soak.XXXXXX)}
mkdir -p "$DIR/bin"
unset BASALT_STORE_SEED BASALT_STORE_SEEDS BASALT_STORE_FIRST BASALT_CACHE_SEEDS BASALT_CACHE_FIRST \
  BASALT_RAFTLOG_SEEDS BASALT_RAFTLOG_FIRST

# part_* describe a part: package, test binary, test, seeds, chunk size, and
# how a failing seed replays.
declare -A pkg test seeds chunk replay
pkg[store]=./pkg/store; test[store]=TestCrashRecovery
seeds[store]=${SOAK_STORE_SEEDS:-3000}; chunk[store]=100
replay[store]="BASALT_STORE_SEED=@ go test -tags invariants ./pkg/store -run '^TestCrashRecovery\$' -v"
pkg[store-concurrent]=./pkg/store; test[store-concurrent]=TestCrashRecoveryConcurrent
seeds[store-concurrent]=${SOAK_STORE_CONC_SEEDS:-500}; chunk[store-concurrent]=100
replay[store-concurrent]="BASALT_STORE_SEED=@ go test -tags invariants ./pkg/store -run '^TestCrashRecoveryConcurrent\$' -v -count=20 (the writer goroutine's interleaving is not part of the seed)"
pkg[store-discard]=./pkg/store; test[store-discard]=TestCrashAfterDiscardRecoversEveryAcknowledgedWrite
seeds[store-discard]=${SOAK_STORE_DISCARD_SEEDS:-200}; chunk[store-discard]=25
replay[store-discard]="BASALT_STORE_SEED=@ go test -tags invariants ./pkg/store -run '^TestCrashAfterDiscardRecoversEveryAcknowledgedWrite\$' -v"
pkg[store-staged]=./pkg/store; test[store-staged]=TestStagedCrashRecovery
seeds[store-staged]=${SOAK_STORE_STAGED_SEEDS:-1000}; chunk[store-staged]=100
replay[store-staged]="BASALT_STORE_SEED=@ go test -tags invariants ./pkg/store -run '^TestStagedCrashRecovery\$' -v"
pkg[cache]=./cache; test[cache]=TestCrashWithConcurrentAppendsOverManySeeds
seeds[cache]=${SOAK_CACHE_SEEDS:-1000000}; chunk[cache]=50000
replay[cache]="BASALT_CACHE_FIRST=@ BASALT_CACHE_SEEDS=1 go test -tags invariants ./cache -run '^TestCrashWithConcurrentAppendsOverManySeeds\$' -v -count=20 (the appenders' interleaving is not part of the seed)"
pkg[raftlog]=./replication; test[raftlog]=TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord
seeds[raftlog]=${SOAK_RAFTLOG_SEEDS:-10000}; chunk[raftlog]=500
replay[raftlog]="BASALT_RAFTLOG_FIRST=@ BASALT_RAFTLOG_SEEDS=1 go test -tags invariants ./replication -run '^TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord\$' -v"
pkg[sim]=./tests/sim; test[sim]=TestSim
seeds[sim]=${SOAK_SIM_SEEDS:-10000}; chunk[sim]=100
replay[sim]="go test -tags invariants ./tests/sim -run '^TestSim\$' -sim.seed=@ -v"

now() { date +%s; }

# chunk_cmd PART FIRST N LOG: runs one chunk's test binary in its package
# directory.
chunk_cmd() {
  local part=$1 first=$2 n=$3 log=$4
  local bin=$DIR/bin/$(basename "${pkg[$part]}").test
  local args=(-test.run "^${test[$part]}\$" -test.v -test.count=1 -test.timeout "$CHUNK_TIMEOUT")
  local env=()
  case $part in
    store*) env=(BASALT_STORE_FIRST="$first" BASALT_STORE_SEEDS="$n") ;;
    cache) env=(BASALT_CACHE_FIRST="$first" BASALT_CACHE_SEEDS="$n") ;;
    raftlog) env=(BASALT_RAFTLOG_FIRST="$first" BASALT_RAFTLOG_SEEDS="$n") ;;
    sim) args+=(-sim.first="$first" -sim.seeds="$n") ;;
  esac
  (cd "$root/${pkg[$part]}" && env "${env[@]}" "$bin" "${args[@]}") >"$log" 2>&1
}

# worker PART W FIRST: runs chunks W, W+JOBS, ... of PART; each leaves
# chunk-K.rc (its exit status) next to its log.
worker() {
  local part=$1 w=$2 first=$3
  local total=${seeds[$part]} size=${chunk[$part]}
  local chunks=$(((total + size - 1) / size)) k
  for ((k = w; k < chunks; k += JOBS)); do
    local from=$((first + k * size)) n=$((total - k * size < size ? total - k * size : size))
    chunk_cmd "$part" "$from" "$n" "$DIR/$part/chunk-$k.log"
    echo $? >"$DIR/$part/chunk-$k.rc"
  done
}

# seeds_done PART: seeds of finished chunks.
seeds_done() {
  local part=$1 done=0 rc k
  for rc in "$DIR/$part"/chunk-*.rc; do
    [ -e "$rc" ] || continue
    k=${rc##*/chunk-}; k=${k%.rc}
    done=$((done + (seeds[$part] - k * chunk[$part] < chunk[$part] ? seeds[$part] - k * chunk[$part] : chunk[$part])))
  done
  echo "$done"
}

failed_chunks() { grep -lv '^0$' "$DIR/$1"/chunk-*.rc 2>/dev/null | wc -l; }

# failing_seeds LOG: the seeds a failed chunk's log names: failed subtests
# (seed=N) and tests running when the chunk timed out, or else (the cache's
# seeds are not subtests) its "seed N:" failure messages.
failing_seeds() {
  local named
  named=$({
    grep -oE -- '--- FAIL: [^ ]*seed=[0-9]+' "$1" | grep -oE '[0-9]+$'
    sed -n '/^panic: test timed out/,$p' "$1" | grep -oE 'seed=[0-9]+' | grep -oE '[0-9]+$'
  } | sort -un)
  if [ -z "$named" ]; then
    named=$(grep -oE 'seed [0-9]+:' "$1" | grep -oE '[0-9]+' | sort -un)
  fi
  echo "$named"
}

# excerpt LOG SEED...: what each failing seed's subtest printed (its lines
# from its === RUN to the next test's), or the log's FAIL lines and what
# precedes them where the seeds are not subtests.
excerpt() {
  local log=$1; shift
  if ! grep -qE -- '--- FAIL: [^ ]*seed=' "$log"; then
    grep -B4 -- '--- FAIL' "$log"
    return
  fi
  local s
  for s in "$@"; do
    awk -v s="seed=$s" '/^=== RUN/ { on = ($NF ~ s"$") } on' "$log"
  done
}

random_first() { echo $((1 + $(od -An -N5 -tu8 /dev/urandom | tr -d ' ') % (1 << 40))); }

declare -A took first_of result
failures=()
start_all=$(now)
echo "soak: $JOBS workers, parts: $PARTS; logs in $DIR"

t0=$(now)
for p in $(for part in $PARTS; do echo "${pkg[$part]}"; done | sort -u); do
  if ! $GO test -c -tags invariants -o "$DIR/bin/$(basename "$p").test" "$p"; then
    echo "soak: building the tests of $p failed"; exit 1
  fi
done
echo "soak: built the test binaries in $(($(now) - t0)) s"

for part in $PARTS; do
  if [ -z "${pkg[$part]:-}" ]; then echo "soak: unknown part $part"; exit 2; fi
  mkdir -p "$DIR/$part"; rm -f "$DIR/$part"/chunk-*
  first=${SOAK_FIRST:-$(random_first)}; first_of[$part]=$first
  echo "soak: $part: ${seeds[$part]} seeds from $first (${test[$part]}, chunks of ${chunk[$part]})"
  t0=$(now); last=$t0
  pids=()
  for ((w = 0; w < JOBS; w++)); do worker "$part" "$w" "$first" & pids+=($!); done
  while :; do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    sleep 1
    if (($(now) - last >= PROGRESS)); then
      last=$(now)
      echo "soak: $part: $(seeds_done "$part")/${seeds[$part]} seeds, $((last - t0)) s, $(failed_chunks "$part") chunks failed"
    fi
  done
  wait "${pids[@]}"
  took[$part]=$(($(now) - t0))
  bad=$(failed_chunks "$part")
  if [ "$bad" = 0 ]; then result[$part]=ok; else result[$part]="FAILED ($bad chunks)"; fi
  echo "soak: $part: ${seeds[$part]} seeds in ${took[$part]} s: ${result[$part]}"
  for rc in $(grep -lv '^0$' "$DIR/$part"/chunk-*.rc 2>/dev/null); do
    log=${rc%.rc}.log
    echo "soak: $part: $log:"
    named=$(failing_seeds "$log")
    { excerpt "$log" $named; sed -n '/^panic: test timed out/,+6p' "$log"; } | head -40 | sed 's/^/    /'

    [ -n "$named" ] || failures+=("$part: a chunk failed without naming a seed; see $log")
    for s in $named; do failures+=("$part: seed $s: ${replay[$part]//@/$s}"); done
  done
done

echo
echo "soak: summary ($JOBS workers; total $(($(now) - start_all)) s)"
printf '  %-17s %9s %15s %7s  %s\n' part seeds "first seed" time result
for part in $PARTS; do
  printf '  %-17s %9d %15d %5d s  %s\n' "$part" "${seeds[$part]}" "${first_of[$part]}" "${took[$part]}" "${result[$part]}"
done
if ((${#failures[@]} > 0)); then
  echo
  echo "soak: FAILED; replay with:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "soak: PASS"
