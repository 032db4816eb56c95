#!/usr/bin/env bash
# Usage: tests/upstream/binaries.sh [stock|patched|locked]
# Builds (incrementally, cached under ${BELOW_VM_CACHE:-$HOME/.cache/below-vm}/upstream)
# and prints below main from the pinned tarball in ../shared/upstream:
#   stock    pristine + the open-source build fixes (patches/below/build)
#            (below main does not build outside Meta without them)
#   patched  stock + the reader series (patches/below/reader)
#   locked   patched with the walk under RCU turned off: the cgroup
#            iterator, as kernels without that walk run it (measurements)
# With an argument: that binary's path (last stdout line). Without: one line
# per binary, "below-main-stock PATH" and "below-main-patched PATH".
# Config keys for recorders (upstream has no --store-dir): store_dir,
# log_dir, enable_cgroup_bpf = true (see tests/upstream/guest.sh).
# Exits 3 when the tarball is absent (BELOW_UPSTREAM_TARBALL points elsewhere).
set -euo pipefail
# shellcheck source=tests/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
upstream_available || { log "no below main tarball (../shared/upstream next to the repo; BELOW_UPSTREAM_TARBALL overrides)"; exit 3; }
case "${1:-}" in
  stock|patched) upstream_binary "$1" ;;
  locked) locked_binary ;;
  "") for v in stock patched; do printf 'below-main-%s %s\n' "$v" "$(upstream_binary $v)"; done ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
