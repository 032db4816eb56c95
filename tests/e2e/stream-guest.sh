#!/bin/sh
# Runs inside the patched guest: stream values equal plain-read values on
# frozen cgroups, and `below record --cgroup-backend stream` records.
set -eu
CG=/sys/fs/cgroup
T=$CG/stream-t
mkdir "$T"
for c in memory cpu io pids; do
  grep -qw $c $CG/cgroup.subtree_control && echo "+$c" > "$T/cgroup.subtree_control"
done
for i in 1 2 3 4 5 6; do mkdir "$T/c$i"; done
# Load: CPU spinners, a tmpfs file, a sleeper.
for i in 1 2 3; do
  sh -c "echo \$\$ > $T/c$i/cgroup.procs; n=0; while [ \$n -lt 30000 ]; do n=\$((n+1)); done; exec sleep 600" &
done
sh -c "echo \$\$ > $T/c4/cgroup.procs; dd if=/dev/zero of=/tmp/f4 bs=1M count=8 2>/dev/null; exec sleep 600" &
sh -c "echo \$\$ > $T/c5/cgroup.procs; exec sleep 600" &
sleep 3
echo 1 > "$T/cgroup.freeze"
n=0
until grep -q "frozen 1" "$T/cgroup.events"; do
  n=$((n+1)); [ $n -lt 100 ] || { echo "FAIL: cgroups did not freeze"; exit 1; }
  sleep 0.1
done

echo "== stream vs plain read on frozen cgroups"
/compare --root "$T" --backend stream

echo "== below record --cgroup-backend stream"
/below --cgroup-backend stream --store-dir /out/store record --interval-s 1 --count 4
/below --store-dir /out/store backends | tee /tmp/backends
for f in cpu.stat memory.stat; do
  grep -Eq "^ +$f +stream " /tmp/backends || { echo "FAIL: $f not served by stream"; exit 1; }
done
/below --store-dir /out/store dump cgroup --begin "10m ago" > /tmp/dump
grep -q "c4" /tmp/dump || { echo "FAIL: dump lacks the test cgroups"; cat /tmp/dump; exit 1; }
echo 0 > "$T/cgroup.freeze"
echo "stream guest checks passed"
