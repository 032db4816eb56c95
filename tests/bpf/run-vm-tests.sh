#!/usr/bin/env bash
# Usage: tests/bpf/run-vm-tests.sh [full|fallback|host]...   (default: all three)
# Builds the BPF acceptance program (below/bpf_stats/examples/bpf_check.rs)
# and runs it in QEMU guests through tests/vm/run.sh:
#   full      Debian 7.3 guest: bpf plan, frozen-tree bpf==read compare,
#             mkdir/rmdir churn, constant syscalls per sample, CPU bench
#   fallback  Debian 6.1 guest (no memcg kfuncs): per-file fallback + forced bpf error
#   host      the same fallback check on this host (cargo test, needs root)
# Fails (non-zero) when any check fails. Logs: tests/vm's cache logs dir.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(host full fallback)

cd "$REPO"
echo "[bpf-tests] building bpf_check (release)"
cargo build --release -q -p bpf_stats --example bpf_check
BIN="$REPO/target/release/examples/bpf_check"

rc=0
for s in "${stages[@]}"; do
  case "$s" in
    host)
      echo "[bpf-tests] host: cargo test --test host_fallback"
      cargo test -q -p bpf_stats --test host_fallback -- --nocapture || rc=1
      ;;
    full|fallback)
      kernel=debian-7.3; [ "$s" = fallback ] && kernel=debian-6.1
      echo "[bpf-tests] $s: booting $kernel"
      if ! "$REPO/tests/vm/run.sh" --kernel "$kernel" --timeout 1500 \
          --add "$BIN:/bpf_check" --add "$HERE/guest-checks.sh:/guest-checks.sh" \
          -- sh /guest-checks.sh "$s"; then
        echo "[bpf-tests] $s: FAILED"; rc=1
      fi
      ;;
    *) echo "unknown stage $s" >&2; exit 2 ;;
  esac
done
[ $rc = 0 ] && echo "[bpf-tests] all passed" || echo "[bpf-tests] FAILED"
exit $rc
