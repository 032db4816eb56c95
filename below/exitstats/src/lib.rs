//! exitstats: a BPF program that catches each process as its last thread
//! exits and hands below-model what /proc would have shown for it, so a
//! process that started and ended between two samples still shows up in
//! the next one (below merges `CollectorOptions::exit_data` into the
//! sample's processes; procfs wins for pids it still lists).
//!
//! The program is a BTF tracepoint (`tp_btf/sched_process_exit`), attached
//! by BTF id: no tracefs. Events go through a BPF ring buffer, drained by
//! one thread: one buffer shared by all CPUs, so a burst on one CPU does
//! not overflow a small per-CPU perf buffer, and events arrive in order
//! (a reused pid's later exit overwrites the earlier one).
//!
//! Fails soft: [`setup`] logs once why exitstats cannot run (no BTF, no
//! such tracepoint, no ring buffer, not permitted, verifier); the
//! collector's map then stays empty.

mod skel {
    include!(concat!(env!("OUT_DIR"), "/exitstats.skel.rs"));
}

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use bstats_bpf::c_string;
use bstats_bpf::KernelBtf;
use bstats_bpf::MapView;
use bstats_bpf::Pod;
use libbpf_rs::skel::Skel;
use libbpf_rs::ErrorKind;
use libbpf_rs::RingBufferBuilder;
use slog::info;
use slog::warn;

use skel::types::bss as Bss;
use skel::types::exit_event as Event;
use skel::types::exit_flags;

// SAFETY: the skeleton's #[repr(C)] types of the event and .bss: integers
// and byte arrays.
unsafe impl Pod for Event {}
// SAFETY: as above.
unsafe impl Pod for Bss {}

/// How long the drain thread blocks before checking whether to stop.
const POLL: Duration = Duration::from_millis(200);
/// At most one "exits lost" warning this often.
const LOST_REPORT: Duration = Duration::from_secs(10);

/// The running program: exits land in the map given to
/// [`ExitStats::start`] until it is dropped.
pub struct ExitStats {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ExitStats {
    /// Probes what the program needs, loads and attaches it, and starts
    /// the thread that drains its ring buffer into `data`. Err says why it
    /// cannot run.
    pub fn start(logger: slog::Logger, data: Arc<Mutex<procfs::PidMap>>) -> Result<Self> {
        probe()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("exitstats".into())
            .spawn(move || drain(logger, data, s, ready_tx))
            .context("Failed to start the exitstats thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(ExitStats {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                bail!("the exitstats thread ended before loading")
            }
        }
    }
}

