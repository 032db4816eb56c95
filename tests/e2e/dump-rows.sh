# shellcheck shell=sh
# For guest scripts (busybox sh) comparing two `below dump cgroup
# --everything -O csv` outputs of the frozen tree of `bstats-check
# frozen-tree` ($TREE with ra, rb, rc). Source it; do not run it.

# last_rows DUMP: the last sample's rows of the four test cgroups, sorted,
# without the time columns and the pressure rates: the text file brings psi
# totals up to date before printing (collect_percpu_times), BPF reads them as
# of the kernel's last averaging (<= 2 s), and two stores are recorded one
# after the other while the freeze's last stall accounting winds down.
# (Pressure totals are compared exactly by tests/bpf after they settle.)
last_rows() {
  skip=$(head -1 "$1" | tr ',' '\n' | grep -n -E "^(Datetime|Timestamp)$|Pressure$" | cut -d: -f1 | tr '\n' ' ')
  awk -F, -v skip="$skip" -v top="$TREE" 'BEGIN { n = split(skip, s, " "); for (i = 1; i <= n; i++) drop[s[i]] = 1 }
    $1 == top || $1 ~ /^(ra|rb|rc)$/ { for (i in drop) $i = ""; last[$1] = $0 }
    END { for (k in last) print last[k] }' OFS=, "$1" | sort
}

# same_rows A B [WHAT]: /tmp/rows-B (last_rows of /tmp/dump-B) holds the four
# test cgroups and equals /tmp/rows-A; else says why and exits the script.
# WHAT names B's store in the message (default B).
same_rows() {
  [ "$(wc -l < "/tmp/rows-$2")" -eq 4 ] || { echo "FAIL: expected 4 test cgroups in the $2 dump"; exit 1; }
  if ! diff "/tmp/rows-$1" "/tmp/rows-$2"; then
    head -1 "/tmp/dump-$2"
    echo "FAIL: dump of the ${3:-$2} store differs from the $1 store"; exit 1
  fi
}
