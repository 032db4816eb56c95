//! Loading the iterator and reading what it wrote: every unsafe block of
//! the BPF backend (the libbpf object's lifetime, the mmapped records and
//! .bss, the iterator fd) is here.

use std::ffi::CString;
use std::fs::File;
use std::io::ErrorKind;
use std::io::Read;
use std::mem::ManuallyDrop;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Mutex;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use libbpf_rs::skel::OpenSkel;
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::CgroupIterOpts;
use libbpf_rs::CgroupIterOrder;
use libbpf_rs::IterOpts;
use libbpf_rs::Link;
use libbpf_rs::MapCore;
use libbpf_rs::OpenObject;
use libbpf_rs::PrintLevel;

use super::contract::skel;
use super::contract::Record;
use super::contract::CPU_WORDS;
use super::contract::FEAT_PSI_CLOCK;
use super::kernel::Limits;
use super::psi::PsiClock;
use skel::CgroupStatsSkel;
use skel::CgroupStatsSkelBuilder;

/// libbpf's messages during a load, to explain a failure in the plan.
static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn keep_libbpf_message(_: PrintLevel, msg: String) {
    let mut log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() < 64 {
        log.push(msg.trim_end().to_owned());
    }
}

/// Why a load failed, from libbpf's messages: the verifier's verdict (the
/// log lines before "processed N insns") when there is one, else libbpf's
/// last message.
fn load_failure(log: &[String]) -> String {
    let verifier = log
        .iter()
        .flat_map(|m| m.lines())
        .take_while(|l| !l.starts_with("processed "))
        .filter(|l| !l.trim().is_empty() && !l.contains("END PROG LOAD LOG"));
    let tail: Vec<&str> = verifier.collect();
    let has_log = log.iter().any(|m| m.contains("BEGIN PROG LOAD LOG"));
    match (has_log, tail.len()) {
        (true, n) if n >= 2 => tail[n - 2..].join(" / "),
        _ => log.last().cloned().unwrap_or_default(),
    }
}

/// The size of a page, for mappings and page counters.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

/// A shared mapping of the records map (user space writes `want`).
struct Mapping {
    ptr: NonNull<Record>,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd, records: u32) -> Result<Self> {
        let page = page_size() as usize;
        let len = (std::mem::size_of::<Record>() * records as usize).next_multiple_of(page);
        // SAFETY: a fresh shared mapping of an mmapable map fd.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("Failed to mmap the records map");
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).context("mmap returned NULL")?,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no references
        // outlive `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A loaded and attached iterator with room for `capacity` records.
pub(crate) struct Loaded {
    link: ManuallyDrop<Link>,
    skel: ManuallyDrop<CgroupStatsSkel<'static>>,
    /// Owns the libbpf object the skeleton borrows; freed after it.
    storage: NonNull<MaybeUninit<OpenObject>>,
    records: Mapping,
    bss: NonNull<skel::types::bss>,
    capacity: u32,
    limits: Limits,
    /// BTF to relocate against instead of the running kernel's (tests).
    btf: Option<PathBuf>,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the link and the skeleton are dropped once, here, before
        // the storage they borrow, which came from Box::into_raw.
        unsafe {
            ManuallyDrop::drop(&mut self.link);
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage.as_ptr()));
        }
    }
}

/// Records room at the first load; the map grows when a pass needs more.
const FIRST_CAPACITY: u32 = 256;

impl Loaded {
    /// The first load, with libbpf's messages kept to explain a failure.
    /// `btf`: CO-RE relocations against this BTF file, not the kernel's.
    pub(crate) fn first(root: BorrowedFd, ids: Limits, btf: Option<&Path>) -> Result<Self> {
        LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let old = libbpf_rs::set_print(Some((PrintLevel::Warn, keep_libbpf_message)));
        let loaded = Self::new(root, FIRST_CAPACITY, ids, btf.map(Path::to_path_buf));
        libbpf_rs::set_print(old);
        loaded
    }

