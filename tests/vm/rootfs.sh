#!/usr/bin/env bash
# Usage: tests/vm/rootfs.sh
# Prints (last stdout line) the path of a cached ext4 image of a Debian
# trixie root filesystem that boots systemd (run.sh --root IMAGE): debootstrap
# --variant=minbase from the Debian archive plus systemd-sysv, udev, what
# bstats-below's .deb depends on beyond minbase (libelf1t64) and jq (the
# suites assert on JSON). Built once per recipe: the image lives under
# $CACHE/rootfs/<suite>-<key>/, key = sha256 of the suite, the packages, the
# headroom and the customize function; the downloaded .debs are kept in
# $CACHE/rootfs/debs for rebuilds. The image is never written by a run
# (run.sh attaches it with snapshot=on).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUITE=trixie
MIRROR=http://deb.debian.org/debian
INCLUDE=systemd-sysv,udev,libelf1t64,jq
# Free space in the image: the .deb, the store of a few minutes, the journal.
HEADROOM_MB=512

# customize DIR: what the test guest needs beyond debootstrap's result.
customize() {
  local d=$1
  echo below-vm >"$d/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 below-vm\n' >"$d/etc/hosts"
  # A machine id up front: no first-boot setup (systemd-firstboot would ask
  # on the console and wait).
  echo 6265c0f7e5ac4b1f9a1b5c0d0e5e7a11 >"$d/etc/machine-id"
  # Nothing that starts on its own during a test: apt's timers (no network),
  # periodic scrubs and trims.
  local u
  for u in systemd-firstboot.service apt-daily.timer apt-daily-upgrade.timer \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
    ln -sf /dev/null "$d/etc/systemd/system/$u"
  done
  # Space: downloaded packages, lists, docs and translations.
  rm -rf "$d"/var/cache/apt/archives/*.deb "$d"/var/lib/apt/lists/* \
    "$d"/usr/share/doc/* "$d"/usr/share/man/* "$d"/usr/share/info/* "$d"/usr/share/locale/*
}

key=$({ echo "suite $SUITE include $INCLUDE headroom $HEADROOM_MB"; declare -f customize; } |
  sha256sum | cut -c1-16)
dest=$CACHE/rootfs/$SUITE-$key
img=$dest/root.img

exec 9>"$CACHE/.lock-rootfs-$SUITE"
flock 9
if [ -f "$img" ]; then
  printf '%s\n' "$img"; exit 0
fi

install_pkgs debootstrap e2fsprogs debian-archive-keyring
t0=$SECONDS
log "building the $SUITE root filesystem (key $key; debootstrap log: $dest.log)"
mkdir -p "$CACHE/rootfs/debs"
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp/root"
if ! debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$CACHE/rootfs/debs" \
  --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
  "$SUITE" "$dest.tmp/root" "$MIRROR" >"$dest.log" 2>&1; then
  log "debootstrap failed; last 30 lines of $dest.log:"
  tail -n 30 "$dest.log" | sed 's/^/[vm]   | /' >&2
  rm -rf "$dest.tmp"
  exit 1
fi
customize "$dest.tmp/root"

used_mb=$(du -sm "$dest.tmp/root" | cut -f1)
size_mb=$((used_mb + HEADROOM_MB))
# mkfs.ext4 -d fills the file system from the directory: no loop mount.
truncate -s "${size_mb}M" "$dest.tmp/root.img"
mkfs.ext4 -q -F -L below-root -d "$dest.tmp/root" "$dest.tmp/root.img" >&2
rm -rf "$dest.tmp/root"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
# keep the newest 2 images of the suite
# shellcheck disable=SC2012 # our own directory names
ls -1dt "$CACHE/rootfs/$SUITE"-*/ | tail -n +3 | while IFS= read -r old; do rm -rf "$old" "${old%/}.log"; done
log "root filesystem ready in $((SECONDS - t0))s: $img (${size_mb} MiB, $(du -sm "$img" | cut -f1) MiB allocated, ${used_mb} MiB of files)"
printf '%s\n' "$img"
