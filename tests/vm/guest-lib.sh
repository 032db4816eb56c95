# shellcheck shell=sh
# For guest scripts (busybox sh): the loopback up and a test cgroup with the
# guest's controllers. Source it; do not run it.

CG=/sys/fs/cgroup

# lo_up: loopback up, for a server on 127.0.0.1.
lo_up() {
  ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
}

# cgroup_top DIR: creates DIR and enables for its children each of memory,
# cpu, io, pids that $CG enables.
cgroup_top() {
  mkdir "$1"
  for c in memory cpu io pids; do
    if grep -qw $c $CG/cgroup.subtree_control; then echo "+$c" > "$1/cgroup.subtree_control"; fi
  done
}

# cgroup_parents DIR N: cgroup_top DIR, and under it p1..pN, each enabling
# for its own children the controllers it has: a tree's first level.
cgroup_parents() {
  cgroup_top "$1"
  _p=1
  while [ "$_p" -le "$2" ]; do
    mkdir "$1/p$_p"
    for c in memory cpu io pids; do
      if grep -qw $c "$1/p$_p/cgroup.controllers"; then echo "+$c" > "$1/p$_p/cgroup.subtree_control"; fi
    done
    _p=$((_p + 1))
  done
}

# backend_of STORE FILE: how the last recording in STORE reads FILE (as
# `below backends --json` names it, e.g. MemoryStat): bpf, stream or read.
# Needs /below and jq (the suite adds them).
backend_of() {
  /below --store-dir "$1" backends --json \
    | jq -r --arg f "$2" '.[-1].plan.files[] | select(.file == $f) | .backend'
}

# expect_backend STORE FILE BACKEND: fails, with the plan, unless FILE is
# read by BACKEND.
expect_backend() {
  got=$(backend_of "$1" "$2")
  [ "$got" = "$3" ] || { /below --store-dir "$1" backends; echo "FAIL: $2 from ${got:-nothing}, not $3"; exit 1; }
}
