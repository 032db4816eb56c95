#!/usr/bin/env bash
# Usage: tests/reference/below09.sh
# Prints (last stdout line) the path of below 0.9.0 built from crates.io, the
# reference our drop-in is checked against (CLI parity, snapshots, the bill).
# Built once with `cargo install` and cached under
# ${BELOW_VM_CACHE:-$HOME/.cache/below-vm}/below-0.9.0; its build needs
# `clang` on PATH (Debian names it clang-19: a shim dir provides the name).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"

root="$CACHE/below-0.9.0"
bin="$root/bin/below"
if [ ! -x "$bin" ]; then
  command -v clang-19 >/dev/null || die "clang-19 missing (./x deps installs it)"
  mkdir -p "$root/shim"
  ln -sf "$(command -v clang-19)" "$root/shim/clang"
  log "building below 0.9.0 from crates.io (once; cached in $root)"
  exec 9>"$CACHE/.lock-below09"
  flock 9
  [ -x "$bin" ] || PATH="$root/shim:$PATH" cargo install --quiet --locked below --version 0.9.0 \
    --root "$root" --target-dir "$root/target" >&2 || die "cargo install below@0.9.0 failed"
  rm -rf "$root/target"
fi
printf '%s\n' "$bin"
