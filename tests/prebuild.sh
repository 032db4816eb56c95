#!/usr/bin/env bash
# Usage: tests/prebuild.sh
# Builds what later suites of `./x test` need while the earlier ones run:
# guests run QEMU on one host thread (tests/vm/run.sh), so the other core
# is idle through them. `./x test` starts this in the background at nice 19
# (QEMU keeps its core): the facts stage's test binary, the patched 7.3
# kernel, and below main with the series (the binary, upstream's test
# binaries, cgroupfs's vmtest binary). Each suite still asks for what it
# needs, under the same locks and cache keys: this only moves the work
# earlier, and a failure here is left for the suite to report.
set -uo pipefail
# shellcheck source=tests/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/upstream/lib.sh"
# shellcheck disable=SC2034 # read by log (tests/lib.sh)
LOG_TAG=prebuild
step() {
  local t0=$SECONDS
  if "$@" >/dev/null; then log "$1 $2: $((SECONDS - t0)) s"; else log "$1 $2: failed (the suite will say why)"; fi
}
upstream_test_binaries() {
  (flock 8; ucargo "$(upstream_tree patched)" test --release --no-run 2>&1) 8>"$UP/.lock"
}
step collector_test_binary "(the facts stage's)"
step "$REPO_ROOT/tests/vm/kernel.sh" patched
if upstream_available; then
  step upstream_binary patched
  step upstream_test_binaries "(below main with the series)"
  step vmtest_binary patched
fi
