# shellcheck shell=sh
# Test cgroups for the suites that run below in a guest (busybox sh). Source
# it; do not run it.

# Enables on $1's children whichever of cpu memory io pids $1 has.
enable_controllers() {
  for c in memory cpu io pids; do
    if grep -qw $c "$1/cgroup.controllers"; then echo "+$c" > "$1/cgroup.subtree_control"; fi
  done
}

# frozen_tree T: T/ra (cpu.max 50%, a process that used CPU and wrote 4 MiB of
# page cache), T/rb/rc (a sleeping process; rb with memory and pids only),
# then T frozen and settled, so two readers one after the other see the same
# numbers. Prints nothing; the cgroups are T, ra, rb, rc.
frozen_tree() {
  T=$1
  mkdir "$T"
  enable_controllers "$T"
  mkdir "$T/ra" "$T/rb"
  echo "+memory +pids" > "$T/rb/cgroup.subtree_control"
  mkdir "$T/rb/rc"
  echo 50000 100000 > "$T/ra/cpu.max"
  sh -c "echo \$\$ > $T/ra/cgroup.procs; n=0; while [ \$n -lt 20000 ]; do n=\$((n+1)); done; dd if=/dev/zero of=/tmp/fa bs=1M count=4 2>/dev/null; exec sleep 600" &
  sh -c "echo \$\$ > $T/rb/rc/cgroup.procs; exec sleep 600" &
  sleep 3
  echo 1 > "$T/cgroup.freeze"
  until grep -q "frozen 1" "$T/cgroup.events"; do sleep 0.1; done
  # The periodic memcg flush (2 s) settles what froze mid-update.
  sleep 4
}

# wide_tree T N: N cgroups under T, 3 levels deep, breadth-first with the
# smallest fanout f where f + f^2 + f^3 >= N (the shape of cgroup-bench's
# fixture); a sleeping process in each of the first 32 leaves.
wide_tree() {
  T=$1 n=$2 f=1
  while [ $((f + f * f + f * f * f)) -lt "$n" ]; do f=$((f + 1)); done
  mkdir "$T"
  enable_controllers "$T"
  made=0 level="$T" holders=0
  for depth in 1 2 3; do
    next=
    for p in $level; do
      i=0
      while [ $i -lt $f ] && [ $made -lt "$n" ]; do
        if [ $i = 0 ] && [ $depth -gt 1 ]; then enable_controllers "$p"; fi
        d=$p/l$depth-$i
        mkdir "$d"
        next="$next $d"
        made=$((made + 1)) i=$((i + 1))
      done
    done
    level=$next
  done
  for d in $level; do
    [ $holders -lt 32 ] || break
    sh -c "echo \$\$ > $d/cgroup.procs; exec sleep 3600" &
    holders=$((holders + 1))
  done
}

# last_rows CSV: from a `below dump cgroup --everything -O csv` output, the
# last row of each of frozen_tree's cgroups, sorted, without the time columns
# and the pressure rates: the text file brings psi totals up to date before
# printing (collect_percpu_times), BPF reads them as of the kernel's last
# averaging (<= 2 s), and two stores are recorded one after the other while
# the freeze's last stall accounting winds down.
last_rows() {
  skip=$(head -1 "$1" | tr ',' '\n' | grep -n -E "^(Datetime|Timestamp)$|Pressure$" | cut -d: -f1 | tr '\n' ' ')
  awk -F, -v skip="$skip" 'BEGIN { n = split(skip, s, " "); for (i = 1; i <= n; i++) drop[s[i]] = 1 }
    $1 ~ /^(rec-t|ra|rb|rc)$/ { for (i in drop) $i = ""; last[$1] = $0 }
    END { for (k in last) print last[k] }' OFS=, "$1" | sort
}
