#!/bin/sh
# Runs in the systemd guest of tests/systemd/run.sh (Debian trixie booted by
# tests/vm/run.sh --root, as a oneshot unit after multi-user.target).
# Usage: guest.sh DEB [EXTRA_SCRIPT]
# Installs DEB with apt, then drives below.service: start, the BPF plan
# (store record, same as full root's, journal), samples, system.slice
# services in `below dump cgroup`, a private store, the unit's
# `systemd-analyze security` exposure, a clean stop, SIGKILL and the
# restart, a dump across the gap, no errors logged; then runs EXTRA_SCRIPT
# (bash), if given, with below.service recording. One line per check goes to
# /out/results.tsv (PASS|FAIL, name, detail), below's journal to /out.
set -u
DEB=$1 EXTRA=${2:-}
R=/out/results.tsv
: >"$R"
fails=0
DETAIL=

# check NAME FUNC: runs FUNC, which leaves a note in DETAIL; records the result.
check() {
  name=$1; DETAIL=
  echo "=== $name"
  if $2; then st=PASS; else st=FAIL; fails=$((fails + 1)); fi
  printf '%s\t%s\t%s\n' "$st" "$name" "$DETAIL" | tr '\n' ' ' >>"$R"
  echo >>"$R"
  echo "=== $name: $st: $DETAIL"
}

# wait_for SECS CMD...: polls CMD every second until it succeeds.
wait_for() {
  n=$1; shift
  while ! "$@"; do
    n=$((n - 1))
    [ "$n" -gt 0 ] || return 1
    sleep 1
  done
}

prop() { systemctl show -P "$1" below; }

# Timestamps of the samples recorded since $1 (and until $2, if given). The
# range is filtered here: with nothing at or after -b, dump starts at the
# last sample before it (a warning only).
samples() {
  below dump system -b "$1" ${2:+-e "$2"} -f timestamp -O csv --disable-title 2>/dev/null |
    grep -E '^[0-9]+,' | cut -d, -f1 | awk -v b="$1" -v e="${2:-}" '$1 >= b && (e == "" || $1 <= e)'
}
has_samples() { [ "$(samples "$1" | wc -l)" -ge "$2" ]; }

boot() {
  DETAIL="PID 1 is $(cat /proc/1/comm); $(systemctl is-system-running) ($(systemctl --failed --plain --no-legend | wc -l) failed units)"
  [ "$(cat /proc/1/comm)" = systemd ] && [ -d /sys/fs/cgroup/system.slice ]
}

apt_install() {
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >/out/apt.log 2>&1; then
    DETAIL="apt-get install failed: $(tail -n 3 /out/apt.log)"
    return 1
  fi
  DETAIL="$(dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}' bstats-below); below.service after install: $(systemctl is-enabled below), $(systemctl is-active below)"
  [ "$(dpkg-query -W -f='${db:Status-Status}' bstats-below)" = installed ]
}

start() {
  # The postinst may have started it already: begin from a stopped unit.
  systemctl stop below
  T_START=$(date +%s)
  systemctl start below || { DETAIL="systemctl start failed"; return 1; }
  DETAIL="$(prop ActiveState), MainPID $(prop MainPID), Restart=$(prop Restart), TimeoutStopUSec=$(prop TimeoutStopUSec)"
  [ "$(prop ActiveState)" = active ]
}

backend_of() {
  below backends --json | jq -r --arg f "$1" '.[-1].plan.files[] | select(.file == $f) | .backend'
}

# The store's record of this start (structured): memory.stat, cpu.stat & co by BPF.
plan_recorded() {
  # written after probing, before the first sample
  wait_for 60 sh -c "below backends --json 2>/dev/null | jq -e --argjson t $T_START '.[-1].since >= \$t' >/dev/null" ||
    { DETAIL="no backend record since $T_START in the store"; return 1; }
  below backends --json >/out/backends.json
  DETAIL="kernel $(jq -r '.[-1].kernel' /out/backends.json), root $(jq -r '.[-1].cgroup_root' /out/backends.json);"
  DETAIL="$DETAIL $(jq -r '.[-1].plan.files | group_by(.backend)[] | "\(.[0].backend): \([.[].file] | join(" "))"' /out/backends.json | tr '\n' ';')"
  ok=0
  for f in MemoryStat CpuStat MemoryEvents MemoryCurrent; do
    [ "$(backend_of "$f")" = bpf ] || { DETAIL="$DETAIL $f not bpf!"; ok=1; }
  done
  [ "$(jq -r '.[-1].kernel' /out/backends.json)" = "$(uname -r)" ] || ok=1
  [ "$(jq -r '.[-1].cgroup_root' /out/backends.json)" = /sys/fs/cgroup ] || ok=1
  procs=$(jq -r '.[-1].processes.backend' /out/backends.json)
  DETAIL="$DETAIL processes: $procs"
  [ "$procs" = bpf ] || ok=1
  return "$ok"
}

