#!/usr/bin/env bash
# Usage: tests/e2e/no-spawn.sh
# `below record` spawns no process per sample. below 0.9's collector asks
# os_info for the OS release every sample, which runs `lsb_release -a`
# (a shell script spawning getopt, cut, tr… on Debian) and `getconf
# LONG_BIT`: ~7 processes a sample, charged to below.service. With both on
# PATH (lsb-release installed, as on most Debian/Ubuntu hosts), strace
# counts the recorder's execve calls over 2 and over 6 samples: the count
# must not grow with the samples. Needs root (below reads every cgroup).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
LOG_TAG=no-spawn

[ "$(id -u)" = 0 ] || { echo "skipped: needs root"; exit 0; }
install_pkgs strace lsb-release
for c in lsb_release getconf; do
  command -v $c >/dev/null || die "$c must be on PATH for this check to mean anything"
done
build_release

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# execs SAMPLES: prints how many processes `record` ran for that many samples.
execs() {
  local n=$1 trace="$work/trace-$1"
  strace -f -qq -z -e trace=execve -e signal=none -o "$trace" \
    "$BELOW_BIN" --store-dir "$work/store-$n" record -i 1 --count "$n" --disable-exitstats \
    >"$work/record-$n.log" 2>&1 || { cat "$work/record-$n.log" >&2; die "record --count $n failed"; }
  # Successful execs only (-z); the first is below itself.
  local total
  total=$(grep -c 'execve(' "$trace" || true)
  echo $((total - 1))
  log "over $n samples record ran: $(grep -o 'execve("[^"]*"' "$trace" | tail -n +2 | sed 's/.*\///; s/"$//' | tr '\n' ' ')"
}

two=$(execs 2)
six=$(execs 6)
log "processes run by record: $two over 2 samples, $six over 6"
[ "$six" -le "$two" ] || die "record runs processes per sample ($two over 2 samples, $six over 6)"
echo "no-spawn: ok ($two processes at start, none per sample)"
