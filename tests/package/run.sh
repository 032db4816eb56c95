#!/usr/bin/env bash
# Usage: tests/package/run.sh
# The Debian package (packaging/build-deb.sh; dev profile, to reuse the
# test build): builds it, lists and checks its contents, runs
# `systemd-analyze verify` on its unit, then runs the unit's ExecStart line
# as systemd would (the unit's capability bounding set, no new privileges,
# LOGS_DIRECTORY) for a few samples — in a private mount namespace where the
# package lies over /usr and /etc and /var/log is a tmpfs, so the host is
# untouched — and dumps them. Needs root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$REPO_ROOT"


install_pkgs dpkg-dev man-db binutils systemd util-linux

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deb=$(packaging/build-deb.sh --profile dev --out "$work" | tail -n 1)
log "built $deb"

dpkg-deb --contents "$deb" | awk '{ print $NF }' >"$work/contents"
for f in ./usr/bin/below \
  ./usr/share/man/man1/below.1.gz ./usr/share/man/man1/below-record.1.gz \
  ./usr/share/man/man1/below-snapshot.1.gz ./usr/share/man/man1/below-dump.1.gz \
  ./usr/share/bash-completion/completions/below ./usr/share/zsh/vendor-completions/_below \
  ./usr/share/fish/vendor_completions.d/below.fish \
  ./etc/below/below.conf ./lib/systemd/system/below.service \
  ./usr/share/doc/bstats-below/copyright; do
  grep -qxF "$f" "$work/contents" || die "the package lacks $f"
done
[ "$(dpkg-deb -f "$deb" Package)" = bstats-below ] || die "package name"
dpkg-deb -f "$deb" Depends | grep -q 'libelf1' || die "Depends lacks libelf1: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -f "$deb" Provides | grep -qx below || die "does not provide below"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qxF /etc/below/below.conf ||
  die "below.conf is not a conffile"
dpkg-deb --ctrl-tarfile "$deb" | tar -tv ./postinst | grep -q '^-rwx' || die "no executable postinst"
log "contents: $(wc -l <"$work/contents") entries, all expected files present"

root=$work/root
dpkg-deb -x "$deb" "$root"
bash -n "$root/usr/share/bash-completion/completions/below" || die "bash completions do not parse"
grep -q snapshot "$root/usr/share/bash-completion/completions/below" || die "completions lack snapshot"
man -l "$root/usr/share/man/man1/below-record.1.gz" 2>/dev/null | grep -q -- --skew-detection-threshold-ms ||
  die "below-record(1) lacks --skew-detection-threshold-ms"
grep -v '^\s*\(#\|$\)' "$root/etc/below/below.conf" && die "below.conf sets something: defaults stay commented"
"$root/usr/bin/below" --config "$root/etc/below/below.conf" backends --now >/dev/null ||
  die "the shipped below.conf does not load"

unit=$root/lib/systemd/system/below.service
grep -qx 'Restart=on-failure' "$unit" || die "unit: no Restart=on-failure"
grep -qx 'LogsDirectory=below' "$unit" || die "unit: store not under /var/log/below"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
# CAP_BPF CAP_PERFMON … → -all,+bpf,+perfmon,… for setpriv
caps=-all
read -ra unit_caps <<<"$(sed -n 's/^CapabilityBoundingSet=//p' "$unit")"
for c in "${unit_caps[@]}"; do
  caps+=",+$(tr '[:upper:]' '[:lower:]' <<<"${c#CAP_}")"
done
[ "$caps" != -all ] || die "unit: no CapabilityBoundingSet"
log "ExecStart=$exec_start; capabilities $caps"

# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m --propagation private bash -s "$root" "$exec_start" "$caps" "$work" <<'EOF'
set -euo pipefail
root=$1 exec_start=$2 caps=$3 work=$4
fail() { printf '[package] FAIL: %s\n' "$*" >&2; exit 1; }
mount -t overlay overlay -o lowerdir="$root/usr:/usr" /usr
mount -t overlay overlay -o lowerdir="$root/etc:/etc" /etc
mount -t tmpfs tmpfs /var/log

systemd-analyze verify "$root/lib/systemd/system/below.service" 2>"$work/verify" ||
  die "systemd-analyze verify: $(cat "$work/verify")"
[ ! -s "$work/verify" ] || die "systemd-analyze verify warns: $(cat "$work/verify")"
printf '[package] systemd-analyze verify: clean\n' >&2

# Another user's process: its I/O and executable need the unit's
# capabilities (SYS_PTRACE, DAC_READ_SEARCH).
setpriv --reuid 65534 --regid 65534 --clear-groups sleep 120 &
other=$!
mkdir -m 0755 /var/log/below # LogsDirectory=below
begin=$(date +%s)
rc=0
# shellcheck disable=SC2086 # the unit's command line is words
LOGS_DIRECTORY=/var/log/below timeout -s TERM 17 \
  setpriv --no-new-privs --bounding-set "$caps" $exec_start 2>"$work/record.log" || rc=$?
# timeout's 124: it sent SIGTERM (below exits cleanly on it).
[ "$rc" = 124 ] || die "ExecStart exited with $rc: $(cat "$work/record.log")"
[ -d /var/log/below/store ] || die "no store in /var/log/below/store"
# Private under this shell's umask too (the unit adds UMask=0077).
open=$(find /var/log/below/store \( -type d ! -perm 0700 \) -o \( -type f ! -perm 0600 \))
[ -z "$open" ] || fail "store files more open than 0700/0600: $open"
n=$(below dump system -b "$begin" -f timestamp -O csv | grep -c '^[0-9]') || true
[ "$n" -ge 3 ] || die "$n samples recorded: $(cat "$work/record.log")"
row=$(below dump process -b "$begin" -f pid io.rbytes_per_sec exe_path -O csv | grep "^$other," | tail -n 1)
kill "$other"
case $row in
  *'?'* | '') die "another user's process lacks I/O or exe ($row): capabilities too few?" ;;
esac
grep -q 'data collection took\|ERRO' "$work/record.log" && printf '[package] record log:\n%s\n' "$(cat "$work/record.log")" >&2
printf '[package] ExecStart ran: %s samples in /var/log/below/store; other user'"'"'s process: %s\n' "$n" "$row" >&2
EOF
log "ok"
