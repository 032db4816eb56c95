#!/bin/sh
# Build the stat stream kselftest as one static binary (for a busybox guest).
#
# Usage: tests/stream/build-selftest.sh KSRC [OUT]
#   KSRC  a linux-source-7.3 tree with patches/*.patch applied
#   OUT   output binary (default: ./test_stat_stream)
set -eu
KSRC=${1:?usage: $0 KSRC [OUT]}
OUT=${2:-./test_stat_stream}
D=$KSRC/tools/testing/selftests/cgroup
[ -f "$D/test_stat_stream.c" ] || {
	echo "$D/test_stat_stream.c missing: apply the series to $KSRC first" >&2
	exit 1
}
${CC:-gcc} -static -O2 -Wall -pthread \
	-I"$KSRC/tools/testing/selftests" -I"$D/lib/include" \
	-o "$OUT" "$D/test_stat_stream.c" "$D/lib/cgroup_util.c"
echo "$OUT"
