#!/bin/sh
# Runs inside the 7.3 guest: `below record --listen` with the BPF backend
# serves the test cgroups' memory.stat-backed series; what it serves has
# every cgroup, the OpenMetrics content type and `# EOF`.
set -eu
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
lo_up
T=$CG/met-t
cgroup_top "$T"
for i in 1 2 3 4 5 6 7 8 9 10; do mkdir "$T/c$i"; done
sh -c "echo \$\$ > $T/c1/cgroup.procs; dd if=/dev/zero of=/tmp/f bs=1M count=4 2>/dev/null; exec sleep 600" &
/below --cgroup-backend bpf --store-dir /tmp/s record --interval-s 1 --listen 127.0.0.1:9749 2> /tmp/rec.log &
n=0
until wget -q -O /tmp/text http://127.0.0.1:9749/metrics 2>/dev/null; do
  n=$((n + 1)); [ $n -lt 60 ] || { cat /tmp/rec.log; echo "FAIL: no /metrics"; exit 1; }
  sleep 1
done
sleep 2
wget -q -S --header 'Accept: application/openmetrics-text; version=1.0.0' -O /tmp/om \
  http://127.0.0.1:9749/metrics 2> /tmp/headers
grep -qi 'content-type: application/openmetrics-text; version=1.0.0' /tmp/headers || { cat /tmp/headers; echo "FAIL: content type"; exit 1; }
[ "$(tail -n 1 /tmp/om)" = "# EOF" ] || { echo "FAIL: no # EOF"; exit 1; }
expect_backend /tmp/s MemoryStat bpf
for i in 1 2 3 4 5 6 7 8 9 10; do
  for m in below_cgroup_cpu_usage_seconds_total below_cgroup_memory_bytes below_cgroup_memory_anon_bytes \
           below_cgroup_tasks below_cgroup_pressure_memory_some_seconds_total; do
    grep -q "^$m{cgroup=\"/met-t/c$i\"} " /tmp/om || { grep met-t /tmp/om | head -40; echo "FAIL: $m of /met-t/c$i missing"; exit 1; }
  done
done
grep -q '^below_cgroup_memory_file_bytes{cgroup="/met-t/c1"} [1-9]' /tmp/om || { grep 'c1"' /tmp/om; echo "FAIL: c1 page cache not seen"; exit 1; }
echo "served $(grep -vc '^#' /tmp/om) series; per cgroup: $(grep -c 'cgroup="/met-t/c2"' /tmp/om)"
echo "metrics checks passed"
