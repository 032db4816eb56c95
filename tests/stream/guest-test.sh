#!/bin/sh
# Runs inside the patched guest (busybox sh): the stat stream kselftest, then
# a dmesg check for lockdep splats, atomic-sleep and hung-task reports.
#
# Usage: guest-test.sh [TEST_BINARY]   (default: test_stat_stream next to
# this script, or /test_stat_stream)
# Env: HUNG_WAIT=SECS  time left to the hung-task detector after the test
#      (default 12; the detector's timeout is set to 10 s).
here=$(dirname "$0")
bin=${1:-}
[ -n "$bin" ] || for b in "$here/test_stat_stream" /test_stat_stream; do
	[ -x "$b" ] && { bin=$b; break; }
done
if [ -z "$bin" ] || [ ! -x "$bin" ]; then echo "guest-test: no test binary"; exit 2; fi

fail=0
[ -d /proc/self ] || mount -t proc proc /proc
grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts ||
	mount -t cgroup2 cgroup2 /sys/fs/cgroup || { echo "guest-test: no cgroup2"; exit 2; }
if [ -w /proc/sys/kernel/hung_task_timeout_secs ]; then
	echo 10 > /proc/sys/kernel/hung_task_timeout_secs
	echo 1 > /proc/sys/kernel/hung_task_check_interval_secs 2>/dev/null
	echo -1 > /proc/sys/kernel/hung_task_warnings 2>/dev/null
else
	echo "guest-test: WARNING: no hung task detector (CONFIG_DETECT_HUNG_TASK)"
fi
zcat /proc/config.gz 2>/dev/null | grep -q "^CONFIG_PROVE_LOCKING=y" ||
	echo "guest-test: WARNING: kernel without CONFIG_PROVE_LOCKING?"

echo "guest-test: running $bin"
"$bin"
rc=$?
echo "guest-test: kselftest exit code $rc"
[ $rc = 0 ] || fail=1

# Anything stuck in D state gets reported after the 10 s timeout.
sleep "${HUNG_WAIT:-12}"

# Lockdep prints a banner at boot ("... MAX_LOCKDEP_KEYS: ..."); splats
# come with WARNING:/BUG:/INFO: headers and "lockdep" in their text.
dmesg > /tmp/dmesg.txt
grep -E 'lockdep|[Pp]ossible circular locking|possible recursive locking|inconsistent lock state|BUG:|sleeping function called from invalid context|[Hh]ung task|hung_task|blocked for more than|WARNING:|Oops:|Call Trace:' /tmp/dmesg.txt |
	grep -v -E '\.\.\. +(MAX_LOCKDEP|MAX_LOCK_DEPTH|CLASSHASH|CHAINHASH|MAX_.*LOCKDEP)|Lock dependency validator|memory used by lock dependency info|per task-struct memory footprint|RCU lockdep checking is enabled' > /tmp/bad.txt
if [ -s /tmp/bad.txt ]; then
	echo "guest-test: FAIL: kernel reported problems:"
	cat /tmp/bad.txt
	echo "---- full dmesg tail ----"
	tail -n 80 /tmp/dmesg.txt
	fail=1
else
	echo "guest-test: dmesg clean (no lockdep/BUG/invalid-context/hung-task reports)"
fi
if [ -r /proc/lockdep_stats ]; then
	if grep -q 'debug_locks: *1' /proc/lockdep_stats; then
		echo "guest-test: lockdep active (debug_locks: 1)"
	else
		echo "guest-test: FAIL: lockdep turned itself off:"
		grep debug_locks /proc/lockdep_stats
		fail=1
	fi
fi

if [ $fail = 0 ]; then echo "guest-test: PASS"; else echo "guest-test: FAIL"; fi
exit $fail
