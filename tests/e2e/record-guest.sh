#!/bin/sh
# Runs inside the 7.3 guest: `below record` with the BPF backend and with
# plain read over the same frozen cgroups; `below dump cgroup` must show the
# same cgroups with the same values (every field, last sample).
set -eu
# The tree: $TREE (under the cgroup2 root) with ra and rb/rc, loaded and
# frozen by `bstats-check frozen-tree`, which runs this script.
: "${TREE:?run me under bstats-check frozen-tree}"
# shellcheck source=tests/e2e/dump-rows.sh
. /dump-rows.sh
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh

for b in bpf read; do
  echo "== below --cgroup-backend $b record"
  /below --cgroup-backend $b --store-dir /tmp/s-$b record --interval-s 1 --count 3
  expect_backend /tmp/s-$b MemoryStat $b
  /below --store-dir /tmp/s-$b dump cgroup --begin "10m ago" --everything -O csv > /tmp/dump-$b
  last_rows /tmp/dump-$b > /tmp/rows-$b
  cat /tmp/rows-$b | cut -c1-200
done
same_rows read bpf
echo "record checks passed: bpf and read dumps agree"
