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
FUNCS="css_rstat_flush cgroup_base_stat_flush mem_cgroup_css_rstat_flush blkcg_rstat_flush mem_cgroup_flush_stats cgroup_stream_workfn cpu_stat_show cpu_stat_stream_show memory_stat_show memory_stat_stream_show"
: > $T/set_ftrace_filter
for f in $FUNCS; do
	echo $f >> $T/set_ftrace_filter 2>/dev/null || echo "bench: no $f to trace"
done
echo "bench: profiling: $(cat $T/set_ftrace_filter | tr '\n' ' ')"
$B setup $NCG || exit 1

# mode: idle (load only), plain, stream
run() {
	mode=$1
	$B load $NCG $NLOAD $((SECS + 3)) &
	lp=$!
	sleep 1
	[ $mode = stream ] && echo $PERIOD > /sys/fs/cgroup/cpu.stat.stream_interval
	echo 0 > $T/function_profile_enabled
	echo 1 > $T/function_profile_enabled
	t0=$(cut -d' ' -f1 /proc/uptime)
	case $mode in
	idle) sleep $SECS ;;
	plain) $B plain $NCG $NR $SECS $PERIOD ;;
	stream) $B stream $NCG $NR $SECS ;;
	esac
	echo 0 > $T/function_profile_enabled
	t1=$(cut -d' ' -f1 /proc/uptime)
	echo 0 > /sys/fs/cgroup/cpu.stat.stream_interval
	wait $lp
	echo "== $mode: $NR readers x $NCG cgroups, ${SECS}s (measured ${t0}..${t1}), period ${PERIOD}ms, $NLOAD churners"
	cat $T/trace_stat/function* | awk -v secs="$SECS" -v period="$PERIOD" '
		$1 == "Function" || $1 ~ /^-+$/ { next }
		NF >= 4 { hit[$1] += $2; t = $3; if ($4 == "ms") t *= 1000; us[$1] += t }
		END {
			n = secs * 1000 / period
			printf "%-28s %10s %12s %12s %12s\n", "function", "calls", "time_us", "calls/intvl", "us/intvl"
			for (f in hit)
				printf "%-28s %10d %12.0f %12.1f %12.1f\n", f, hit[f], us[f], hit[f] / n, us[f] / n
		}'
}
for m in idle plain stream; do run $m; done
