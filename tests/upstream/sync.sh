#!/usr/bin/env bash
# Usage: tests/upstream/sync.sh --check
#        tests/upstream/sync.sh --copy TREE
#        tests/upstream/sync.sh --refresh
# The series carries below/collector's BPF program, its contract and its
# decoding verbatim (shared_files in lib.sh; Rust with `cgroupfs::` read as
# `crate::` and formatted with upstream's rustfmt.toml, the one rewrite).
# --check applies the series to the pinned tree and fails when one of those
# files differs from this repo's, or the series' Rust is not formatted in
# upstream's style. --copy writes them into TREE (a git checkout of below
# main with the series applied as commits): commit them there with `git
# commit --fixup`, rebase with --autosquash and `git format-patch` into
# patches/below/reader. --refresh does all of that in a scratch tree: each
# changed file is folded into the last patch of the series that touches it
# (so no later patch conflicts), the reader series (patches/below/reader,
# numbered on its own on top of the build fixes) is written anew, and both
# cover letters get git's shortlog and diffstat (the build fixes and the
# cover letters' own text are left as they are).
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
    [ $bad -eq 0 ] || die "patches/below is out of sync with below/collector (refresh it: $0 --copy TREE)"
    # The Rust the series touches, in upstream's style.
    while read -r f; do
      # shellcheck disable=SC2094 # rustfmt and diff both only read it
      upstream_rustfmt "$tree" <"$tree/$f" \
        | diff -u --label "rustfmt: $f" --label "series: $f" - "$tree/$f" >&2 || bad=1
    done < <(git -C "$tree" diff --name-only --diff-filter=d pristine HEAD -- '*.rs')
    [ $bad -eq 0 ] || die "the series' Rust is not formatted with upstream's rustfmt.toml"
    log "the series carries below/collector's files unchanged ($(shared_files | wc -l) files)"
    ;;
  --copy)
    tree=${2:?--copy needs the tree}
    while read -r ours theirs; do
      mkdir -p "$(dirname "$tree/$theirs")"
      shared_file "$ours" "$tree" >"$tree/$theirs"
    done < <(shared_files)
    git -C "$tree" status --short
    ;;
  --refresh)
    upstream_available || die "no below main tarball"
    tree=$(mktemp -d)
    trap 'rm -rf "$tree"' EXIT
    tar -xzf "$UPSTREAM_TARBALL" -C "$tree" --strip-components=1
    ugit -C "$tree" init -q -b main
    ugit -C "$tree" add -A
    ugit -C "$tree" commit -q -m pristine
    ugit -C "$tree" tag pristine
    while read -r p; do ugit -C "$tree" am -q "$p" >&2; done < <(series_patches patched)
    while read -r ours theirs; do
      # A new file goes with the one listed before it (its module needs
      # declaring by hand: that is the series' own code, not a shared file).
      tracked=$(ugit -C "$tree" ls-files -- "$theirs")
      [ -z "$tracked" ] || last=$(ugit -C "$tree" log -1 --format=%H -- "$theirs")
      shared_file "$ours" "$tree" >"$tree/$theirs"
      if [ -z "$tracked" ]; then
        ugit -C "$tree" add -- "$theirs"
      elif ugit -C "$tree" diff --quiet -- "$theirs"; then
        continue
      fi
      log "$theirs changed: folded into '$(ugit -C "$tree" log -1 --format=%s "$last")'"
      ugit -C "$tree" commit -q --fixup="$last" -- "$theirs"
    done < <(shared_files)
    # The series' own Rust in upstream's style too, each file's change
    # folded the same way.
    while read -r f; do
      # From stdin: rustfmt does not follow `mod` items to files below
      # main does not have (facebook.rs's).
      upstream_rustfmt "$tree" <"$tree/$f" >"$tree/$f.fmt" && mv "$tree/$f.fmt" "$tree/$f"
      ugit -C "$tree" diff --quiet -- "$f" && continue
      last=$(ugit -C "$tree" log -1 --format=%H -- "$f")
      log "$f reformatted: folded into '$(ugit -C "$tree" log -1 --format=%s "$last")'"
      ugit -C "$tree" commit -q --fixup="$last" -- "$f"
    done < <(ugit -C "$tree" diff --name-only --diff-filter=d pristine HEAD -- '*.rs')
    GIT_SEQUENCE_EDITOR=: ugit -C "$tree" rebase -q -i --autosquash pristine >&2
    # The reader series is numbered on its own, on top of the build fixes.
    out=$(mktemp -d "$tree/.out.XXXXXX")
    base=$(ugit -C "$tree" rev-list --reverse pristine..HEAD | sed -n "$(pr_patches "$BUILD_SERIES" | wc -l)p")
    ugit -C "$tree" format-patch -q -o "$out" "$base..HEAD"
    pr_patches "$READER_SERIES" | xargs -r rm -f
    cp "$out"/*.patch "$READER_SERIES/"
    # Each cover letter's shortlog and diffstat as git writes them for its
    # pull request (the text above them is written by hand). The shortlog
    # starts at its "AUTHOR (N):" line, whoever the author is (the
    # patches' "Below Dev" is a placeholder: patches/below/README.md), and
    # ends before the cover letter's "-- ".
    for pr in "$BUILD_SERIES pristine..$base" "$READER_SERIES $base..HEAD"; do
      read -r dir range <<<"$pr"
      cover=$dir/0000-cover-letter.patch
      { awk '/^[^ ].* \([0-9]+\):$/ { exit } { print }' "$cover"
        ugit -C "$tree" format-patch --cover-letter --stdout "$range" \
          | awk 'done { next } /^[^ ].* \([0-9]+\):$/ { on = 1 } on && /^-- $/ { done = 1 } on && !done'
        printf 'base-commit: %s\n-- \n2.39.5\n' "$UPSTREAM_COMMIT"
      } >"$tree/cover" && mv "$tree/cover" "$cover"
    done
    git -C "$REPO_ROOT" status --short -- "$BUILD_SERIES" "$READER_SERIES"
    ;;
  *) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
