#!/usr/bin/env bash
# Usage: tests/bpf/run-vm-tests.sh [full|fallback|host|psi|psi-stream]...
#        (default: host full fallback psi)
# Runs the acceptance driver bstats-check (below/testkit) in QEMU guests
# through tests/vm/run.sh:
#   full      Debian 7.3 guest: bpf plan, frozen-tree bpf==read compare,
#             mkdir/rmdir churn, constant syscalls per sample, CPU bench
#   fallback  Debian 6.1 guest (no memcg kfuncs): per-file fallback + forced bpf error
#   psi       Debian 7.3 guest: a cgroup under memory pressure 12 s, then idle
#             40 s; sampled pressure == the file read right after (issue #19)
#   psi-stream  the same on our patched 7.3 (tests/vm/kernel.sh patched: the
#             stream kernel, where auto still gives pressure to BPF)
#   host      the same fallback check on this host (cargo test, needs root)
# Fails (non-zero) when any check fails. Logs: tests/vm's cache logs dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(host full fallback psi)

host() {
  (cd "$REPO_ROOT" && cargo test -q --locked -p bpf_stats --test host_fallback -- --nocapture)
}

# guest KERNEL STAGE
guest() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 1500 \
    --add "$CHECK_BIN:/bstats-check" --add "$REPO_ROOT/tests/bpf/guest-checks.sh:/guest-checks.sh" \
    -- sh /guest-checks.sh "$2"
}

for s in "${stages[@]}"; do
  case "$s" in
    host|full|fallback|psi|psi-stream) ;;
    *) die "unknown stage $s" ;;
  esac
done
check "build" build_release
for s in "${stages[@]}"; do
  case "$s" in
    host) check "host: fallback" host ;;
    full) check "full: debian-7.3" guest debian-7.3 full ;;
    fallback) check "fallback: debian-6.1" guest debian-6.1 fallback ;;
    psi) check "psi: debian-7.3" guest debian-7.3 psi ;;
    psi-stream) check "psi: patched" guest patched psi ;;
  esac
done
tally_summary
