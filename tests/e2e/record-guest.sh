#!/bin/sh
# Runs inside the 7.3 guest: `below record` with the BPF backend and with
# plain read over the same frozen cgroups; `below dump cgroup` must show the
# same cgroups with the same values (every field, last sample).
set -eu
# shellcheck source=tests/e2e/cgroup-tree.sh
. /cgroup-tree.sh
frozen_tree /sys/fs/cgroup/rec-t

for b in bpf read; do
  echo "== below --cgroup-backend $b record"
  /below --cgroup-backend $b --store-dir /tmp/s-$b record --interval-s 1 --count 3
  /below --store-dir /tmp/s-$b backends | grep -E "^ +memory.stat "
  # Pressure totals are compared exactly by tests/bpf after they settle.
  /below --store-dir /tmp/s-$b dump cgroup --begin "10m ago" --everything -O csv > /tmp/dump-$b
  last_rows /tmp/dump-$b > /tmp/rows-$b
  cat /tmp/rows-$b | cut -c1-200
done
[ "$(wc -l < /tmp/rows-bpf)" -eq 4 ] || { echo "FAIL: expected 4 test cgroups in the bpf dump"; exit 1; }
if ! diff /tmp/rows-read /tmp/rows-bpf; then
  head -1 /tmp/dump-bpf
  echo "FAIL: dump of the bpf store differs from the read store"; exit 1
fi
echo "record checks passed: bpf and read dumps agree"
