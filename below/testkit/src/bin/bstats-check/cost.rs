//! Checks 5 and 6: syscalls and CPU per sample.

use std::time::Instant;

use anyhow::bail;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::CgroupCollector;
use bstats_collector::StatFile;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use bstats_testkit::SyscallCounter;

use crate::cgroup_root;
use crate::options;

/// This thread's syscalls: all, and openat.
struct Counters {
    all: SyscallCounter,
    opens: SyscallCounter,
}

impl Counters {
    fn new() -> Result<Self> {
        Ok(Counters {
            all: SyscallCounter::new("raw_syscalls/sys_enter")?,
            opens: SyscallCounter::new("syscalls/sys_enter_openat")?,
        })
    }

    /// (syscalls, openats) made by `f`: the first read's entry is already
    /// counted, the other three reads are subtracted.
    fn count(&self, f: impl FnOnce()) -> Result<(u64, u64)> {
        let (a0, o0) = (self.all.read()?, self.opens.read()?);
        f();
        let (o1, a1) = (self.opens.read()?, self.all.read()?);
        Ok((a1 - a0 - 3, o1 - o0))
    }
}

/// A BPF sample with the default files (memory.numa_stat
/// included) opens nothing and makes as many syscalls with 200 cgroups as
/// with 10.
pub fn syscalls() -> Result<()> {
    let counter = Counters::new()?;
    let root = cgroup_root()?;
    let mut results = Vec::new();
    for n in [10, 200] {
        let mut t = Fixture::new(&root, "syscalls", Controllers::All)?;
        for i in 0..n - 1 {
            t.mkdir(format!("c{i}"))?;
        }
        let mut c = CgroupCollector::new(&options(&root, BackendChoice::Bpf))?;
        if !c.wanted().contains(StatFile::MemoryNumaStat) {
            bail!("memory.numa_stat is not among the default files");
        }
        c.collect(); // first sample opens the root's kept files
        let mut nodes = 0;
        let (calls, opens) = counter.count(|| nodes = c.collect().nodes.len())?;
        println!(
            "syscalls: {nodes} cgroups, {} files: {calls} syscalls, {opens} opens per BPF sample",
            c.wanted().iter().count()
        );
        results.push((calls, opens));
    }
    if results[0] != results[1] || results[0].1 != 0 {
        bail!("syscalls per sample are not constant / files were opened: {results:?}");
    }
    println!("syscalls: OK");
    Ok(())
}

/// CPU (user+sys) per sample at `n` cgroups: BPF pass, BPF pass +
/// tree build, plain read.
pub fn bench(n: usize, samples: u32) -> Result<()> {
    let root = cgroup_root()?;
    let mut t = Fixture::new(&root, "bench", Controllers::All)?;
    let per = 100;
    for a in 0..n.div_ceil(per) {
        let mid = t.mkdir(format!("g{a}"))?;
        t.enable_controllers(&mid)?;
        for b in 0..per.min(n - a * per) - usize::from(a == 0) {
            t.mkdir(format!("g{a}/c{b}"))?;
        }
    }
    let per_sample = |label: &str, f: &mut dyn FnMut() -> usize| {
        let nodes = f(); // warm up
        let t0 = bstats_bpf::process_cpu_time();
        let w0 = Instant::now();
        for _ in 0..samples {
            f();
        }
        let cpu = (bstats_bpf::process_cpu_time() - t0) / samples;
        let wall = w0.elapsed() / samples;
        println!("bench: {label:<28} {nodes:>5} cgroups  cpu {cpu:>10.3?}/sample  wall {wall:>10.3?}/sample");
    };
    let mut bpf = CgroupCollector::new(&options(&root, BackendChoice::Bpf))?;
    per_sample("bpf pass only", &mut || {
        bpf.bpf_pass().expect("bpf planned").expect("pass") as usize
    });
    per_sample("bpf pass + tree build", &mut || bpf.collect().nodes.len());
    let mut read = CgroupCollector::new(&options(&root, BackendChoice::Read))?;
    per_sample("read (same files)", &mut || read.collect().nodes.len());
    drop(t);
    Ok(())
}