# The unit's capabilities give it every file BPF serves for full root here.
plan_as_root() {
  below backends --now --json >/out/backends-now.json || { DETAIL="below backends --now failed"; return 1; }
  # The record's shape: `backends --now --json` is what a run would record now.
  per_file='[.plan.files[] | "\(.file)=\(.backend)"] + ["processes=\(.processes.backend)"]'
  diff=$(jq -r --argjson root "$(jq -c "$per_file" /out/backends-now.json)" \
    ".[-1] | $per_file - \$root | join(\" \")" /out/backends.json)
  DETAIL="files the unit's plan serves otherwise than root's: ${diff:-none}"
  [ -z "$diff" ]
}

# What the unit logged at start: the plan, memory.stat on bpf.
plan_logged() {
  journalctl -u below -o cat --no-pager >/out/below.journal
  DETAIL=$(grep -E '^ +memory\.stat +' /out/below.journal | tail -n 1 | sed 's/  */ /g')
  grep -q 'backend per cgroup file' /out/below.journal &&
    grep -E '^ +memory\.stat +bpf ' /out/below.journal >/dev/null
}

recording() {
  wait_for 90 has_samples "$T_START" 3
  rc=$?
  DETAIL="$(samples "$T_START" | wc -l) samples since $T_START"
  return "$rc"
}

# below dump cgroup shows system.slice's services, memory.stat values included.
services() {
  below dump cgroup -b "$T_START" -f timestamp full_path mem.total mem.anon cpu.usage_pct \
    -O csv --raw >/out/cgroups.csv || { DETAIL="dump failed"; return 1; }
  # the newest sample in this dump (one may have landed since)
  last=$(grep -oE '^[0-9]+,' /out/cgroups.csv | sort -n | tail -n 1 | tr -d ,)
  DETAIL="$(grep -c "^$last,/system.slice/[^,]*\.service," /out/cgroups.csv) services in system.slice at $last:"
  DETAIL="$DETAIL $(grep "^$last,/system.slice/[^,]*\.service," /out/cgroups.csv | cut -d, -f2 | sed 's|/system.slice/||' | tr '\n' ' ')"
  jd=$(grep "^$last,/system.slice/systemd-journald.service," /out/cgroups.csv)
  DETAIL="$DETAIL; journald: $jd"
  # memory.current and memory.stat's anon, both above zero
  echo "$jd" | awk -F, '$3 > 0 && $4 > 0 { ok = 1 } END { exit !ok }' &&
    grep -q "^$last,/system.slice/below.service," /out/cgroups.csv
}

# The store holds every process's command line: 0700 directories (the
# logs directory too), 0600 files.
private_store() {
  open=$(find /var/log/below \( -type d ! -perm 0700 \) -o \( -type f ! -perm 0600 \) | head -n 5)
  DETAIL="$(stat -c '%a %n' /var/log/below /var/log/below/store | tr '\n' ' ')$(find /var/log/below/store -type f | wc -l) files; more open: ${open:-none}"
  [ -d /var/log/below/store ] && [ -z "$open" ]
}

# systemd's exposure score of the installed unit (0 best, 10 worst): at most
# 3.0, with the settings that cost most.
exposure() {
  systemd-analyze security --no-pager below.service >/out/security.txt 2>&1 ||
    { DETAIL="systemd-analyze security failed: $(tail -n 2 /out/security.txt)"; return 1; }
  score=$(sed -n 's/.*Overall exposure level for below.service: *\([0-9.]*\).*/\1/p' /out/security.txt)
  # rows end in their exposure; the ones without a number pass
  worst=$(awk '$NF ~ /^[0-9]+\.[0-9]+$/ { print $NF, $2 }' /out/security.txt | sort -rn | head -n 6 | tr '\n' ';')
  DETAIL="exposure ${score:-unknown} (limit 3.0); costing most: $worst"
  [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }'
}