    fn new(root: BorrowedFd, capacity: u32, ids: Limits, btf: Option<PathBuf>) -> Result<Self> {
        let storage = NonNull::from(Box::leak(Box::new(MaybeUninit::<OpenObject>::uninit())));
        let loaded = Self::load(root, capacity, ids, btf, storage);
        if loaded.is_err() {
            // SAFETY: nothing borrows the storage once loading failed.
            drop(unsafe { Box::from_raw(storage.as_ptr()) });
        }
        loaded
    }

    fn load(
        root: BorrowedFd,
        capacity: u32,
        ids: Limits,
        btf: Option<PathBuf>,
        storage: NonNull<MaybeUninit<OpenObject>>,
    ) -> Result<Self> {
        // SAFETY: `storage` lives until `Loaded::drop`, which drops the
        // skeleton first; the 'static borrow never escapes `Loaded`.
        let storage_ref: &'static mut MaybeUninit<OpenObject> = unsafe { &mut *storage.as_ptr() };
        let builder = CgroupStatsSkelBuilder::default();
        let mut open = match &btf {
            None => builder.open(storage_ref),
            Some(path) => {
                // libbpf copies the path during the open.
                let path = CString::new(path.as_os_str().as_bytes())
                    .context("BTF path with a NUL byte")?;
                let opts = libbpf_rs::libbpf_sys::bpf_object_open_opts {
                    sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_object_open_opts>() as _,
                    btf_custom_path: path.as_ptr(),
                    ..Default::default()
                };
                builder.open_opts(opts, storage_ref)
            }
        }
        .context("Failed to open the BPF object")?;
        open.maps
            .records
            .set_max_entries(capacity)
            .context("Failed to size the records map")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("The BPF object has no .rodata")?;
        rodata.cpumask_bytes = (ids.cpus.div_ceil(64) * 8).min(CPU_WORDS * 8) as u32;
        rodata.nr_cpus = ids.cpus as u32;
        rodata.kfuncs = ids.kfuncs;
        if let Some(layout) = ids.numa {
            rodata.numa_node_ids = ids.nodes as u32;
            rodata.numa_idx = layout;
        }
        let mut skel = open.load().map_err(|e| {
            let log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
            anyhow!("{e} ({})", load_failure(&log))
        })?;
        let mut opts = CgroupIterOpts::from_fd(root);
        // The kernel rejects order 0 (libbpf-rs's Default).
        opts.order = CgroupIterOrder::DescendantsPre;
        let link = skel
            .progs
            .cgroup_stats
            .attach_iter_with_opts(IterOpts::Cgroup(opts))
            .context("Failed to attach the cgroup iterator")?;
        let value_size = skel.maps.records.value_size() as usize;
        if value_size != std::mem::size_of::<Record>() {
            bail!(
                "record size mismatch: BPF {} bytes, Rust {}",
                value_size,
                std::mem::size_of::<Record>()
            );
        }
        let records = Mapping::new(skel.maps.records.as_fd(), capacity)?;
        let bss = skel
            .maps
            .bss_data
            .as_deref_mut()
            .map(NonNull::from)
            .context("The BPF object has no mmapped .bss")?;
        Ok(Loaded {
            link: ManuallyDrop::new(link),
            skel: ManuallyDrop::new(skel),
            storage,
            records,
            bss,
            capacity,
            limits: ids,
            btf,
        })
    }

