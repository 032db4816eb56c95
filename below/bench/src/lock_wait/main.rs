//! cgroup-lock-wait: how long tasks waited for contended mutexes, for
//! `cgroup_mutex` (every cgroup mkdir, rmdir and cgroup.procs write takes
//! it) apart, and who held the mutex when each wait began
//! (lock_wait.bpf.c). Runs until SIGINT/SIGTERM or `--secs`, then prints
//! one `key=value` line per lock and holder, e.g.
//!
//! `lockwait lock=cgroup_mutex holder=recorder waits=N total_ms=X max_ms=Y over_16ms=K`
//!
//! for the fleet benchmark (tests/bench/fleet-guest.sh) to put beside
//! the prober's latency.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::Result;
use bstats_bpf::MapView;
use bstats_bpf::Pod;
use clap::Parser;
use libbpf_rs::skel::Skel;
use nix::sys::signal::signal;
use nix::sys::signal::SigHandler;
use nix::sys::signal::Signal;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/lock_wait.skel.rs"));
}

use skel::types::bss as Bss;
use skel::types::holder;
use skel::types::lock_kind;
use skel::types::rodata as Rodata;
use skel::types::wait_stats;

// SAFETY: the skeleton's #[repr(C)] data sections: integers and arrays.
unsafe impl Pod for Bss {}
// SAFETY: as above.
unsafe impl Pod for Rodata {}

const PROGS: [&str; 2] = ["contended", "acquired"];

#[derive(Parser, Debug)]
#[command(
    name = "cgroup-lock-wait",
    about = "Waits of cgroup operations for cgroup_mutex, by who held it"
)]
struct Args {
    /// The recorder's process id: waits behind its threads are booked to
    /// holder=recorder (0: no recorder)
    #[arg(long, default_value_t = 0)]
    tgid: u32,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM)
    #[arg(long)]
    secs: Option<f64>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The contract's classes with the names printed.
const LOCKS: [(lock_kind, &str); 2] = [
    (lock_kind::LOCK_CGROUP_MUTEX, "cgroup_mutex"),
    (lock_kind::LOCK_OTHER_MUTEX, "other_mutex"),
];
const HOLDERS: [(holder, &str); 3] = [
    (holder::HOLDER_RECORDER, "recorder"),
    (holder::HOLDER_KERNEL, "kernel"),
    (holder::HOLDER_OTHER, "other"),
];

/// `cgroup_mutex`'s address: a data symbol, in kallsyms only with
/// CONFIG_KALLSYMS_ALL (and shown only to root).
fn cgroup_mutex_addr() -> Result<Option<u64>> {
    let syms =
        std::fs::read_to_string("/proc/kallsyms").context("Failed to read /proc/kallsyms")?;
    Ok(syms.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let addr = u64::from_str_radix(f.next()?, 16).ok()?;
        (f.nth(1)? == "cgroup_mutex" && addr != 0).then_some(addr)
    }))
}

fn line(lock: &str, name: &str, s: &wait_stats) -> String {
    // Bucket n holds waits under 2^n us: from [15] on, 16.4 ms or more.
    let over: u64 = s.buckets[15..].iter().sum();
    format!(
        "lockwait lock={lock} holder={name} waits={} total_ms={:.3} max_ms={:.3} over_16ms={over}",
        s.waits,
        s.total_ns as f64 / 1e6,
        s.max_ns as f64 / 1e6,
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal(sig, SigHandler::Handler(on_signal)) }
            .context("Failed to install a signal handler")?;
    }
    let mutex = cgroup_mutex_addr()?;
    let object = bstats_bpf::load(skel::LockWaitSkelBuilder::default(), None, |open| {
        bstats_bpf::set_data(open, ".rodata", |r: &mut Rodata| {
            r.recorder_tgid = args.tgid;
            r.cgroup_mutex_addr = mutex.unwrap_or(0);
        })
    })
    .context(
        "the kernel refused the mutex wait tracer (tp_btf/contention_begin, contention_end)",
    )?;
    let _links = PROGS
        .iter()
        .map(|p| {
            bstats_bpf::prog(object.object(), p)?
                .attach()
                .with_context(|| format!("cannot attach {p}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let bss = MapView::<Bss>::new(&bstats_bpf::map(object.object(), ".bss")?)?;
    // For a script to wait on before its window starts.
    println!("lockwait attached");
    let t0 = Instant::now();
    let end = args.secs.map(Duration::from_secs_f64);
    while !STOP.load(Ordering::SeqCst) && end.is_none_or(|e| t0.elapsed() < e) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = bss.get(0).stats;
    println!(
        "lockwait seconds={:.1} cgroup_mutex={}",
        t0.elapsed().as_secs_f64(),
        if mutex.is_some() {
            "known"
        } else {
            "unknown (not in /proc/kallsyms without CONFIG_KALLSYMS_ALL: its waits are among other_mutex)"
        }
    );
    for (l, lock) in LOCKS {
        for (h, name) in HOLDERS {
            println!("{}", line(lock, name, &stats[l.0 as usize][h.0 as usize]));
        }
    }
    Ok(())
}
