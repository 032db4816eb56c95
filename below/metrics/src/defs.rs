//! The metrics we export: one table, read by the renderer and by the
//! README's mapping to below 0.9's `dump -O openmetrics` names.

use model::CgroupSample;
use serde::Deserialize;

/// A metric group, the unit of `metrics.groups`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// cpu.stat: 6 series per cgroup.
    Cpu,
    /// memory.current, swap, the main memory.stat sizes, page faults, OOM
    /// events: 14 per cgroup.
    Memory,
    /// The rest of memory.stat (LRU lists, workingset, reclaim): 31 per
    /// cgroup. Off by default.
    MemoryStat,
    /// io.stat: 6 per cgroup and device.
    Io,
    /// cpu/io/memory.pressure totals: 6 per cgroup (5 where cpu has no
    /// `full` line).
    Pressure,
    /// Tasks and descendant cgroups: 3 per cgroup.
    Pids,
    /// Host-wide /proc/stat, meminfo, vmstat: 28 series.
    System,
}

impl Group {
    pub const DEFAULT: &'static [Group] = &[
        Group::Cpu,
        Group::Memory,
        Group::Io,
        Group::Pressure,
        Group::Pids,
        Group::System,
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Bytes,
}

#[derive(Debug, Clone, Copy)]
pub enum Val {
    U(u64),
    /// Seconds, given in microseconds (written as dtoa writes the f64).
    Usec(u64),
}

fn usec(v: Option<u64>) -> Option<Val> {
    v.map(Val::Usec)
}

fn u(v: Option<u64>) -> Option<Val> {
    v.map(Val::U)
}

/// Sizes the kernel reports as i64 (-1 never appears for usage).
fn i(v: Option<i64>) -> Option<Val> {
    v.and_then(|v| u64::try_from(v).ok()).map(Val::U)
}

fn kib(v: Option<u64>) -> Option<Val> {
    v.map(|v| Val::U(v.saturating_mul(1024)))
}

/// The host-wide part of a sample we export.
#[derive(Debug)]
pub struct System<'a> {
    pub stat: &'a procfs::Stat,
    pub meminfo: &'a procfs::MemInfo,
    pub vmstat: &'a procfs::VmStat,
}

#[derive(Debug)]
pub enum Read {
    /// One series per cgroup, label `cgroup`.
    Cgroup(fn(&CgroupSample) -> Option<Val>),
    /// One series per cgroup and io.stat device, labels `cgroup`, `device`.
    Device(fn(&cgroupfs::IoStat) -> Option<u64>),
    /// One host-wide series.
    System(fn(&System) -> Option<Val>),
    /// One host-wide series per CPU mode, label `mode`, in seconds.
    CpuModes,
}

#[derive(Debug)]
pub struct Def {
    pub group: Group,
    /// Without the `below_` prefix, the unit and `_total` (the encoder adds them).
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: &'static str,
    /// below 0.9's `dump -O openmetrics` name for the same field ("" if it
    /// has none) and how ours relates to it.
    pub below: &'static str,
    pub read: Read,
}

use Group::*;
use Kind::*;

const S: Option<Unit> = Some(Unit::Seconds);
const B: Option<Unit> = Some(Unit::Bytes);
const N: Option<Unit> = None;

const fn def(
    group: Group,
    name: &'static str,
    kind: Kind,
    unit: Option<Unit>,
    help: &'static str,
    below: &'static str,
    read: Read,
) -> Def {
    Def {
        group,
        name,
        kind,
        unit,
        help,
        below,
        read,
    }
}

macro_rules! mem_stat {
    ($c:ident, $f:ident) => {
        |$c: &CgroupSample| u($c.memory_stat.as_ref()?.$f)
    };
}

