#!/bin/sh
# Guest side of the flush-cost measurement (see patches/README.md).
# Usage: bench.sh [NCG] [NREADERS] [SECS] [PERIOD_MS] [NLOAD]
# Needs the stream-bench binary next to this script (or in /), a kernel
# with CONFIG_FUNCTION_PROFILER and tracefs.
here=$(dirname "$0")
B=$here/stream-bench; [ -x "$B" ] || B=/stream-bench
NCG=${1:-50} NR=${2:-8} SECS=${3:-10} PERIOD=${4:-1000} NLOAD=${5:-10}
T=/sys/kernel/tracing
[ -d $T/trace_stat ] || mount -t tracefs tracefs $T
# CPU time only: a flush that sleeps is not charged for the sleep
echo 0 > $T/options/sleep-time 2>/dev/null
FUNCS=${FUNCS:-"css_rstat_flush mem_cgroup_css_rstat_flush blkcg_rstat_flush cgroup_stream_workfn"}
: > $T/set_ftrace_filter
for f in $FUNCS; do
	echo "$f" >> $T/set_ftrace_filter 2>/dev/null || echo "bench: no $f to trace"
done
echo "bench: profiling: $(cat $T/set_ftrace_filter | tr '\n' ' ')"
"$B" setup "$NCG" || exit 1

# Per-function totals (hits, us) over all CPUs, from the profiler.
snap() {
	cat $T/trace_stat/function* | awk '
		$1 == "Function" || $1 ~ /^-+$/ { next }
		NF >= 4 { hit[$1] += $2; us[$1] += $3 }
		END { for (f in hit) printf "%s %d %.1f\n", f, hit[f], us[f] }'
}

# The profiler is enabled once: re-enabling it (which resets the stats)
# crashed this 7.3 build (return to address 0 from a graph-traced
# function), so each run is measured as the difference of two snapshots.
echo 1 > $T/function_profile_enabled

# mode: idle (load only), plain, stream
run() {
	mode=$1
	"$B" load "$NCG" "$NLOAD" $((SECS + 3)) &
	lp=$!
	sleep 1
	[ "$mode" = stream ] && echo "$PERIOD" > /sys/fs/cgroup/cpu.stat.stream_interval
	snap > /tmp/before
	s0=$(awk '/^cpu /{print $4}' /proc/stat)
	case $mode in
	idle) sleep "$SECS" ;;
	plain) "$B" plain "$NCG" "$NR" "$SECS" "$PERIOD" ;;
	stream) "$B" stream "$NCG" "$NR" "$SECS" ;;
	esac
	s1=$(awk '/^cpu /{print $4}' /proc/stat)
	snap > /tmp/after
	echo 0 > /sys/fs/cgroup/cpu.stat.stream_interval
	wait $lp
	echo "== $mode: $NR readers x $NCG cgroups, ${SECS}s, period ${PERIOD}ms, $NLOAD churners; system time of the whole guest: $((s1 - s0)) ticks (USER_HZ)"
	awk -v secs="$SECS" -v period="$PERIOD" '
		FILENAME == ARGV[1] { h0[$1] = $2; u0[$1] = $3; next }
		{ hit[$1] = $2 - h0[$1]; us[$1] = $3 - u0[$1] }
		END {
			n = secs * 1000 / period
			printf "%-28s %10s %12s %12s %12s\n", "function", "calls", "time_us", "calls/intvl", "us/intvl"
			for (f in hit)
				printf "%-28s %10d %12.0f %12.1f %12.1f\n", f, hit[f], us[f], hit[f] / n, us[f] / n
		}' /tmp/before /tmp/after
}
for m in ${MODES:-idle plain stream}; do run $m; done
echo 0 > $T/function_profile_enabled
