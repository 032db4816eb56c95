#!/bin/sh
# Usage (in the guest): sh /host-like.sh CMD [ARGS...]
# Runs inside a guest (busybox): makes it look like a Debian host to a
# recorder, then runs CMD. run.sh adds Debian's own programs under
# /opt/debian/bin (lsb_release from the lsb-release package, dash, and
# the getopt, cut, tr and getconf it and below 0.9 run); here they replace
# busybox's applets of the same name on PATH and dash becomes /bin/sh, as
# on Debian, so below 0.9's per-sample `lsb_release -a` and `getconf
# LONG_BIT` start the processes they start on a host. The loopback comes
# up where the kernel has networking (the network collectors read it).
# os-release is Debian's.
set -eu
# shellcheck source=tests/vm/guest-lib.sh
. /guest-lib.sh
# Our patched kernel is built without networking: nothing to bring up.
lo_up || echo "host-like: no loopback (a kernel without networking)" >&2
for f in /opt/debian/bin/*; do
  n=${f##*/}
  # Only links to busybox are replaced: the symlinks, not what they point at.
  for d in /bin /sbin /usr/bin /usr/sbin; do
    [ ! -L "$d/$n" ] || rm "$d/$n"
  done
  ln -s "$f" "/usr/bin/$n"
done
ln -sf /opt/debian/bin/dash /bin/sh
ln -sf /usr/lib/os-release /etc/os-release
for c in lsb_release getconf; do
  [ "$(command -v $c)" = /usr/bin/$c ] || { echo "host-like: $c is $(command -v $c), not Debian's" >&2; exit 1; }
done
echo "host-like: $(lsb_release -ds), /bin/sh -> $(readlink /bin/sh), LONG_BIT $(getconf LONG_BIT)" >&2
exec "$@"
