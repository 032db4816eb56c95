#!/usr/bin/env bash
# Usage: tests/upstream/measure-vm.sh [--kernel NAME] [--timeout SECS] [--out DIR] [MEASURE ARGS...]
# Runs tests/upstream/measure.sh (stock below main against below main with
# the reader series) in a guest of tests/vm (default debian-7.3, 2 vCPUs,
# 4 GiB) and prints its report, also kept as DIR/measure.txt (DIR defaults
# to target/measure-<kernel>; its progress: DIR/measure.log and the console). MEASURE ARGS
# go to measure.sh (-n, -p, -r, -s). The binaries: $BELOW_MAIN_BIN and
# $BELOW_MAIN_SERIES_BIN, else tests/upstream/binaries.sh's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"

kernel=debian-7.3 timeout=5400 out=
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kernel=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) break ;;
  esac
done
out=${out:-target/measure-$kernel}
stock=${BELOW_MAIN_BIN:-$(tests/upstream/binaries.sh stock | tail -n1)}
patched=${BELOW_MAIN_SERIES_BIN:-$(tests/upstream/binaries.sh patched | tail -n1)}
install_pkgs bpftool jq bash libc-bin
img=$(tests/vm/kernel.sh "$kernel" | tail -n1)
rm -rf "$out"
mkdir -p "$out"
log "measure.sh $* in $kernel (console: $out/console.log)"
# The busybox guest has no bash, jq, bpftool or getconf: measure.sh's
# needs come from this machine.
tests/vm/run.sh --kernel "$img" --timeout "$timeout" --mem 4G --out "$out" \
  --add tests/upstream/measure.sh:/measure.sh --add "$stock:/below-stock" --add "$patched:/below-patched" \
  --add "$(command -v bash):/bin/bash" --add "$(command -v jq):/usr/local/bin/jq" \
  --add "$(command -v bpftool):/usr/local/bin/bpftool" --add "$(command -v getconf):/usr/local/bin/getconf" \
  -- sh -c 'set -o pipefail; bash /measure.sh "$@" /below-stock /below-patched 2>&1 > /out/measure.txt | tee /out/measure.log' sh "$@" \
  > "$out/console.log" 2>&1 || { tail -n 30 "$out/console.log" >&2; tail -n 5 "$out/measure.log" >&2 || true; exit 1; }
cat "$out/measure.txt"
log "measure.sh $* in $kernel: ${SECONDS} s"
