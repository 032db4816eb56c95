#!/bin/sh
# Runs inside a tests/vm guest (busybox sh). Usage: guest-checks.sh full|fallback|psi
# full:     7.3 guest (memcg kfuncs): plan, compare, churn, syscalls, bench.
# fallback: kernel without memcg kfuncs: auto falls back per file with the
#           reason, forcing bpf fails with it; what BPF serves equals text.
# psi:      pressure under memory.high and 40 s idle after: what auto
#           samples (BPF) equals the file read right after.
set -u
B=/bstats-check
fail=0
check() {
  name=$1; shift
  echo "=== $name: $*"
  if "$@"; then echo "=== $name: PASS"; else echo "=== $name: FAIL"; fail=1; fi
}

case "${1:-full}" in
full)
  check plan-bpf $B plan bpf
  check compare $B compare 60
  check churn $B churn 10
  check syscalls $B syscalls
  check bench $B bench 1000 10
  ;;
fallback)
  echo "=== plan-auto"
  $B plan auto | tee /tmp/plan || fail=1
  if grep -q '^  memory.stat  *read bpf: kernel lacks kfunc bpf_mem_cgroup_page_state' /tmp/plan &&
     grep -q '^  memory.current  *bpf ' /tmp/plan; then
    echo "=== plan-auto: PASS (per-file fallback with the reason)"
  else
    echo "=== plan-auto: FAIL"; fail=1
  fi
  echo "=== plan-bpf (must fail)"
  if $B plan bpf >/tmp/forced 2>&1; then
    echo "=== plan-bpf: FAIL (succeeded)"; fail=1
  elif grep -q 'bpf_mem_cgroup_page_state' /tmp/forced; then
    cat /tmp/forced; echo "=== plan-bpf: PASS (fails with the reason)"
  else
    cat /tmp/forced; echo "=== plan-bpf: FAIL (wrong reason)"; fail=1
  fi
  # What BPF does serve here must equal the text.
  check compare $B compare 60
  ;;
psi)
  check psi-idle $B psi-idle --pressure 12 --idle 40
  ;;
esac
exit $fail