/// A memory.stat field whose metric, help and below 0.9 name are its own
/// name: `cgroup_memory_<f>`, "memory.stat <f>", `cgroup_mem_<f>_bytes`
/// (gauges) or `cgroup_mem_<f> = rate` (counters).
macro_rules! memory_stat {
    (gauge $f:ident) => {
        memory_stat!(Gauge, B, $f, "_bytes")
    };
    (counter $f:ident) => {
        memory_stat!(Counter, N, $f, " = rate")
    };
    ($kind:ident, $unit:ident, $f:ident, $below:literal) => {
        def(
            MemoryStat,
            concat!("cgroup_memory_", stringify!($f)),
            $kind,
            $unit,
            concat!("memory.stat ", stringify!($f)),
            concat!("cgroup_mem_", stringify!($f), $below),
            Read::Cgroup(mem_stat!(c, $f)),
        )
    };
}

/// Every metric, in exposition order (one line per metric: a table).
#[rustfmt::skip]
pub static DEFS: &[Def] = &[
    // cpu.stat
    def(Cpu, "cgroup_cpu_usage", Counter, S, "CPU time used (cpu.stat usage_usec)",
        "cgroup_cpu_usage_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.cpu_stat.as_ref()?.usage_usec))),
    def(Cpu, "cgroup_cpu_user", Counter, S, "CPU time in user mode (cpu.stat user_usec)",
        "cgroup_cpu_user_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.cpu_stat.as_ref()?.user_usec))),
    def(Cpu, "cgroup_cpu_system", Counter, S, "CPU time in kernel mode (cpu.stat system_usec)",
        "cgroup_cpu_system_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.cpu_stat.as_ref()?.system_usec))),
    def(Cpu, "cgroup_cpu_periods", Counter, N, "Enforcement periods elapsed (cpu.stat nr_periods)",
        "cgroup_cpu_nr_periods_per_sec = rate", Read::Cgroup(|c| u(c.cpu_stat.as_ref()?.nr_periods))),
    def(Cpu, "cgroup_cpu_throttled_periods", Counter, N, "Periods throttled (cpu.stat nr_throttled)",
        "cgroup_cpu_nr_throttled_per_sec = rate", Read::Cgroup(|c| u(c.cpu_stat.as_ref()?.nr_throttled))),
    def(Cpu, "cgroup_cpu_throttled", Counter, S, "Time throttled (cpu.stat throttled_usec)",
        "cgroup_cpu_throttled_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.cpu_stat.as_ref()?.throttled_usec))),
    // memory
    def(Memory, "cgroup_memory", Gauge, B, "Memory in use (memory.current)",
        "cgroup_mem_total_bytes", Read::Cgroup(|c| i(c.memory_current))),
    def(Memory, "cgroup_memory_swap", Gauge, B, "Swap in use (memory.swap.current)",
        "cgroup_mem_swap_bytes", Read::Cgroup(|c| i(c.memory_swap_current))),
    def(Memory, "cgroup_memory_anon", Gauge, B, "Anonymous memory (memory.stat anon)",
        "cgroup_mem_anon_bytes", Read::Cgroup(mem_stat!(c, anon))),
    def(Memory, "cgroup_memory_file", Gauge, B, "Page cache (memory.stat file)",
        "cgroup_mem_file_bytes", Read::Cgroup(mem_stat!(c, file))),
    def(Memory, "cgroup_memory_kernel", Gauge, B, "Kernel memory (memory.stat kernel)",
        "cgroup_mem_kernel_bytes", Read::Cgroup(mem_stat!(c, kernel))),
    def(Memory, "cgroup_memory_shmem", Gauge, B, "Shared memory (memory.stat shmem)",
        "cgroup_mem_shmem_bytes", Read::Cgroup(mem_stat!(c, shmem))),
    def(Memory, "cgroup_memory_sock", Gauge, B, "Network buffers (memory.stat sock)",
        "cgroup_mem_sock_bytes", Read::Cgroup(mem_stat!(c, sock))),
    def(Memory, "cgroup_memory_slab", Gauge, B, "Slab (memory.stat slab)",
        "cgroup_mem_slab_bytes", Read::Cgroup(mem_stat!(c, slab))),
    def(Memory, "cgroup_memory_page_faults", Counter, N, "Page faults (memory.stat pgfault)",
        "cgroup_mem_pgfault = rate", Read::Cgroup(mem_stat!(c, pgfault))),
    def(Memory, "cgroup_memory_major_page_faults", Counter, N, "Major page faults (memory.stat pgmajfault)",
        "cgroup_mem_pgmajfault = rate", Read::Cgroup(mem_stat!(c, pgmajfault))),
    def(Memory, "cgroup_memory_events_high", Counter, N, "Times over memory.high (memory.events high)",
        "", Read::Cgroup(|c| u(c.memory_events.as_ref()?.high))),
    def(Memory, "cgroup_memory_events_max", Counter, N, "Times memory.max was hit (memory.events max)",
        "", Read::Cgroup(|c| u(c.memory_events.as_ref()?.max))),
    def(Memory, "cgroup_memory_events_oom", Counter, N, "OOM events (memory.events oom)",
        "cgroup_mem_events_oom", Read::Cgroup(|c| u(c.memory_events.as_ref()?.oom))),
    def(Memory, "cgroup_memory_events_oom_kill", Counter, N, "Processes OOM-killed (memory.events oom_kill)",
        "cgroup_mem_events_oom_kill", Read::Cgroup(|c| u(c.memory_events.as_ref()?.oom_kill))),
    // memory.stat, the rest
    def(MemoryStat, "cgroup_memory_kernel_stack", Gauge, B, "memory.stat kernel_stack", "", Read::Cgroup(mem_stat!(c, kernel_stack))),
    memory_stat!(gauge zswap),
    memory_stat!(gauge zswapped),
    memory_stat!(gauge file_mapped),
    memory_stat!(gauge file_dirty),
    memory_stat!(gauge file_writeback),
    memory_stat!(gauge anon_thp),
    memory_stat!(gauge inactive_anon),
    memory_stat!(gauge active_anon),
    memory_stat!(gauge inactive_file),
    memory_stat!(gauge active_file),
    memory_stat!(gauge unevictable),
    memory_stat!(gauge slab_reclaimable),
    memory_stat!(gauge slab_unreclaimable),
    memory_stat!(counter workingset_refault_anon),
    memory_stat!(counter workingset_refault_file),
    memory_stat!(counter workingset_activate_anon),
    memory_stat!(counter workingset_activate_file),
    memory_stat!(counter workingset_restore_anon),
    memory_stat!(counter workingset_restore_file),
    memory_stat!(counter workingset_nodereclaim),
    memory_stat!(counter pgrefill),
    memory_stat!(counter pgscan),
    memory_stat!(counter pgsteal),
    memory_stat!(counter pgactivate),
    memory_stat!(counter pgdeactivate),
    memory_stat!(counter pglazyfree),
    memory_stat!(counter pglazyfreed),
    memory_stat!(counter thp_fault_alloc),
    memory_stat!(counter thp_collapse_alloc),
    def(MemoryStat, "cgroup_memory_events_local_oom_kill", Counter, N, "memory.events.local oom_kill", "cgroup_mem_events_local_oom_kill", Read::Cgroup(|c| u(c.memory_events_local.as_ref()?.oom_kill))),
    // io.stat, per device
    def(Io, "cgroup_io_read", Counter, B, "Bytes read (io.stat rbytes)",
        "cgroup_io_rbytes_per_sec_bytes_per_second = sum by (cgroup) (rate)", Read::Device(|d| d.rbytes)),
    def(Io, "cgroup_io_written", Counter, B, "Bytes written (io.stat wbytes)",
        "cgroup_io_wbytes_per_sec_bytes_per_second = sum by (cgroup) (rate)", Read::Device(|d| d.wbytes)),
    def(Io, "cgroup_io_discarded", Counter, B, "Bytes discarded (io.stat dbytes)",
        "cgroup_io_dbytes_per_sec_bytes_per_second = sum by (cgroup) (rate)", Read::Device(|d| d.dbytes)),
    def(Io, "cgroup_io_reads", Counter, N, "Read operations (io.stat rios)",
        "cgroup_io_rios_per_sec = sum by (cgroup) (rate)", Read::Device(|d| d.rios)),
    def(Io, "cgroup_io_writes", Counter, N, "Write operations (io.stat wios)",
        "cgroup_io_wios_per_sec = sum by (cgroup) (rate)", Read::Device(|d| d.wios)),
    def(Io, "cgroup_io_discards", Counter, N, "Discard operations (io.stat dios)",
        "cgroup_io_dios_per_sec = sum by (cgroup) (rate)", Read::Device(|d| d.dios)),
    // pressure
    def(Pressure, "cgroup_pressure_cpu_some", Counter, S, "Time some tasks stalled on CPU (cpu.pressure some total)",
        "cgroup_pressure_cpu_some_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.cpu.some.total))),
    def(Pressure, "cgroup_pressure_cpu_full", Counter, S, "Time all tasks stalled on CPU (cpu.pressure full total)",
        "cgroup_pressure_cpu_full_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.cpu.full.as_ref()?.total))),
    def(Pressure, "cgroup_pressure_io_some", Counter, S, "Time some tasks stalled on IO (io.pressure some total)",
        "cgroup_pressure_io_some_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.io.some.total))),
    def(Pressure, "cgroup_pressure_io_full", Counter, S, "Time all tasks stalled on IO (io.pressure full total)",
        "cgroup_pressure_io_full_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.io.full.total))),
    def(Pressure, "cgroup_pressure_memory_some", Counter, S, "Time some tasks stalled on memory (memory.pressure some total)",
        "cgroup_pressure_memory_some_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.memory.some.total))),
    def(Pressure, "cgroup_pressure_memory_full", Counter, S, "Time all tasks stalled on memory (memory.pressure full total)",
        "cgroup_pressure_memory_full_pct_percent = 100 * rate", Read::Cgroup(|c| usec(c.pressure.as_ref()?.memory.full.total))),
    // pids, cgroup.stat
    def(Pids, "cgroup_tasks", Gauge, N, "Tasks (threads) in the cgroup (pids.current)",
        "cgroup_pids_tids_current_count (typed counter there)", Read::Cgroup(|c| u(c.tids_current))),
    def(Pids, "cgroup_descendants", Gauge, N, "Live descendant cgroups (cgroup.stat nr_descendants)",
        "cgroup_cgroup_stat_nr_descendants (typed counter there)", Read::Cgroup(|c| c.cgroup_stat.as_ref()?.nr_descendants.map(|v| Val::U(v.into())))),
    def(Pids, "cgroup_dying_descendants", Gauge, N, "Dying descendant cgroups (cgroup.stat nr_dying_descendants)",
        "cgroup_cgroup_stat_nr_dying_descendants (typed counter there)", Read::Cgroup(|c| c.cgroup_stat.as_ref()?.nr_dying_descendants.map(|v| Val::U(v.into())))),
    // host
    def(System, "system_cpu", Counter, S, "CPU time by mode, all CPUs (/proc/stat cpu)",
        "system_cpu_<mode>_pct = 100 * rate / CPUs (mode steal: stolen)", Read::CpuModes),
    def(System, "system_context_switches", Counter, N, "Context switches (/proc/stat ctxt)",
        "system_stat_context_switches = rate", Read::System(|s| u(s.stat.context_switches))),
    def(System, "system_interrupts", Counter, N, "Interrupts (/proc/stat intr)",
        "system_stat_total_interrupt_ct = rate", Read::System(|s| u(s.stat.total_interrupt_count))),
    def(System, "system_forks", Counter, N, "Processes created (/proc/stat processes)",
        "system_stat_total_processes = rate", Read::System(|s| u(s.stat.total_processes))),
    def(System, "system_procs_running", Gauge, N, "Runnable tasks (/proc/stat procs_running)",
        "system_stat_running_processes", Read::System(|s| s.stat.running_processes.map(|v| Val::U(v.into())))),
    def(System, "system_procs_blocked", Gauge, N, "Tasks blocked on IO (/proc/stat procs_blocked)",
        "system_stat_blocked_processes", Read::System(|s| s.stat.blocked_processes.map(|v| Val::U(v.into())))),
    def(System, "system_boot_time", Gauge, S, "Boot time, seconds since the epoch (/proc/stat btime)",
        "system_stat_boot_time_epoch_secs", Read::System(|s| u(s.stat.boot_time_epoch_secs))),
    def(System, "system_memory_total", Gauge, B, "MemTotal", "system_mem_total_bytes", Read::System(|s| kib(s.meminfo.total))),
    def(System, "system_memory_free", Gauge, B, "MemFree", "system_mem_free_bytes", Read::System(|s| kib(s.meminfo.free))),
    def(System, "system_memory_available", Gauge, B, "MemAvailable", "system_mem_available_bytes", Read::System(|s| kib(s.meminfo.available))),
    def(System, "system_memory_buffers", Gauge, B, "Buffers", "system_mem_buffers_bytes", Read::System(|s| kib(s.meminfo.buffers))),
    def(System, "system_memory_cached", Gauge, B, "Cached", "system_mem_cached_bytes", Read::System(|s| kib(s.meminfo.cached))),
    def(System, "system_memory_shmem", Gauge, B, "Shmem", "system_mem_shmem_bytes", Read::System(|s| kib(s.meminfo.shmem))),
    def(System, "system_memory_slab", Gauge, B, "Slab", "system_mem_slab_bytes", Read::System(|s| kib(s.meminfo.slab))),
    def(System, "system_swap_total", Gauge, B, "SwapTotal", "system_mem_swap_total_bytes", Read::System(|s| kib(s.meminfo.swap_total))),
    def(System, "system_swap_free", Gauge, B, "SwapFree", "system_mem_swap_free_bytes", Read::System(|s| kib(s.meminfo.swap_free))),
    def(System, "system_vm_pgpgin", Counter, N, "vmstat pgpgin", "system_vm_pgpgin_per_sec = rate", Read::System(|s| u(s.vmstat.pgpgin))),
    def(System, "system_vm_pgpgout", Counter, N, "vmstat pgpgout", "system_vm_pgpgout_per_sec = rate", Read::System(|s| u(s.vmstat.pgpgout))),
    def(System, "system_vm_pswpin", Counter, N, "vmstat pswpin", "system_vm_pswpin_per_sec = rate", Read::System(|s| u(s.vmstat.pswpin))),
    def(System, "system_vm_pswpout", Counter, N, "vmstat pswpout", "system_vm_pswpout_per_sec = rate", Read::System(|s| u(s.vmstat.pswpout))),
    def(System, "system_vm_oom_kill", Counter, N, "vmstat oom_kill", "system_vm_oom_kill = rate", Read::System(|s| u(s.vmstat.oom_kill))),
];

type CpuField = fn(&procfs::CpuStat) -> Option<u64>;

/// CPU modes of `system_cpu`, from /proc/stat's cpu line.
pub static CPU_MODES: &[(&str, CpuField)] = &[
    ("user", |c| c.user_usec),
    ("nice", |c| c.nice_usec),
    ("system", |c| c.system_usec),
    ("idle", |c| c.idle_usec),
    ("iowait", |c| c.iowait_usec),
    ("irq", |c| c.irq_usec),
    ("softirq", |c| c.softirq_usec),
    ("steal", |c| c.stolen_usec),
];

/// The metric table as markdown, for docs/metrics.md (a test keeps the two
/// equal).
pub fn mapping_markdown() -> String {
    let mut s = String::from(
        "| group | metric | type | labels | below 0.9 `dump -O openmetrics` |\n| --- | --- | --- | --- | --- |\n",
    );
    for d in DEFS {
        let unit = match d.unit {
            Some(Unit::Seconds) => "_seconds",
            Some(Unit::Bytes) => "_bytes",
            None => "",
        };
        let (ty, total) = match d.kind {
            Kind::Counter => ("counter", "_total"),
            Kind::Gauge => ("gauge", ""),
        };
        let labels = match d.read {
            Read::Cgroup(_) => "cgroup",
            Read::Device(_) => "cgroup, device",
            Read::System(_) => "",
            Read::CpuModes => "mode",
        };
        let below = if d.below.is_empty() { "—" } else { d.below };
        s.push_str(&format!(
            "| {:?} | `below_{}{}{}` | {} | {} | {} |\n",
            d.group, d.name, unit, total, ty, labels, below
        ));
    }
    s
}
