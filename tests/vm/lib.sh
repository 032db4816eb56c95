# shellcheck shell=bash
# shellcheck disable=SC2034 # variables for the scripts that source it
# The VM rig's helpers (kernel debs, private apt suites) on top of
# tests/lib.sh. Source it; do not run it.

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
VM_DIR=$REPO_ROOT/tests/vm
CACHE=${BELOW_VM_CACHE:-$HOME/.cache/below-vm}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# apt with a private sources list and private state dirs for one suite.
# Never touches the system's sources.
#   apt_suite SUITE apt-get|apt-cache ARGS...
apt_suite() {
  local suite=$1 tool=$2; shift 2
  local d="$CACHE/apt/$suite"
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  if [ ! -f "$d/$suite.sources" ]; then
    cat >"$d/$suite.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  # One apt per suite at a time (tests/prebuild.sh fetches beside a suite).
  flock "$d/.lock" "$tool" -q -o Dir::Etc::sourcelist="$d/$suite.sources" -o Dir::Etc::sourceparts=/dev/null \
    -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
    -o Dir::State::status=/dev/null -o APT::Sandbox::User=root \
    -o APT::Architecture=amd64 -o APT::Architectures::=amd64 "$@"
}

# Update a suite's private lists if they are missing or older than a day.
apt_suite_update() {
  local suite=$1 d="$CACHE/apt/$1" stamp="$CACHE/apt/$1/updated"
  if [ -z "$(find "$stamp" -mmin -1440 2>/dev/null)" ]; then
    log "apt update ($suite, private lists)"
    apt_suite "$suite" apt-get update >&2 || die "apt-get update for $suite failed"
    touch "$stamp"
  fi
}

# Fetch a pinned .deb into $CACHE/debs (kept forever: old backports versions
# vanish from the archive) and verify its sha256. Prints the path.
#   fetch_deb SUITE PACKAGE VERSION SHA256
fetch_deb() {
  local suite=$1 pkg=$2 ver=$3 sha=$4
  local dir="$CACHE/debs" f
  mkdir -p "$dir"
  f="$dir/${pkg}_${ver//:/%3a}.deb"
  if [ -f "$f" ] && [ "$(sha256_of "$f")" = "$sha" ]; then
    printf '%s\n' "$f"; return 0
  fi
  log "fetching $pkg=$ver ($suite)"
  apt_suite_update "$suite"
  local tmp
  tmp=$(mktemp -d "$dir/.dl.XXXXXX")
  if ! (cd "$tmp" && apt_suite "$suite" apt-get download "$pkg=$ver" >&2); then
    rm -rf "$tmp"
    die "cannot download $pkg=$ver from $suite (vanished from the archive? restore $f into the cache or bump the pin)"
  fi
  local got
  got=$(ls "$tmp"/*.deb)
  if [ "$(sha256_of "$got")" != "$sha" ]; then
    log "sha256 mismatch for $pkg=$ver: got $(sha256_of "$got"), pinned $sha"
    rm -rf "$tmp"; die "sha256 mismatch for $pkg"
  fi
  mv "$got" "$f"; rm -rf "$tmp"
  printf '%s\n' "$f"
}

# Extract a .deb's data into DIR (dpkg-deb is always present on Debian).
extract_deb() { dpkg-deb -x "$1" "$2"; }

# Print the first of the given paths that exists (nothing if none).
first_existing() { local p; for p in "$@"; do if [ -e "$p" ]; then printf '%s\n' "$p"; return 0; fi; done; return 0; }
