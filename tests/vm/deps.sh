#!/usr/bin/env bash
# Usage: tests/vm/deps.sh [--build] [--quiet]
# Installs (only when missing) the host packages the VM rig needs:
#   always:   qemu-system-x86 busybox-static cpio xz-utils zstd bpftool
#   --build:  what building our own kernel needs (kernel.sh patched)
# `apt-get update` runs only when something is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# (braces: bash parses the whole body first, so editing this file while it runs is safe)
{

pkgs=(qemu-system-x86 busybox-static cpio xz-utils zstd bpftool debian-archive-keyring)
quiet=0
for a in "$@"; do
  case "$a" in
    --build) pkgs+=(build-essential patch flex bison bc libelf-dev libssl-dev dwarves python3) ;;
    --quiet) quiet=1 ;;
    *) die "usage: $0 [--build] [--quiet]" ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  [ $quiet = 1 ] || log "deps: all present (${pkgs[*]})"
  exit 0
fi
log "deps: installing ${missing[*]}"
SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
exit $?
}
