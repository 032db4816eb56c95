#!/usr/bin/env bash
# exitstats in real kernels: a process that starts and exits between two
# samples shows up in `below dump process` (7.3: also not with
# --disable-exitstats); unprivileged, record works and says why exitstats
# is off. 6.1: the same program loads (BTF tracepoint, ring buffer).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

burner() { gcc -static -O2 -Wall -o "$tmp/burn" "$REPO_ROOT/tests/exitstats/burn.c"; }

# guest KERNEL MODE: boots KERNEL and runs guest.sh's MODE checks.
guest() {
  "$REPO_ROOT/tests/vm/run.sh" --kernel "$1" --timeout 500 --add "$BELOW_BIN:/below" \
    --add "$tmp/burn:/burn-short" --add "$tmp/burn:/burn-long" \
    --add /usr/bin/setpriv:/usr/bin/setpriv \
    --add "$REPO_ROOT/tests/exitstats/guest.sh:/guest.sh" -- sh /guest.sh "$2"
}

check "build" build_release
check "burner" burner
check "exitstats (debian-7.3)" guest debian-7.3 full
check "exitstats (debian-6.1)" guest debian-6.1 basic
tally_summary
