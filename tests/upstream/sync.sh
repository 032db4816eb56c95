#!/usr/bin/env bash
# Usage: tests/upstream/sync.sh --check
#        tests/upstream/sync.sh --copy TREE
# The series carries below/bpf_stats's BPF program, its contract and its
# decoding verbatim (shared_files in lib.sh; Rust with `cgroupfs::` read as
# `crate::` and formatted with upstream's rustfmt.toml, the one rewrite).
# --check applies the series to the pinned tree and fails when one of those
# files differs from this repo's or the series' Rust is not formatted in
# upstream's style. --copy writes them into TREE (a git checkout of below
# main with the series applied as commits): commit them there with `git
# commit --fixup`, rebase with --autosquash and `git format-patch` into
# patches/below.
set -euo pipefail
# shellcheck source=tests/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  --check)
    if ! upstream_available; then
      log "SKIP: no below main tarball (BELOW_UPSTREAM_TARBALL points elsewhere)"
      exit 0
    fi
    tree=$(upstream_tree patched)
    bad=0
    while read -r ours theirs; do
      if ! shared_file "$ours" "$tree" | diff -u --label "ours: $ours" --label "series: $theirs" - "$tree/$theirs" >&2; then
        bad=1
      fi
    done < <(shared_files)
    [ $bad -eq 0 ] || die "patches/below is out of sync with below/bpf_stats (refresh it: $0 --copy TREE)"
    # The Rust the series touches, in upstream's style.
    while read -r f; do
      # shellcheck disable=SC2094 # rustfmt and diff both only read it
      rustfmt --config-path "$tree/rustfmt.toml" <"$tree/$f" 2>/dev/null \
        | diff -u --label "rustfmt: $f" --label "series: $f" - "$tree/$f" >&2 || bad=1
    done < <(git -C "$tree" diff --name-only --diff-filter=d pristine HEAD -- '*.rs')
    [ $bad -eq 0 ] || die "the series' Rust is not formatted with upstream's rustfmt.toml"
    log "the series carries below/bpf_stats's files unchanged ($(shared_files | wc -l) files)"
    ;;
  --copy)
    tree=${2:?--copy needs the tree}
    while read -r ours theirs; do
      mkdir -p "$(dirname "$tree/$theirs")"
      shared_file "$ours" "$tree" >"$tree/$theirs"
    done < <(shared_files)
    git -C "$tree" status --short
    ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
