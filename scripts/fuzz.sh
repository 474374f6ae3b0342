#!/usr/bin/env bash
# Runs every Go fuzz target in the module for $FUZZTIME (default 10s) each.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
status=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz: $pkg $target ($FUZZTIME)"
    if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg" >/tmp/fuzz.$$.log 2>&1; then
      cat /tmp/fuzz.$$.log; status=1
    fi
  done
done
rm -f /tmp/fuzz.$$.log
exit $status