    /// Runs one pass of `mode` (PASS_*; `rank_groups`: HAS_* bits a RANK
    /// pass reads).
    pub(crate) fn run(&mut self, mode: usize, rank_groups: u32) -> Result<Pass> {
        // SAFETY: the .bss mapping lives as long as the skeleton and no
        // pass runs now: the program reads these during the read(2) below.
        unsafe {
            let bss = self.bss.as_ptr();
            std::ptr::addr_of_mut!((*bss).pass_mode).write_volatile(mode as u32);
            std::ptr::addr_of_mut!((*bss).rank_groups).write_volatile(rank_groups);
        }
        let fd = self.link.as_fd().as_raw_fd();
        // SAFETY: BPF_ITER_CREATE on our iterator link; the new fd is ours.
        let it = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(fd) };
        if it < 0 {
            return Err(std::io::Error::last_os_error()).context("BPF_ITER_CREATE failed");
        }
        // SAFETY: freshly created, owned here.
        let mut it = File::from(unsafe { OwnedFd::from_raw_fd(it) });
        // The program prints nothing, so one read walks the whole tree and
        // returns 0; a 0-byte buffer would stop after the first cgroup.
        let mut buf = [0u8; 8];
        loop {
            match it.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("Reading the cgroup iterator failed"),
            }
        }
        drop(it);
        // SAFETY: the .bss mapping lives as long as the skeleton; the
        // kernel wrote it during read(2), which has returned.
        let bss = unsafe { std::ptr::read_volatile(self.bss.as_ptr()) };
        Ok(Pass {
            cgroups: bss.nr_cgroups,
            features: bss.features,
            facts: bss.facts,
            memory_nodes: bss.memory_nodes,
            moved: bss.moved != 0,
            psi_clock: (bss.features & FEAT_PSI_CLOCK != 0).then_some(PsiClock {
                now: bss.psi_now,
                period: bss.psi_period_ns,
            }),
            psi_no_clock: bss.psi_no_clock as usize,
        })
    }

    /// One pass of `mode` over every cgroup under `root` (the root it was
    /// loaded with): with more cgroups than room, the map grows (a new
    /// load) and the pass runs again.
    pub(crate) fn run_all(
        &mut self,
        root: BorrowedFd,
        mode: usize,
        rank_groups: u32,
    ) -> Result<Pass> {
        loop {
            let pass = self.run(mode, rank_groups)?;
            if pass.cgroups <= self.capacity {
                return Ok(pass);
            }
            let cap = pass.cgroups.saturating_mul(2).next_power_of_two();
            *self = Loaded::new(root, cap, self.limits, self.btf.clone())
                .with_context(|| format!("cannot grow the records map to {cap} cgroups"))?;
        }
    }

    /// What the program was loaded with.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn records(&self, n: u32) -> &[Record] {
        // SAFETY: the mapping holds `capacity` records, the kernel wrote
        // the first `n` during the last run, and no run happens while the
        // slice (borrowing self) is alive.
        unsafe {
            std::slice::from_raw_parts(self.records.ptr.as_ptr(), n.min(self.capacity) as usize)
        }
    }

    /// As [`Loaded::records`], to set `want` before a WANTED pass.
    pub(crate) fn records_mut(&mut self, n: u32) -> &mut [Record] {
        // SAFETY: as in `records`; the mutable borrow of self keeps any
        // other slice and any run out while this one is alive.
        unsafe {
            std::slice::from_raw_parts_mut(self.records.ptr.as_ptr(), n.min(self.capacity) as usize)
        }
    }
}

/// What one pass reports besides the records.
pub(crate) struct Pass {
    /// Cgroups visited; may exceed the map's capacity.
    pub(crate) cgroups: u32,
    /// FEAT_* bits.
    pub(crate) features: u32,
    /// Bit i: the kernel has KERNEL_FACTS[i].
    pub(crate) facts: u64,
    /// The nodes memory.numa_stat prints (N_MEMORY).
    pub(crate) memory_nodes: u64,
    /// A WANTED pass found the tree changed since the RANK pass.
    pub(crate) moved: bool,
    /// The clocks pressure averages are brought to (FEAT_PSI_CLOCK).
    pub(crate) psi_clock: Option<PsiClock>,
    /// Why there is none (PSI_*).
    pub(crate) psi_no_clock: usize,
}