impl Drop for ExitStats {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts exitstats filling `data` (below-model's
/// `CollectorOptions::exit_data`, drained each sample) unless `enabled` is
/// false; logs once whether it runs and, if not, why. Never fails: without
/// it, below shows only the processes alive at each sample. Keep the
/// result while collecting.
pub fn setup(
    logger: &slog::Logger,
    enabled: bool,
    data: Arc<Mutex<procfs::PidMap>>,
) -> Option<ExitStats> {
    report(
        logger,
        enabled.then(|| ExitStats::start(logger.clone(), data)),
    )
}

/// Logs what [`ExitStats::start`] gave (None: not asked for) as [`setup`]
/// does; for a caller that started it on another thread.
pub fn report(logger: &slog::Logger, started: Option<Result<ExitStats>>) -> Option<ExitStats> {
    let Some(started) = started else {
        info!(logger, "exitstats: off (--disable-exitstats)");
        return None;
    };
    match started {
        Ok(x) => {
            info!(
                logger,
                "exitstats: on (BPF tp_btf/sched_process_exit): processes that exit between samples are kept"
            );
            Some(x)
        }
        Err(e) => {
            warn!(
                logger,
                "exitstats: off, processes that exit between samples will be missing: {:#}", e
            );
            None
        }
    }
}

/// What the kernel must have, checked in its BTF before loading so the
/// reason names the missing piece.
fn probe() -> Result<()> {
    let btf = KernelBtf::open(None)?;
    if !btf.has_typedef("btf_trace_sched_process_exit") {
        bail!("the kernel's BTF has no sched_process_exit tracepoint");
    }
    let ringbuf = btf
        .enum_values("bpf_map_type")
        .is_some_and(|e| e.iter().any(|(n, _)| n == "BPF_MAP_TYPE_RINGBUF"));
    if !ringbuf {
        bail!("the kernel has no BPF ring buffer (Linux 5.8+)");
    }
    Ok(())
}

/// Why loading failed, in terms a user can act on.
fn load_error(e: anyhow::Error) -> anyhow::Error {
    let denied = e
        .chain()
        .filter_map(|c| c.downcast_ref::<libbpf_rs::Error>())
        .any(|c| c.kind() == ErrorKind::PermissionDenied);
    if denied {
        anyhow!(
            "not permitted to load a tracing BPF program: needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN ({e:#})"
        )
    } else {
        e.context("cannot load the exit program")
    }
}

/// The thread: loads and attaches (the libbpf object lives on this
/// thread), reports readiness, then drains until told to stop.
fn drain(
    logger: slog::Logger,
    sink: Arc<Mutex<procfs::PidMap>>,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<()>>,
) {
    let loaded = bstats_bpf::load(skel::ExitstatsSkelBuilder::default(), None, |_| Ok(()))
        .map_err(load_error)
        .and_then(|obj| {
            let link = bstats_bpf::prog(obj.object(), "on_exit")?
                .attach()
                .context("cannot attach to tp_btf/sched_process_exit")?;
            let bss = MapView::<Bss>::new(&bstats_bpf::map(obj.object(), ".bss")?)?;
            Ok((obj, link, bss))
        });
    let (obj, _link, bss) = match loaded {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let events = match bstats_bpf::map(obj.object(), "events") {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut builder = RingBufferBuilder::new();
    let added = builder.add(&events, move |bytes: &[u8]| {
        if let Some(e) = bstats_bpf::read::<Event>(bytes) {
            let info = pid_info(&e);
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(e.pid, info);
        }
        0
    });
    let ringbuf = match added.map(|_| ()).and_then(|()| builder.build()) {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(anyhow!("cannot open the ring buffer: {e}")));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    let mut lost_reported = 0;
    let mut last_report: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        if let Err(e) = ringbuf.poll(POLL) {
            // A signal for the process may land on this thread.
            if e.kind() != ErrorKind::Interrupted {
                warn!(logger, "exitstats: stopped, polling failed: {}", e);
                return;
            }
        }
        let lost = bss.get(0).dropped;
        if lost > lost_reported && last_report.is_none_or(|t| t.elapsed() >= LOST_REPORT) {
            warn!(
                logger,
                "exitstats: {} process exits lost (ring buffer full)",
                lost - lost_reported
            );
            lost_reported = lost;
            last_report = Some(Instant::now());
        }
    }
}

/// "/a/b" from leaf-first names; "?" (as below shows an unknown cgroup)
/// when the path did not fit the event.
fn cgroup_path(e: &Event) -> String {
    if e.flags.0 & exit_flags::EXIT_CGROUP_TRUNCATED.0 != 0 {
        return "?".to_owned();
    }
    let levels = (e.cgroup_levels as usize).min(e.cgroup_names.len());
    let mut path: String = e.cgroup_names[..levels]
        .iter()
        .rev()
        .map(|n| format!("/{}", c_string(&n.name)))
        .collect();
    if path.is_empty() {
        path.push('/');
    }
    path
}

/// What /proc/PID/{stat,io,cgroup} would have said as the process ended.
/// Memory (its mm is gone by now), cmdline and exe are unknown.
fn pid_info(e: &Event) -> procfs::PidInfo {
    // One split: the process is gone, no later one to stay above.
    let (user_ns, system_ns) = bstats_bpf::cputime_adjust(
        e.usage.runtime_ns,
        e.usage.utime_ns,
        e.usage.stime_ns,
        (0, 0),
    );
    let has_io = e.flags.0 & exit_flags::EXIT_HAS_IO.0 != 0;
    procfs::PidInfo {
        stat: procfs::PidStat {
            pid: Some(e.pid),
            comm: Some(c_string(&e.comm)),
            state: Some(procfs::PidState::Dead),
            ppid: Some(e.ppid),
            pgrp: Some(e.pgrp),
            session: Some(e.sid),
            minflt: Some(e.usage.min_flt),
            majflt: Some(e.usage.maj_flt),
            user_usecs: Some(user_ns / 1000),
            system_usecs: Some(system_ns / 1000),
            num_threads: Some(e.nr_threads as u64),
            running_secs: Some(e.age_ns / 1_000_000_000),
            rss_bytes: None,
            processor: Some(e.cpu),
        },
        io: procfs::PidIo {
            rbytes: has_io.then_some(e.usage.read_bytes),
            wbytes: has_io.then_some(e.usage.write_bytes),
        },
        cgroup: cgroup_path(e),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::skel::types::task_usage;
    use super::*;

    fn name(s: &str) -> [std::ffi::c_char; 64] {
        let mut n = [0; 64];
        for (d, b) in n.iter_mut().zip(s.bytes()) {
            *d = b as std::ffi::c_char;
        }
        n
    }

    #[test]
    fn converts_an_event() {
        let mut e = Event {
            pid: 42,
            ppid: 1,
            usage: task_usage {
                utime_ns: 1,
                stime_ns: 1,
                runtime_ns: 300_000_000,
                read_bytes: 4096,
                ..Default::default()
            },
            age_ns: 2_500_000_000,
            flags: exit_flags::EXIT_HAS_IO,
            cgroup_levels: 2,
            ..Default::default()
        };
        e.comm[..4].copy_from_slice(&name("burn")[..4]);
        e.cgroup_names[0].name = name("leaf.scope");
        e.cgroup_names[1].name = name("system.slice");
        let p = pid_info(&e);
        assert_eq!(p.stat.pid, Some(42));
        assert_eq!(p.stat.comm.as_deref(), Some("burn"));
        assert_eq!(p.stat.state, Some(procfs::PidState::Dead));
        assert_eq!(p.stat.user_usecs, Some(150_000));
        assert_eq!(p.stat.system_usecs, Some(150_000));
        assert_eq!(p.stat.running_secs, Some(2));
        assert_eq!(p.io.rbytes, Some(4096));
        assert_eq!(p.cgroup, "/system.slice/leaf.scope");

        e.cgroup_levels = 0;
        e.flags = exit_flags(0);
        let p = pid_info(&e);
        assert_eq!(p.cgroup, "/");
        assert_eq!(p.io.rbytes, None);

        e.flags = exit_flags::EXIT_CGROUP_TRUNCATED;
        assert_eq!(pid_info(&e).cgroup, "?");
    }
}
