#!/bin/sh
# Runs inside the patched guest: stream values equal plain-read values on a
# loaded, frozen tree, and `below record --cgroup-backend stream` records.
set -eu
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
echo "== stream vs plain read on frozen cgroups"
/bstats-check compare 60 stream

echo "== below record --cgroup-backend stream"
mkdir -p /sys/fs/cgroup/stream-t/c1 /sys/fs/cgroup/stream-t/c2
/below --cgroup-backend stream --store-dir /out/store record --interval-s 1 --count 4
/below --store-dir /out/store backends
for f in CpuStat MemoryStat; do expect_backend /out/store $f stream; done
/below --store-dir /out/store dump cgroup --begin "10m ago" > /tmp/dump
grep -q "stream-t" /tmp/dump || { echo "FAIL: dump lacks the test cgroups"; cat /tmp/dump; exit 1; }
echo "stream guest checks passed"
