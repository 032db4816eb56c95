#!/bin/sh
# Runs inside the 7.3 guest: `below record` with the BPF backend and with
# plain read over the same frozen cgroups; `below dump cgroup` must show the
# same cgroups with the same values (every field, last sample).
set -eu
# The tree: $TREE (under the cgroup2 root) with ra and rb/rc, loaded and
# frozen by `bstats-check frozen-tree`, which runs this script.
: "${TREE:?run me under bstats-check frozen-tree}"

for b in bpf read; do
  echo "== below --cgroup-backend $b record"
  /below --cgroup-backend $b --store-dir /tmp/s-$b record --interval-s 1 --count 3
  /below --store-dir /tmp/s-$b backends | grep -E "^ +memory.stat "
  # Last sample's rows of the test cgroups, without the time columns and
  # the pressure rates: the text file brings psi totals up to date before
  # printing (collect_percpu_times), BPF reads them as of the kernel's last
  # averaging (<= 2 s), and the two stores are recorded one after the other
  # while the freeze's last stall accounting winds down. (Pressure totals
  # are compared exactly by tests/bpf after they settle.)
  /below --store-dir /tmp/s-$b dump cgroup --begin "10m ago" --everything -O csv > /tmp/dump-$b
  skip=$(head -1 /tmp/dump-$b | tr ',' '\n' | grep -n -E "^(Datetime|Timestamp)$|Pressure$" | cut -d: -f1 | tr '\n' ' ')
  awk -F, -v skip="$skip" -v top="$TREE" 'BEGIN { n = split(skip, s, " "); for (i = 1; i <= n; i++) drop[s[i]] = 1 }
    $1 == top || $1 ~ /^(ra|rb|rc)$/ { for (i in drop) $i = ""; last[$1] = $0 }
    END { for (k in last) print last[k] }' OFS=, /tmp/dump-$b | sort > /tmp/rows-$b
  cat /tmp/rows-$b | cut -c1-200
done
[ "$(wc -l < /tmp/rows-bpf)" -eq 4 ] || { echo "FAIL: expected 4 test cgroups in the bpf dump"; exit 1; }
if ! diff /tmp/rows-read /tmp/rows-bpf; then
  head -1 /tmp/dump-bpf
  echo "FAIL: dump of the bpf store differs from the read store"; exit 1
fi
echo "record checks passed: bpf and read dumps agree"
