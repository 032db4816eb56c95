#!/usr/bin/env bash
# Usage: packaging/build-deb.sh [--profile release|dev] [--out DIR]
# Builds the Debian package of below (bstats-below_<version>_<arch>.deb, in
# target/debian by default): the binary, its man pages and shell
# completions, a commented /etc/below/below.conf and the below.service unit
# that runs `below record`. Needs cargo, dpkg-dev (dpkg-shlibdeps) and
# binutils. With dpkg-deb rather than cargo-deb: the same package without
# installing a cargo tool first (minutes of CI on 2 cores), and the
# maintainer scripts are ours to read.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=release
out=target/debian
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
  esac
done
case $profile in
  dev) bindir=debug ;;
  *) bindir=$profile ;;
esac

name=bstats-below
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "no version in Cargo.toml" >&2; exit 1; }

cargo build --locked --profile "$profile" -p bstats-below >&2
bin=${CARGO_TARGET_DIR:-target}/$bindir/below

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants the tree at debian/<package> beside debian/control.
root=$work/debian/$name
mkdir -p "$root/DEBIAN"

install -D -m 0755 "$bin" "$root/usr/bin/below"
strip --strip-unneeded "$root/usr/bin/below"

"$bin" generate-manpages -o "$work/man"
install -d "$root/usr/share/man/man1"
for page in "$work"/man/*.1; do
  gzip -9n "$page"
  mv "$page.gz" "$root/usr/share/man/man1/"
done

install -d "$root/usr/share/bash-completion/completions" \
  "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d"
"$bin" generate-completions -s bash -o "$root/usr/share/bash-completion/completions/below"
"$bin" generate-completions -s zsh -o "$root/usr/share/zsh/vendor-completions/_below"
"$bin" generate-completions -s fish -o "$root/usr/share/fish/vendor_completions.d/below.fish"

install -D -m 0644 etc/below.conf "$root/etc/below/below.conf"
install -D -m 0644 etc/below.service "$root/lib/systemd/system/below.service"

doc=$root/usr/share/doc/$name
install -D -m 0644 README.md "$doc/README.md"
cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: $name

Files: *
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF

printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$name" "$name" >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -e"debian/$name/usr/bin/below" | sed -n 's/^shlibs:Depends=//p')

cat >"$root/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: bstats developers <bstats@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Provides: below
Conflicts: below
Replaces: below
Section: admin
Priority: optional
Description: below system monitor, with cgroup stats read through BPF
 below records, replays and shows system, process and cgroup statistics
 (live, record, replay, dump, snapshot). This build reads cgroup stats with
 a BPF cgroup iterator, kernel-flushed stream files or plain reads, chosen
 per file. The below.service unit records to /var/log/below/store.
EOF
echo /etc/below/below.conf >"$root/DEBIAN/conffiles"

# What dh_installsystemd would add: enable and start on install, stop on
# removal, forget the unit on purge (the recorded store is left in place).
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] || [ "$1" = abort-upgrade ]; then
  if command -v deb-systemd-helper >/dev/null; then
    deb-systemd-helper unmask below.service >/dev/null || true
    if deb-systemd-helper --quiet was-enabled below.service; then
      deb-systemd-helper enable below.service >/dev/null || true
    else
      deb-systemd-helper update-state below.service >/dev/null || true
    fi
  fi
  if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
    deb-systemd-invoke restart below.service >/dev/null || true
  fi
fi
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  deb-systemd-invoke stop below.service >/dev/null || true
fi
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null; then
  deb-systemd-helper purge below.service >/dev/null || true
fi
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' |
  sort -z | xargs -0 md5sum >DEBIAN/md5sums)

mkdir -p "$out"
deb=$out/${name}_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
printf '%s\n' "$deb"
