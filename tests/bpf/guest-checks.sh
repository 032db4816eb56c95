#!/bin/sh
# Runs inside a tests/vm guest (busybox sh). Usage: guest-checks.sh full|compare|numa|fallback|parity [values]|psi
# full:     7.3 guest (memcg kfuncs): plan, compare, churn, syscalls, bench.
# compare:  another kernel with memcg kfuncs: memory.stat, cpu.stat and the
#           pressure files served by BPF (the plan, checked by bstats-check),
#           what BPF serves equals text.
# numa:     two nodes with memory (run.sh --numa): memory.numa_stat served
#           by BPF for both, equal to text.
# fallback: kernel without memcg kfuncs: auto and forced bpf fall back per
#           file with the reason; what BPF serves equals text.
# parity:   live tree: every value BPF serves lies where the text read just
#           before and after each sample puts it, without and with top-N;
#           each planted error must be caught.
# psi:      pressure under memory.high and 40 s idle after: what auto
#           samples (BPF) equals the file read right after; totals of
#           cgroups whose tasks contend and move lie between the reads
#           around each sample.
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
compare)
  check plan-auto $B plan auto --bpf memory.stat --bpf cpu.stat \
    --bpf cpu.pressure --bpf io.pressure --bpf memory.pressure
  check compare $B compare 60
  ;;
numa)
  check two-nodes grep -qx 0-1 /sys/devices/system/node/has_memory
  check plan-auto $B plan auto --bpf memory.numa_stat
  check compare $B compare 60
  ;;
fallback)
  # 6.1 and 6.12 have none of the memcg kfuncs: the reason names them.
  lacking="bpf_get_mem_cgroup, bpf_put_mem_cgroup, bpf_mem_cgroup_page_state,\
 bpf_mem_cgroup_vm_events"
  check plan-auto $B plan auto --bpf memory.current \
    --read "memory.stat=missing_kfunc:$lacking"
  # Forced bpf serves what it can and reads the rest, with the reason.
  check plan-bpf $B plan bpf --bpf memory.current \
    --read "memory.stat=missing_kfunc:$lacking"
  # What BPF does serve here must equal the text.
  check compare $B compare 60
  ;;
parity)
  # The plants prove the checker catches errors, and the run without the
  # clock exercises user space's choice: kernel-independent, so on
  # debian-7.3 only ("parity values" elsewhere).
  if [ "${2:-}" = values ]; then
    check parity $B parity 12 --top 5
  else
    check parity $B parity 12 --top 5 --plant swap --plant freeze --plant stale
    # Pressure as on a kernel without the scheduler's symbols in kallsyms:
    # from records where the files need no clock, the rest as text.
    check parity-without-psi-clock env BSTATS_PSI_CLOCK=off $B parity 8
  fi
  ;;
psi)
  check psi-idle $B psi-idle --pressure 12 --idle 40
  check psi-totals $B psi-totals 1500
  ;;
*)
  echo "unknown stage $1"; fail=1
  ;;
esac
exit $fail
