#!/usr/bin/env bash
# Usage: tests/systemd/run.sh [-- EXTRA_COMMAND [ARGS...]]
# A systemd host: Debian trixie (tests/vm/rootfs.sh, cached) booted by
# systemd on the Debian 7.3 kernel (tests/vm/run.sh --root). In it,
# guest.sh installs our .deb (packaging/build-deb.sh --profile release) with
# apt and checks below.service: the BPF plan in the store and the journal,
# system.slice services in `below dump cgroup`, a private store (0700/0600),
# the unit's `systemd-analyze security` exposure (at most 3.0), a clean
# `systemctl stop`, the restart after `systemctl kill -s KILL`, a dump
# across the gap.
# EXTRA_COMMAND, if given, runs in the guest afterwards (below.service still
# recording) with bstats-check in /usr/local/bin, e.g.
# `tests/systemd/run.sh -- bstats-check parity`. One tally line per guest
# check; the guest's /out (journal, dumps) is kept in the cache's logs dir.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"

extra=()
if [ "${1:-}" = -- ]; then
  shift; extra=("$@")
elif [ $# -gt 0 ]; then
  die "usage: $0 [-- EXTRA_COMMAND [ARGS...]]"
fi
if [ "$(id -u)" != 0 ]; then log "skipped: needs root (debootstrap, packages)"; exit 0; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$CACHE/logs/systemd-$(date +%Y%m%d-%H%M%S)-$$
# keep the newest 10 of them
find "$CACHE/logs" -maxdepth 1 -name 'systemd-*' -printf '%T@ %p\n' | sort -rn | tail -n +10 |
  cut -d' ' -f2- | while IFS= read -r d; do rm -rf "$d"; done
deb='' img=''

package() { deb=$("$REPO_ROOT/packaging/build-deb.sh" --profile release --out "$work" | tail -n 1); }
image() { img=$("$REPO_ROOT/tests/vm/rootfs.sh" | tail -n 1); }

guest() {
  local args=(--add "$deb:/below-systemd/$(basename "$deb")"
    --add "$REPO_ROOT/tests/systemd/guest.sh:/below-systemd/guest.sh")
  local cmd=(sh /below-systemd/guest.sh "/below-systemd/$(basename "$deb")")
  if [ ${#extra[@]} -gt 0 ]; then
    printf '%q ' "${extra[@]}" >"$work/extra.sh"
    args+=(--add "$CHECK_BIN:/usr/local/bin/bstats-check" --add "$work/extra.sh:/below-systemd/extra.sh")
    cmd+=(/below-systemd/extra.sh)
  fi
  # The guest's exit code is its number of failed checks: tallied below.
  local rc=0
  "$REPO_ROOT/tests/vm/run.sh" --kernel debian-7.3 --root "$img" --timeout 900 \
    "${args[@]}" --out "$out" -- "${cmd[@]}" || rc=$?
  [ "$rc" != 125 ] && [ -s "$out/results.tsv" ]
}

# guest_result STATUS DETAIL: one of the guest's checks.
guest_result() { log "$2"; [ "$1" = PASS ]; }

check "build the .deb (release)" package
if [ ${#extra[@]} -gt 0 ]; then check "build bstats-check" build_release; fi
check "trixie root filesystem (cached)" image
if [ -n "$deb" ] && [ -n "$img" ]; then
  check "boot the systemd guest (debian-7.3) and run guest.sh" guest
  if [ -f "$out/results.tsv" ]; then
    while IFS=$'\t' read -r st name detail; do
      check "guest: $name" guest_result "$st" "$detail"
    done <"$out/results.tsv"
  fi
  log "guest's /out: $out"
  if [ "$FAILED" -gt 0 ] && [ -f "$out/below.journal" ]; then
    log "below's journal (last 40 lines):"
    tail -n 40 "$out/below.journal" | sed 's/^/[systemd]   | /' >&2
  fi
fi
tally_summary