stop() {
  tmo=$(prop TimeoutStopUSec)
  t0=$(date +%s%N)
  systemctl stop below
  ms=$((($(date +%s%N) - t0) / 1000000))
  DETAIL="stopped in $ms ms (TimeoutStopSec $tmo): $(prop ActiveState), Result=$(prop Result), ExecMainCode=$(prop ExecMainCode) ExecMainStatus=$(prop ExecMainStatus)"
  # exited (CLD_EXITED=1) with 0: below handled SIGTERM, no SIGKILL after the timeout
  [ "$(prop ActiveState)" = inactive ] && [ "$(prop Result)" = success ] &&
    [ "$(prop ExecMainCode)" = 1 ] && [ "$(prop ExecMainStatus)" = 0 ]
}

restarted() { p=$(prop MainPID); [ "$p" != 0 ] && [ "$p" != "$1" ] && [ "$(prop ActiveState)" = active ]; }

kill_restart() {
  T_RUN2=$(date +%s)
  systemctl start below
  wait_for 90 has_samples "$T_RUN2" 2 || { DETAIL="no samples after the second start"; return 1; }
  pid=$(prop MainPID) n0=$(prop NRestarts)
  T_KILL=$(date +%s)
  systemctl kill -s KILL below
  wait_for 60 restarted "$pid" || { DETAIL="not restarted within 60 s: $(prop ActiveState) $(prop SubState)"; return 1; }
  T_BACK=$(date +%s)
  DETAIL="pid $pid killed at $T_KILL, restarted as $(prop MainPID) after $((T_BACK - T_KILL)) s (Restart=$(prop Restart), NRestarts $n0 -> $(prop NRestarts))"
  [ "$(prop NRestarts)" = $((n0 + 1)) ]
}

# dump across the gap: samples from before the kill and after the restart.
gap() {
  wait_for 90 has_samples "$T_BACK" 2 || { DETAIL="no samples after the restart"; return 1; }
  samples "$T_RUN2" "$(date +%s)" >/out/gap.txt || { DETAIL="dump over the gap failed"; return 1; }
  # a sample stamped in the second of the kill was written before it
  before=$(awk -v k="$T_KILL" '$1 <= k' /out/gap.txt | wc -l)
  after=$(awk -v b="$T_BACK" '$1 >= b' /out/gap.txt | wc -l)
  runs=$(below backends --json | jq --argjson t "$T_RUN2" '[.[] | select(.since >= $t)] | length')
  cg=$(below dump cgroup -b "$T_RUN2" -e "$(date +%s)" -f timestamp full_path -O csv --disable-title | grep -c ',/system.slice/below.service,')
  DETAIL="$(wc -l </out/gap.txt) samples from $T_RUN2: $before before the kill, $after after the restart; $cg below.service rows in dump cgroup; $runs recording runs in the store since (2nd start, restart)"
  [ "$before" -ge 1 ] && [ "$after" -ge 1 ] && [ "$cg" -ge 2 ] && [ "$runs" = 2 ]
}

# Every run of the unit, the SIGKILLed one included, logged no error.
no_errors() {
  journalctl -u below -o short-precise --no-pager >/out/below.journal
  errors=$(grep -cE 'below\[[0-9]+\]: .* (ERRO|CRIT) ' /out/below.journal)
  DETAIL="$errors ERRO/CRIT lines, $(grep -cE 'below\[[0-9]+\]: .* WARN ' /out/below.journal) WARN lines (slow collections under TCG) in below's journal"
  [ "$errors" = 0 ]
}

extra() {
  bash "$EXTRA" >/out/extra.log 2>&1
  rc=$?
  cat /out/extra.log
  DETAIL="$(sed 's/ *$//' "$EXTRA") exited $rc"
  return "$rc"
}

check "boot: systemd as PID 1" boot
check "apt-get install ./bstats-below.deb" apt_install
check "systemctl start below" start
check "store records the plan: memory.stat, cpu.stat, memory.events, memory.current and processes by bpf" plan_recorded
check "the unit's plan equals full root's (below backends --now)" plan_as_root
check "journal logs the plan: memory.stat by bpf" plan_logged
check "records samples" recording
check "below dump cgroup shows system.slice services" services
check "store private: 0700 directories, 0600 files" private_store
check "systemd-analyze security below.service: exposure <= 3.0" exposure
check "systemctl stop below: clean, within TimeoutStopSec" stop
check "systemctl kill -s KILL below: restarted (Restart=on-failure)" kill_restart
check "dump across the kill/restart gap" gap
check "no errors in below's journal" no_errors
if [ -n "$EXTRA" ]; then check "extra: $(sed 's/ *$//' "$EXTRA")" extra; fi
exit $fails
