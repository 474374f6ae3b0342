# Basalt — see README.md. Two commands matter: `make run` and `make test`.
GO        ?= go
BIN       := bin
RUN_DIR   ?= $(CURDIR)/.basalt
FUZZTIME  ?= 10s

.PHONY: all build run test test-unit test-crash soak test-cluster bench-cluster test-e2e fuzz-short lint bench compare compare-small clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: start a local node with a volume and print the nvme-cli commands to attach it.
run: build
	RUN_DIR=$(RUN_DIR) BIN=$(BIN) scripts/run.sh

## test: everything CI runs: lint, unit + integration tests (race detector),
## the real-kernel e2e test under qemu (installs what it needs), the crash
## tests again without the race detector, short fuzzing.
test: lint test-unit test-crash fuzz-short

test-unit:
	$(GO) test -race -tags invariants -timeout 30m ./...

## test-crash: the crash tests of the store, the write buffer and the Raft log
## without the race detector, under which the store's run fewer seeds
## (TestCrashRecovery 6 instead of 60, TestCrashRecoveryConcurrent 2 instead of
## 10, TestResizeVolumeCrash every fourth persistence point): the store's at
## their default counts, the write buffer's and the Raft log's, which cost
## little, at 10x and 16x theirs (3,000 and 100 seeds). About 15 s of tests;
## a minute on 2 cores when the build cache does not yet hold their non-race build.
## Seeds are fresh every run; each test logs its first seed, and a failure
## names its own (see scripts/soak.sh for the variables that replay them).
CRASH_TESTS := TestCrashRecovery|TestCrashRecoveryCompressed|TestSnapshotCrash|TestCrashRecoveryFoundSeeds|TestStagedCrashRecovery|TestCrashRecoveryConcurrent|TestCrashAfterDiscardRecoversEveryAcknowledgedWrite|TestResizeVolumeCrash|TestCrashAtEveryPersistencePoint|TestCrashWithConcurrentAppendsOverManySeeds|TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord|TestLargeAppendSplitsIntoRecordsThatRecoverAsPrefixes|TestWholeClusterRestartKeepsAcknowledgedWrites
test-crash:
	BASALT_CACHE_SEEDS=3000 BASALT_RAFTLOG_SEEDS=100 \
	  $(GO) test -tags invariants -count=1 -timeout 15m -run '^($(CRASH_TESTS))$$' ./pkg/store/ ./cache/ ./replication/

## soak: the long runs: 10,000 simulation seeds, 3,000 store crash seeds, the
## write buffer's and the Raft log's crash tests at high counts, split over
## the cores (scripts/soak.sh; its variables scale each part).
soak:
	scripts/soak.sh

test-cluster:
	$(GO) test -count=1 -v -timeout 15m ./tests/cluster/

bench-cluster: build
	BASALT_CLUSTER_BENCH=1 $(GO) test -count=1 -v -run TestMeasureIOPS ./tests/cluster/

test-e2e:
	$(GO) test -v -count=1 -timeout 20m ./tests/e2e/

fuzz-short:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./pkg/lint/

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./pkg/... ./target/... ./ec/... ./cache/...

## compare: raw disk vs Ceph RBD (pool size 3) vs Basalt on this machine, one run;
## installs fio and Ceph from Debian. Writes docs/bench/results.{json,md} and PNG plots.
## SYSTEMS="socket disk ceph basalt-node basalt-rf3 basalt-rf2" chooses the systems.
compare: build
	bench/compare.sh

## compare-small: the same with 1 GiB volumes and 10 s points (about 17 minutes).
compare-small: build
	SMALL=1 bench/compare.sh

clean:
	rm -rf $(BIN)
