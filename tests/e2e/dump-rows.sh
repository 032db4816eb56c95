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
