#!/usr/bin/env bash
# exitstats in real kernels: a process that starts and exits between two
# samples shows up in `below dump process` (7.3: also not with
# --disable-exitstats); unprivileged, record works and says why exitstats
# is off. 6.1: the same program loads (BTF tracepoint, ring buffer).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
echo "[exitstats] building below (release) and the burner" >&2
cargo build --release --locked -q -p bstats-below
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -static -O2 -Wall -o "$tmp/burn" tests/exitstats/burn.c
for run in debian-7.3:full debian-6.1:basic; do
  tests/vm/run.sh --kernel "${run%:*}" --timeout 500 --add target/release/below:/below \
    --add "$tmp/burn:/burn-short" --add "$tmp/burn:/burn-long" \
    --add /usr/bin/setpriv:/usr/bin/setpriv \
    --add tests/exitstats/guest.sh:/guest.sh -- sh /guest.sh "${run#*:}"
done
