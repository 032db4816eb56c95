#!/usr/bin/env bash
# Usage: tests/procs/run.sh [STAGE[:KERNEL]]...
#   (default: host frozen frozen:debian-6.1 parity parity:host)
# The BPF process backend (below/procs) against fb_procfs, below 0.9's
# reader, through the acceptance driver bstats-check:
#   host    this machine's kernel (cargo test, needs root): SIGSTOPped
#           processes (threads, long and odd command lines, child cgroups,
#           IO, memory, a zombie leader, setproctitle, a zombie) equal
#           field for field
#   frozen  the same in a guest (default debian-7.3; frozen:debian-6.1 is
#           the old kernel: before 6.2 the rss counters were atomics)
#   parity  (debian-7.3; parity:host on this machine, as root) running
#           processes sampled by BPF lie between fb_procfs's reads before
#           and after
# Fails (non-zero) when any check fails. Logs: tests/vm's cache logs dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(host frozen frozen:debian-6.1 parity parity:host)

host() {
  (cd "$REPO_ROOT" && cargo test -q --locked -p bstats-testkit --test procs -- --nocapture)
}

# guest KERNEL CHECK… (KERNEL host: this machine)
guest() {
  local kernel=$1
  shift
  if [ "$kernel" = host ]; then "$CHECK_BIN" "$@"; return; fi
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$kernel" --timeout 900 \
    --add "$CHECK_BIN:/bstats-check" -- /bstats-check "$@"
}

for s in "${stages[@]}"; do
  case "${s%%:*}" in
    host|frozen|parity) ;;
    *) die "unknown stage $s" ;;
  esac
done
check "build" build_release
for s in "${stages[@]}"; do
  kernel=debian-7.3
  [ "$s" = "${s#*:}" ] || kernel=${s#*:}
  case "${s%%:*}" in
    host) check "host: frozen" host ;;
    frozen) check "frozen: $kernel" guest "$kernel" procs-frozen ;;
    parity) check "parity: $kernel" guest "$kernel" procs-parity 12 ;;
  esac
done
tally_summary
