#!/usr/bin/env bash
# Usage: tests/bpf/run-vm-tests.sh [STAGE[:KERNEL]]...
#   (default: host full compare:debian-7.2 fallback:debian-6.12 fallback:debian-6.1)
# Runs the acceptance driver bstats-check (below/testkit) in QEMU guests
# through tests/vm/run.sh (KERNEL: a tests/vm/kernel.sh name):
#   full      (debian-7.3) bpf plan, frozen-tree bpf==read compare,
#             mkdir/rmdir churn, constant syscalls per sample, CPU bench
#   compare   (debian-7.2) memory.stat, cpu.stat, pressure served by BPF;
#             frozen-tree bpf==read compare
#   fallback  (debian-6.1) no memcg kfuncs: per-file fallback with the
#             reason, auto and forced bpf; frozen-tree compare of the rest
#   host      the same fallback check on this host (cargo test, needs root)
# Fails (non-zero) when any check fails. Logs: tests/vm's cache logs dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(host full compare:debian-7.2 fallback:debian-6.12 fallback:debian-6.1)

host() {
  (cd "$REPO_ROOT" && cargo test -q --locked -p bpf_stats --test host_fallback -- --nocapture)
}

# guest KERNEL STAGE
guest() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 1500 \
    --add "$CHECK_BIN:/bstats-check" --add "$REPO_ROOT/tests/bpf/guest-checks.sh:/guest-checks.sh" \
    -- sh /guest-checks.sh "$2"
}

# The kernel of STAGE[:KERNEL].
kernel_of() {
  case "$1" in
    *:*) echo "${1#*:}" ;;
    full) echo debian-7.3 ;;
    compare) echo debian-7.2 ;;
    fallback) echo debian-6.1 ;;
  esac
}

for s in "${stages[@]}"; do
  case "${s%%:*}" in
    host|full|compare|fallback) ;;
    *) die "unknown stage $s" ;;
  esac
done
check "build" build_release
for s in "${stages[@]}"; do
  case "$s" in
    host) check "host: fallback" host ;;
    *) check "${s%%:*}: $(kernel_of "$s")" guest "$(kernel_of "$s")" "${s%%:*}" ;;
  esac
done
tally_summary
