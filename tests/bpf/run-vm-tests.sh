#!/usr/bin/env bash
# Usage: tests/bpf/run-vm-tests.sh [STAGE[:KERNEL]]...
#   (default: full facts compare:debian-7.2 numa fallback:debian-6.12 fallback:debian-6.1
#    parity parity:debian-6.1 psi parity:patched: the patched kernel last,
#    as tests/prebuild.sh builds it meanwhile;
#    `./x test --full` adds parity:debian-7.2 parity:debian-6.12 psi:patched)
# Runs the acceptance driver bstats-check (below/testkit) in QEMU guests
# through tests/vm/run.sh (KERNEL: a tests/vm/kernel.sh name):
#   full      (debian-7.3) bpf plan, frozen-tree bpf==read compare,
#             mkdir/rmdir churn, constant syscalls per sample, CPU bench
#   compare   (debian-7.2) memory.stat, cpu.stat, pressure served by BPF;
#             frozen-tree bpf==read compare
#   numa      (debian-7.3, two NUMA nodes) memory.numa_stat served by BPF
#             for both nodes; frozen-tree bpf==read compare
#   fallback  (debian-6.1) no memcg kfuncs: per-file fallback with the
#             reason, auto and forced bpf; frozen-tree compare of the rest
#   facts     (debian-7.3) the collector's unit tests that load the program with
#             each kernel fact taken out of a copy of the kernel's BTF, and
#             the numa_stat layout ones, on a kernel with the memcg kfuncs;
#             and that the pass under RCU ends while cgroup_mutex is held
#   parity    (debian-7.3, with a scratch disk) live parity: cgroups changing
#             while sampled, every value BPF serves between the text read
#             before and after, without and with top-N; planted errors must
#             be caught (on debian-7.3; other kernels check the values
#             only); parity:patched is the same on our stream kernel,
#             built without THP and zswap (memory.stat without their keys)
#   psi       (debian-7.3) a cgroup under memory pressure 12 s, then idle
#             40 s; sampled pressure == the file read right after; totals
#             of cgroups whose tasks contend and move between the reads
#             around each sample; psi:patched
#             is the same on our stream kernel, where auto gives pressure to BPF
#   host      the same fallback check on this host (cargo test, needs root;
#             not by default: `cargo test --workspace` runs it)
# Fails (non-zero) when any check fails. Logs: tests/vm's cache logs dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(full facts compare:debian-7.2 numa fallback:debian-6.12 fallback:debian-6.1
  parity parity:debian-6.1 psi parity:patched)

host() {
  (cd "$REPO_ROOT" && cargo test -q --locked -p bstats-collector --test host_fallback -- --nocapture)
}

# guest KERNEL STAGE
guest() {
  local extra=() args=("$2")
  # parity: io.pressure (and io.stat) move with IO on a scratch disk; the
  # checker's own checks (planted errors, no clock) on debian-7.3 only.
  [ "$2" != parity ] || extra=(--disk 64M)
  [ "$2" != parity ] || [ "$1" = debian-7.3 ] || args+=(values)
  [ "$2" != numa ] || extra=(--numa)
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 1500 "${extra[@]}" \
    --add "$CHECK_BIN:/bstats-check" --add "$REPO_ROOT/tests/bpf/guest-checks.sh:/guest-checks.sh" \
    -- sh /guest-checks.sh "${args[@]}"
}

# facts KERNEL: the unit test binary (built here) in a guest.
facts() {
  local bin
  bin=$(collector_test_binary) || return 1
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 1500 --add "$bin:/bpf-stats-test" \
    -- /bpf-stats-test --test-threads 1 bpf::facts_test bpf::kernel bpf::walk_test names_test files_test
}

# The kernel of STAGE[:KERNEL].
kernel_of() {
  case "$1" in
    *:*) echo "${1#*:}" ;;
    full|facts|numa|parity|psi) echo debian-7.3 ;;
    compare) echo debian-7.2 ;;
    fallback) echo debian-6.1 ;;
  esac
}

for s in "${stages[@]}"; do
  case "${s%%:*}" in
    host|full|facts|compare|numa|fallback|parity|psi) ;;
    *) die "unknown stage $s" ;;
  esac
done
check "build" build_release
for s in "${stages[@]}"; do
  case "$s" in
    host) check "host: fallback" host ;;
    facts*) check "facts: $(kernel_of "$s")" facts "$(kernel_of "$s")" ;;
    *) check "${s%%:*}: $(kernel_of "$s")" guest "$(kernel_of "$s")" "${s%%:*}" ;;
  esac
done
tally_summary
