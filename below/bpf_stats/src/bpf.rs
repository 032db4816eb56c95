//! The BPF backend: one sleepable cgroup iterator pass per sample writes a
//! fixed-size record per cgroup into an mmapped array map; the tree and
//! the samples are built from those records with no readdir and no text.
//!
//! What BPF cannot serve is read as text for that file only: from kept fds
//! (pread at offset 0) for the root's cpu.stat and pressure, and through
//! [`PlainReader::read_cgroup`] on a dir opened relative to the root fd for
//! files the plan gives to plain read.
//!
//! Pressure: BPF reads `psi_group.total`/`avg` as the kernel last
//! aggregated them (its averaging work runs every 2 s while the group is
//! active; a text read aggregates first). We accept that lag rather than
//! read text: below uses avg10, and totals lag at most one period.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::ffi::CStr;
use std::ffi::OsStr;
use std::mem::ManuallyDrop;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Mutex;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use cgroupfs::CgroupStat;
use cgroupfs::CpuMax;
use cgroupfs::CpuStat;
use cgroupfs::Cpuset;
use cgroupfs::MemNodes;
use cgroupfs::MemoryEvents;
use cgroupfs::MemoryEventsLocal;
use cgroupfs::MemoryNumaStat;
use cgroupfs::MemoryStat;
use cgroupfs::PressureMetrics;
use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;
use libbpf_rs::btf::BtfKind;
use libbpf_rs::btf::BtfType;
use libbpf_rs::skel::OpenSkel;
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::CgroupIterOpts;
use libbpf_rs::CgroupIterOrder;
use libbpf_rs::IterOpts;
use libbpf_rs::Link;
use libbpf_rs::MapCore;
use libbpf_rs::OpenObject;
use libbpf_rs::PrintLevel;
use model::CgroupSample;
use nix::errno::Errno;
use regex::Regex;

use crate::parse;
use crate::plan::Support;
use crate::read::apply;
use crate::read::PressureParts;
use crate::read::Walker;
use crate::FileError;
use crate::FileSet;
use crate::Node;
use crate::Snapshot;
use crate::StatFile;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/cgroup_stats.skel.rs"));
}

use skel::types::record as Record;
use skel::CgroupStatsSkel;
use skel::CgroupStatsSkelBuilder;

// Mirrors of cgroup_stats.h (#defines are not in BTF).
const ABSENT: u64 = u64::MAX;
const HAS_MEMCG: u32 = 1 << 0;
const HAS_MEMSTAT: u32 = 1 << 1;
const HAS_CPU: u32 = 1 << 2;
const HAS_PIDS: u32 = 1 << 3;
const HAS_CPUSET: u32 = 1 << 4;
const HAS_PSI: u32 = 1 << 5;
const HAS_BSTAT: u32 = 1 << 6;
const HAS_NUMA: u32 = 1 << 7;
const FEAT_CPU_FLUSH: u32 = 1 << 0;
const FEAT_MEMCG_KFUNCS: u32 = 1 << 1;
const FEAT_PSI: u32 = 1 << 2;
const FEAT_NUMA: u32 = 1 << 5;
const CPU_WORDS: usize = 8;
const NUMA_NODES: usize = 8;
const NUMA_NO_IDX: u32 = u32::MAX;

/// CTRL_* bit order of cgroup_stats.h.
const CONTROLLERS: [&str; 9] = [
    "cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc", "dmem",
];

/// memory.stat keys in `enum memstat_slot` order.
const MEMSTAT_KEYS: [&str; 38] = [
    "anon",
    "file",
    "kernel",
    "kernel_stack",
    "slab",
    "sock",
    "shmem",
    "zswap",
    "zswapped",
    "file_mapped",
    "file_dirty",
    "file_writeback",
    "anon_thp",
    "inactive_anon",
    "active_anon",
    "inactive_file",
    "active_file",
    "unevictable",
    "slab_reclaimable",
    "slab_unreclaimable",
    "pgfault",
    "pgmajfault",
    "workingset_refault_anon",
    "workingset_refault_file",
    "workingset_activate_anon",
    "workingset_activate_file",
    "workingset_restore_anon",
    "workingset_restore_file",
    "workingset_nodereclaim",
    "pgrefill",
    "pgscan",
    "pgsteal",
    "pgactivate",
    "pgdeactivate",
    "pglazyfree",
    "pglazyfreed",
    "thp_fault_alloc",
    "thp_collapse_alloc",
];

/// mm/memcontrol.c `memcg_node_stat_items[]`, the order of
/// `lruvec_stats.state[]`. The entries under #ifdef (NR_SWAPCACHE,
/// PGPROMOTE_SUCCESS, NR_HUGETLB) are missing from `enum node_stat_item`
/// too when configured out, so BTF tells which ones a kernel has.
const MEMCG_NODE_STAT_ITEMS: [&str; 50] = [
    "NR_INACTIVE_ANON",
    "NR_ACTIVE_ANON",
    "NR_INACTIVE_FILE",
    "NR_ACTIVE_FILE",
    "NR_UNEVICTABLE",
    "NR_SLAB_RECLAIMABLE_B",
    "NR_SLAB_UNRECLAIMABLE_B",
    "WORKINGSET_REFAULT_ANON",
    "WORKINGSET_REFAULT_FILE",
    "WORKINGSET_ACTIVATE_ANON",
    "WORKINGSET_ACTIVATE_FILE",
    "WORKINGSET_RESTORE_ANON",
    "WORKINGSET_RESTORE_FILE",
    "WORKINGSET_NODERECLAIM",
    "NR_ANON_MAPPED",
    "NR_FILE_MAPPED",
    "NR_FILE_PAGES",
    "NR_FILE_DIRTY",
    "NR_WRITEBACK",
    "NR_SHMEM",
    "NR_SHMEM_THPS",
    "NR_FILE_THPS",
    "NR_ANON_THPS",
    "NR_VMSCAN_WRITE",
    "NR_VMALLOC",
    "NR_KERNEL_STACK_KB",
    "NR_PAGETABLE",
    "NR_SECONDARY_PAGETABLE",
    "NR_SWAPCACHE",
    "PGPROMOTE_SUCCESS",
    "PGDEMOTE_KSWAPD",
    "PGDEMOTE_DIRECT",
    "PGDEMOTE_KHUGEPAGED",
    "PGDEMOTE_PROACTIVE",
    "PGSTEAL_KSWAPD",
    "PGSTEAL_DIRECT",
    "PGSTEAL_KHUGEPAGED",
    "PGSTEAL_PROACTIVE",
    "PGSTEAL_ANON",
    "PGSTEAL_FILE",
    "PGSCAN_KSWAPD",
    "PGSCAN_DIRECT",
    "PGSCAN_KHUGEPAGED",
    "PGSCAN_PROACTIVE",
    "PGSCAN_ANON",
    "PGSCAN_FILE",
    "PGROTATE_ANON",
    "PGROTATE_FILE",
    "PGREFILL",
    "NR_HUGETLB",
];

/// memcg_page_state_output_unit(): what one unit of the raw state is.
#[derive(Clone, Copy)]
enum Unit {
    Page,
    /// Bytes (slab) or plain counts (workingset events).
    One,
    KiB,
}

/// A memory.numa_stat line below keeps: its `node_stat_item`, unit, and
/// the field it fills.
struct NumaItem {
    item: &'static str,
    unit: Unit,
    field: fn(&mut MemoryNumaStat) -> &mut Option<u64>,
}

macro_rules! numa_items {
    ($($field:ident: $item:literal $unit:ident),* $(,)?) => {
        [$(NumaItem {
            item: $item,
            unit: Unit::$unit,
            field: |s| &mut s.$field,
        }),*]
    };
}

/// Printed only with CONFIG_TRANSPARENT_HUGEPAGE; the items exist without.
const THP_ITEMS: [&str; 3] = ["NR_ANON_THPS", "NR_FILE_THPS", "NR_SHMEM_THPS"];

/// In record order (`numa[node][i]`, NR_NUMA_STATS of cgroup_stats.h).
const NUMA_ITEMS: [NumaItem; 26] = numa_items![
    anon: "NR_ANON_MAPPED" Page,
    file: "NR_FILE_PAGES" Page,
    kernel_stack: "NR_KERNEL_STACK_KB" KiB,
    pagetables: "NR_PAGETABLE" Page,
    shmem: "NR_SHMEM" Page,
    file_mapped: "NR_FILE_MAPPED" Page,
    file_dirty: "NR_FILE_DIRTY" Page,
    file_writeback: "NR_WRITEBACK" Page,
    swapcached: "NR_SWAPCACHE" Page,
    anon_thp: "NR_ANON_THPS" Page,
    file_thp: "NR_FILE_THPS" Page,
    shmem_thp: "NR_SHMEM_THPS" Page,
    inactive_anon: "NR_INACTIVE_ANON" Page,
    active_anon: "NR_ACTIVE_ANON" Page,
    inactive_file: "NR_INACTIVE_FILE" Page,
    active_file: "NR_ACTIVE_FILE" Page,
    unevictable: "NR_UNEVICTABLE" Page,
    slab_reclaimable: "NR_SLAB_RECLAIMABLE_B" One,
    slab_unreclaimable: "NR_SLAB_UNRECLAIMABLE_B" One,
    workingset_refault_anon: "WORKINGSET_REFAULT_ANON" One,
    workingset_refault_file: "WORKINGSET_REFAULT_FILE" One,
    workingset_activate_anon: "WORKINGSET_ACTIVATE_ANON" One,
    workingset_activate_file: "WORKINGSET_ACTIVATE_FILE" One,
    workingset_restore_anon: "WORKINGSET_RESTORE_ANON" One,
    workingset_restore_file: "WORKINGSET_RESTORE_FILE" One,
    workingset_nodereclaim: "WORKINGSET_NODERECLAIM" One,
];

/// Per NUMA_ITEMS entry, its index in `lruvec_stats.state[]`, or
/// NUMA_NO_IDX when this kernel does not print the line.
type NumaLayout = [u32; NUMA_ITEMS.len()];

/// Member names of a BTF enum, if the kernel has it.
fn enum_names(btf: &Btf, name: &str) -> Option<Vec<String>> {
    let e = btf.type_by_name::<types::Enum>(name)?;
    Some(
        e.iter()
            .filter_map(|m| Some(m.name?.to_string_lossy().into_owned()))
            .collect(),
    )
}

/// The type of `member` of struct `name`, modifiers and typedefs skipped.
fn member_type<'b>(btf: &'b Btf, name: &str, member: &str) -> Option<BtfType<'b>> {
    let s = btf.type_by_name::<types::Struct>(name)?;
    let m = s.iter().find(|m| m.name == Some(OsStr::new(member)))?;
    Some(btf.type_by_id::<BtfType>(m.ty)?.skip_mods_and_typedefs())
}

/// Where memory_numa_stat_show()'s values are on the running kernel: the
/// position of each item among the memcg_node_stat_items[] it has, which
/// must add up to the length of `lruvec_stats.state[]` in its BTF.
fn numa_layout(btf: &Btf) -> std::result::Result<NumaLayout, String> {
    let items = enum_names(btf, "node_stat_item").ok_or("no enum node_stat_item in BTF")?;
    let present: Vec<&str> = MEMCG_NODE_STAT_ITEMS
        .into_iter()
        .filter(|i| items.iter().any(|n| n == i))
        .collect();
    if member_type(btf, "mem_cgroup_per_node", "lruvec_stats").map(|t| t.kind())
        != Some(BtfKind::Ptr)
    {
        return Err("unknown lruvec_stats layout: not a pointer in mem_cgroup_per_node".into());
    }
    let len = member_type(btf, "lruvec_stats", "state")
        .and_then(|t| types::Array::try_from(t).ok())
        .map(|a| a.capacity())
        .ok_or("unknown lruvec_stats layout: no state[] array in BTF")?;
    if len != present.len() {
        return Err(format!(
            "unknown lruvec_stats layout: {len} items in BTF, {} expected",
            present.len()
        ));
    }
    let thp =
        enum_names(btf, "vm_event_item").is_some_and(|e| e.iter().any(|n| n == "THP_FAULT_ALLOC"));
    Ok(
        NUMA_ITEMS.map(|it| match present.iter().position(|&p| p == it.item) {
            Some(i) if thp || !THP_ITEMS.contains(&it.item) => i as u32,
            _ => NUMA_NO_IDX,
        }),
    )
}

/// `PID_MAX_LIMIT + 1` on 64-bit: pids.max prints "max" at or above it.
const PIDS_MAX: u64 = 4 * 1024 * 1024 + 1;
const RUNTIME_INF: u64 = u64::MAX;
const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
const FIRST_CAPACITY: u32 = 256;

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

/// A read-only shared mapping of the records map.
struct Mapping {
    ptr: NonNull<Record>,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd, records: u32) -> Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = (std::mem::size_of::<Record>() * records as usize).next_multiple_of(page);
        // SAFETY: a fresh shared read-only mapping of an mmapable map fd.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
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
struct Loaded {
    link: ManuallyDrop<Link>,
    skel: ManuallyDrop<CgroupStatsSkel<'static>>,
    /// Owns the libbpf object the skeleton borrows; freed after it.
    storage: NonNull<MaybeUninit<OpenObject>>,
    records: Mapping,
    bss: NonNull<skel::types::bss>,
    capacity: u32,
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

impl Loaded {
    fn new(root: BorrowedFd, capacity: u32, ids: Limits) -> Result<Self> {
        let storage = NonNull::from(Box::leak(Box::new(MaybeUninit::<OpenObject>::uninit())));
        let loaded = Self::load(root, capacity, ids, storage);
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
        storage: NonNull<MaybeUninit<OpenObject>>,
    ) -> Result<Self> {
        // SAFETY: `storage` lives until `Loaded::drop`, which drops the
        // skeleton first; the 'static borrow never escapes `Loaded`.
        let storage_ref: &'static mut MaybeUninit<OpenObject> = unsafe { &mut *storage.as_ptr() };
        let mut open = CgroupStatsSkelBuilder::default()
            .open(storage_ref)
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
        rodata.kfuncs = ids.kfuncs;
        if let Some(layout) = ids.numa {
            rodata.numa_node_ids = ids.nodes as u32;
            rodata.numa_idx = layout;
        }
        let skel = open.load().map_err(|e| {
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
            .as_deref()
            .map(NonNull::from)
            .context("The BPF object has no mmapped .bss")?;
        Ok(Loaded {
            link: ManuallyDrop::new(link),
            skel: ManuallyDrop::new(skel),
            storage,
            records,
            bss,
            capacity,
        })
    }

    /// Runs one pass.
    fn run(&mut self) -> Result<Pass> {
        let fd = self.link.as_fd().as_raw_fd();
        // SAFETY: BPF_ITER_CREATE on our iterator link; the new fd is ours.
        let it = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(fd) };
        if it < 0 {
            return Err(std::io::Error::last_os_error()).context("BPF_ITER_CREATE failed");
        }
        // SAFETY: freshly created, owned here.
        let it = unsafe { OwnedFd::from_raw_fd(it) };
        // The program prints nothing, so one read walks the whole tree and
        // returns 0; a 0-byte buffer would stop after the first cgroup.
        let mut buf = [0u8; 8];
        loop {
            match nix::unistd::read(it.as_raw_fd(), &mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
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
            memory_nodes: bss.memory_nodes,
        })
    }

    fn records(&self, n: u32) -> &[Record] {
        // SAFETY: the mapping holds `capacity` records, the kernel wrote
        // the first `n` during the last run, and no run happens while the
        // slice (borrowing self) is alive.
        unsafe {
            std::slice::from_raw_parts(self.records.ptr.as_ptr(), n.min(self.capacity) as usize)
        }
    }
}

/// What one pass reports besides the records.
struct Pass {
    /// Cgroups visited; may exceed the map's capacity.
    cgroups: u32,
    /// FEAT_* bits.
    features: u32,
    /// The nodes memory.numa_stat prints (N_MEMORY).
    memory_nodes: u64,
}

/// What the program is told at load: nr_cpu_ids and nr_node_ids
/// (cpumask/nodemask bits past them are not the kernel's to show, nor
/// allocated for cpumasks), the KF_* kfuncs the kernel's BTF has, and
/// where memory.numa_stat's values are (None: not served).
#[derive(Clone, Copy)]
struct Limits {
    cpus: usize,
    nodes: usize,
    kfuncs: u32,
    numa: Option<NumaLayout>,
}

// KF_* of cgroup_stats.h.
const KF_CSS_RSTAT_FLUSH: u32 = 1 << 0;
const KF_CGROUP_RSTAT_FLUSH: u32 = 1 << 1;
const KF_MEMCG: u32 = 1 << 2;
const MEMCG_KFUNCS: [&str; 5] = [
    "bpf_get_mem_cgroup",
    "bpf_put_mem_cgroup",
    "bpf_mem_cgroup_page_state",
    "bpf_mem_cgroup_vm_events",
    "bpf_mem_cgroup_flush_stats",
];

/// KF_* bits for the kfuncs the running kernel's BTF declares.
fn kfuncs_in(btf: &libbpf_rs::btf::Btf) -> u32 {
    let has = |name: &str| {
        btf.type_by_name::<libbpf_rs::btf::types::Func>(name)
            .is_some()
    };
    let mut bits = 0;
    if has("css_rstat_flush") {
        bits |= KF_CSS_RSTAT_FLUSH;
    } else if has("cgroup_rstat_flush") {
        bits |= KF_CGROUP_RSTAT_FLUSH;
    }
    if MEMCG_KFUNCS.iter().all(|f| has(f)) {
        bits |= KF_MEMCG;
    }
    bits
}

impl Limits {
    fn of_this_machine(kfuncs: u32, numa: Option<NumaLayout>) -> Self {
        // "0-3,8": the last id + 1.
        let count = |list: &str| {
            std::fs::read_to_string(list)
                .ok()
                .and_then(|s| s.trim().rsplit([',', '-']).next()?.parse::<usize>().ok())
                .map_or(1, |last| last + 1)
        };
        Limits {
            cpus: count("/sys/devices/system/cpu/possible"),
            nodes: count("/sys/devices/system/node/possible"),
            kfuncs,
            numa,
        }
    }
}

/// What probing found: the backend, what it serves, and the files a
/// capable kernel would serve that this one cannot (forcing bpf fails on
/// those).
pub(crate) struct Probe {
    pub capability: crate::Capability,
    pub backend: Option<BpfBackend>,
    pub gaps: Vec<(StatFile, String)>,
}

pub(crate) fn probe(root_fd: BorrowedFd, filter: Option<Regex>) -> Probe {
    let fail = |why: String| Probe {
        capability: Err(why),
        backend: None,
        gaps: Vec::new(),
    };
    if !Path::new(BTF_PATH).exists() {
        return fail(format!("no BTF at {}", BTF_PATH));
    }
    LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let btf = match libbpf_rs::btf::Btf::from_vmlinux() {
        Ok(btf) => btf,
        Err(e) => return fail(format!("cannot read {}: {e}", BTF_PATH)),
    };
    // CONFIG_NUMA: memory.numa_stat exists.
    let has_numa_stat = btf.type_by_name::<types::Enum>("numa_stat_item").is_some();
    let numa_layout = numa_layout(&btf);
    let mut limits = Limits::of_this_machine(kfuncs_in(&btf), None);
    if has_numa_stat && limits.nodes <= NUMA_NODES {
        limits.numa = numa_layout.as_ref().ok().copied();
    }
    drop(btf);
    let old = libbpf_rs::set_print(Some((PrintLevel::Warn, keep_libbpf_message)));
    let loaded = Loaded::new(root_fd, FIRST_CAPACITY, limits);
    libbpf_rs::set_print(old);
    let mut loaded = match loaded {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot load the cgroup iterator: {e:#}")),
    };
    let features = match loaded.run() {
        Ok(pass) => pass.features,
        Err(e) => return fail(format!("the cgroup iterator failed: {e:#}")),
    };

    let mut files = FileSet::all();
    let mut reasons = Vec::new();
    let mut gaps = Vec::new();
    let mut never = |f: StatFile, why: &str, files: &mut FileSet| {
        files.remove(f);
        reasons.push((f, why.to_owned()));
    };
    never(
        StatFile::IoStat,
        "io.stat: BPF cannot flush the io css",
        &mut files,
    );
    if !has_numa_stat {
        never(
            StatFile::MemoryNumaStat,
            "kernel has no memory.numa_stat (CONFIG_NUMA)",
            &mut files,
        );
    } else if limits.nodes > NUMA_NODES {
        never(
            StatFile::MemoryNumaStat,
            &format!("more than {NUMA_NODES} NUMA nodes: a record holds {NUMA_NODES}"),
            &mut files,
        );
    }
    if limits.cpus > CPU_WORDS * 64 {
        never(
            StatFile::CpusetCpus,
            "more CPUs than a record holds",
            &mut files,
        );
        never(
            StatFile::CpusetCpusEffective,
            "more CPUs than a record holds",
            &mut files,
        );
    }
    if limits.nodes > 64 {
        never(
            StatFile::CpusetMems,
            "more nodes than a record holds",
            &mut files,
        );
        never(
            StatFile::CpusetMemsEffective,
            "more nodes than a record holds",
            &mut files,
        );
    }
    // Still in `files`: the kernel has the file and a record holds its nodes.
    let numa_gap = match &numa_layout {
        _ if !files.contains(StatFile::MemoryNumaStat) || features & FEAT_NUMA != 0 => None,
        Err(why) => Some(why.clone()),
        Ok(_) if features & FEAT_MEMCG_KFUNCS == 0 => {
            Some("kernel lacks kfunc bpf_mem_cgroup_flush_stats".to_owned())
        }
        Ok(_) => Some("kernel symbol node_states not in kallsyms".to_owned()),
    };
    let mut gap = |f: StatFile, why: &str| {
        files.remove(f);
        reasons.push((f, why.to_owned()));
        gaps.push((f, why.to_owned()));
    };
    if features & FEAT_MEMCG_KFUNCS == 0 {
        gap(
            StatFile::MemoryStat,
            "kernel lacks kfunc bpf_mem_cgroup_page_state",
        );
    }
    if let Some(why) = numa_gap {
        gap(StatFile::MemoryNumaStat, &why);
    }
    if features & FEAT_CPU_FLUSH == 0 {
        gap(StatFile::CpuStat, "kernel lacks kfunc css_rstat_flush");
    }
    if features & FEAT_PSI == 0 {
        for f in [
            StatFile::CpuPressure,
            StatFile::IoPressure,
            StatFile::MemoryPressure,
        ] {
            gap(f, "kernel has no cgroup PSI (CONFIG_PSI)");
        }
    }
    // Notes on files BPF serves except at the root.
    reasons.push((StatFile::CpuStat, "root cgroup: text".to_owned()));
    for f in [
        StatFile::CpuPressure,
        StatFile::IoPressure,
        StatFile::MemoryPressure,
    ] {
        reasons.push((
            f,
            "root cgroup: text; averages as of the kernel's last update (<= 2 s)".to_owned(),
        ));
    }
    Probe {
        capability: Ok(Support { files, reasons }),
        backend: Some(BpfBackend {
            loaded,
            limits,
            filter,
            root_text: None,
            prev_cputime: HashMap::new(),
            ids: HashMap::new(),
            paths: Vec::new(),
            // SAFETY: sysconf has no preconditions.
            page_size: unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64,
        }),
        gaps,
    }
}

/// The real root's cpu.stat and pressure files, kept open: the kernel
/// fills them from per-CPU and system-wide state BPF does not see.
struct RootText {
    fds: Vec<(StatFile, Option<OwnedFd>)>,
    buf: Vec<u8>,
}

impl RootText {
    fn open(root: BorrowedFd, files: FileSet) -> Self {
        let fds = files
            .iter()
            .map(|f| {
                let fd = nix::fcntl::openat(
                    Some(root.as_raw_fd()),
                    f.path(),
                    nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .ok()
                // SAFETY: freshly opened, owned here.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
                (f, fd)
            })
            .collect();
        RootText {
            fds,
            buf: Vec::with_capacity(4096),
        }
    }

    /// pread from offset 0 regenerates a cgroup file's text: no open.
    fn read<'a>(buf: &'a mut Vec<u8>, fd: &OwnedFd) -> std::io::Result<Option<&'a str>> {
        buf.clear();
        loop {
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(4096);
            }
            let off = buf.len();
            let spare = buf.spare_capacity_mut();
            // SAFETY: reading into spare capacity, then growing the length
            // by exactly what pread(2) wrote.
            let n = unsafe {
                libc::pread(
                    fd.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    off as libc::off_t,
                )
            };
            if n < 0 {
                return match Errno::last() {
                    Errno::EOPNOTSUPP | Errno::ENODEV => Ok(None),
                    Errno::EINTR => continue,
                    e => Err(e.into()),
                };
            }
            if n == 0 {
                break;
            }
            // SAFETY: see above.
            unsafe { buf.set_len(off + n as usize) };
        }
        std::str::from_utf8(buf)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    fn fill(&mut self, s: &mut CgroupSample, errors: &mut Vec<FileError>) {
        let mut pressure = PressureParts::default();
        for (file, fd) in &self.fds {
            let Some(fd) = fd else { continue };
            let error = match Self::read(&mut self.buf, fd) {
                Ok(Some(text)) => match apply(*file, text, s, &mut pressure) {
                    Ok(()) => continue,
                    Err(e) => e.to_string(),
                },
                Ok(None) => continue,
                Err(e) => e.to_string(),
            };
            errors.push(FileError {
                cgroup: String::new(),
                file: *file,
                error,
            });
        }
        pressure.assemble(s, "", errors);
    }
}

pub(crate) struct BpfBackend {
    loaded: Loaded,
    limits: Limits,
    filter: Option<Regex>,
    root_text: Option<RootText>,
    /// Last scaled (utime, stime) per cgroup id, for monotonic user/system.
    prev_cputime: HashMap<u64, (u64, u64)>,
    /// Reused per sample: cgroup id -> node index, node paths.
    ids: HashMap<u64, usize>,
    paths: Vec<String>,
    page_size: u64,
}

impl BpfBackend {
    /// The iterator pass alone; returns the number of cgroups visited.
    pub(crate) fn pass(&mut self) -> Result<u32> {
        self.loaded.run().map(|p| p.cgroups)
    }

    /// One sample: `bpf` files from the records, `text` files read as text
    /// per cgroup (relative to `walker`'s root fd).
    ///
    /// Fails only when the pass cannot run (the caller reads text instead).
    pub(crate) fn collect(
        &mut self,
        walker: &mut Walker,
        bpf: FileSet,
        text: FileSet,
    ) -> Result<Snapshot> {
        let mut snap = Snapshot::default();
        let (n, memory_nodes) = loop {
            let pass = self.loaded.run()?;
            let n = pass.cgroups;
            if n <= self.loaded.capacity {
                break (n, pass.memory_nodes);
            }
            // More cgroups than room: grow, then rerun this sample.
            let cap = n.saturating_mul(2).next_power_of_two();
            self.loaded = Loaded::new(walker.root_fd(), cap, self.limits)
                .with_context(|| format!("cannot grow the records map to {cap} cgroups"))?;
        };

        let need_paths = self.filter.is_some() || !text.is_empty();
        self.ids.clear();
        self.paths.clear();
        let mut prev = std::mem::take(&mut self.prev_cputime);
        let records = self.loaded.records(n);
        for (i, r) in records.iter().enumerate() {
            let parent = if i == 0 {
                None
            } else {
                // Parent skipped by the filter (or not seen): skip too.
                match self.ids.get(&r.parent_id) {
                    Some(&p) => Some(p),
                    None => continue,
                }
            };
            let name = if i == 0 {
                String::new()
            } else {
                // SAFETY: probe_read_str NUL-terminates within the array.
                let c = unsafe { CStr::from_ptr(r.name.as_ptr()) };
                c.to_string_lossy().into_owned()
            };
            let path = match parent {
                Some(p) if need_paths => {
                    let pp = &self.paths[p];
                    if pp.is_empty() {
                        name.clone()
                    } else {
                        format!("{pp}/{name}")
                    }
                }
                _ => String::new(),
            };
            if parent.is_some() && self.filter.as_ref().is_some_and(|re| re.is_match(&path)) {
                continue;
            }
            let idx = snap.nodes.len();
            self.ids.insert(r.id, idx);
            if need_paths {
                self.paths.push(path);
            }
            let mut sample = self.sample_of(r, bpf, &mut prev, memory_nodes);
            if r.level == 0 {
                let root_text = self
                    .root_text
                    .get_or_insert_with(|| RootText::open(walker.root_fd(), root_text_files(bpf)));
                root_text.fill(&mut sample, &mut snap.errors);
            }
            if !text.is_empty() {
                walker.read_at(&self.paths[idx], text, &mut sample, &mut snap.errors);
            }
            snap.nodes.push(Node {
                parent,
                name,
                sample,
            });
        }
        // Keep cputime history only for cgroups that still exist.
        prev.retain(|id, _| self.ids.contains_key(id));
        self.prev_cputime = prev;
        Ok(snap)
    }

    fn sample_of(
        &self,
        r: &Record,
        files: FileSet,
        prev: &mut HashMap<u64, (u64, u64)>,
        memory_nodes: u64,
    ) -> CgroupSample {
        let want = |f| files.contains(f);
        let root = r.level == 0;
        let page = self.page_size;
        let mut s = CgroupSample {
            inode_number: Some(r.id as i64),
            ..Default::default()
        };
        if want(StatFile::CgroupStat) {
            s.cgroup_stat = Some(CgroupStat {
                nr_descendants: Some(r.nr_descendants),
                nr_dying_descendants: Some(r.nr_dying_descendants),
            });
        }
        if want(StatFile::CgroupControllers) {
            s.cgroup_controllers = Some(controller_names(r.controllers));
        }
        if want(StatFile::CgroupSubtreeControl) {
            s.cgroup_subtree_control = Some(controller_names(r.subtree_control));
        }
        if want(StatFile::CpuStat) && !root && r.flags & HAS_BSTAT != 0 {
            s.cpu_stat = Some(self.cpu_stat(r, prev));
        }
        if want(StatFile::CpuPressure) && !root && r.flags & HAS_PSI != 0 {
            s.pressure = Some(pressure(r));
        }
        if !root && r.flags & HAS_PIDS != 0 {
            if want(StatFile::PidsCurrent) {
                s.tids_current = Some(r.pids_current);
            }
            if want(StatFile::PidsMax) {
                s.tids_max = Some(if r.pids_limit >= PIDS_MAX {
                    -1
                } else {
                    r.pids_limit as i64
                });
            }
        }
        if !root && r.flags & HAS_CPU != 0 {
            if want(StatFile::CpuWeight) {
                s.cpu_weight = Some(cpu_weight(r.weight));
            }
            if want(StatFile::CpuMax) && r.period_ns != ABSENT {
                s.cpu_max = Some(CpuMax {
                    max_usec: if r.quota_ns == RUNTIME_INF {
                        -1
                    } else {
                        (r.quota_ns / 1000) as i64
                    },
                    period_usec: r.period_ns / 1000,
                });
            }
        }
        if r.flags & HAS_CPUSET != 0 {
            if want(StatFile::CpusetCpus) && !root {
                s.cpuset_cpus = Some(Cpuset {
                    cpus: bits(&r.cpus, self.limits.cpus),
                });
            }
            if want(StatFile::CpusetCpusEffective) {
                s.cpuset_cpus_effective = Some(Cpuset {
                    cpus: bits(&r.cpus_effective, self.limits.cpus),
                });
            }
            if want(StatFile::CpusetMems) && !root {
                s.cpuset_mems = Some(MemNodes {
                    nodes: bits(&[r.mems], self.limits.nodes),
                });
            }
            if want(StatFile::CpusetMemsEffective) {
                s.cpuset_mems_effective = Some(MemNodes {
                    nodes: bits(&[r.mems_effective], self.limits.nodes),
                });
            }
        }
        if want(StatFile::MemoryStat) && r.flags & HAS_MEMSTAT != 0 {
            let mut m = MemoryStat::default();
            for (key, &v) in MEMSTAT_KEYS.iter().zip(r.memstat.iter()) {
                if v != ABSENT {
                    parse::set_memory_stat(&mut m, key, v);
                }
            }
            s.memory_stat = Some(m);
        }
        if want(StatFile::MemoryNumaStat) && r.flags & HAS_NUMA != 0 {
            s.memory_numa_stat = self.numa_stat(r, memory_nodes);
        }
        if !root && r.flags & HAS_MEMCG != 0 {
            // Page counters hold pages; "max" is PAGE_COUNTER_MAX.
            let counter_max = i64::MAX as u64 / page;
            let limit = |v: u64| {
                Some(if v == counter_max {
                    -1
                } else {
                    (v * page) as i64
                })
            };
            if want(StatFile::MemoryCurrent) {
                s.memory_current = Some((r.mem_usage * page) as i64);
            }
            if want(StatFile::MemorySwapCurrent) {
                s.memory_swap_current = Some((r.swap_usage * page) as i64);
            }
            if want(StatFile::MemoryMin) {
                s.memory_min = limit(r.mem_min);
            }
            if want(StatFile::MemoryLow) {
                s.memory_low = limit(r.mem_low);
            }
            if want(StatFile::MemoryHigh) {
                s.memory_high = limit(r.mem_high);
            }
            if want(StatFile::MemoryMax) {
                s.memory_max = limit(r.mem_max);
            }
            if want(StatFile::MemorySwapMax) {
                s.memory_swap_max = limit(r.swap_max);
            }
            if want(StatFile::MemoryZswapMax) && r.zswap_max != ABSENT {
                s.memory_zswap_max = limit(r.zswap_max);
            }
            if want(StatFile::MemoryEvents) {
                let [low, high, max, oom, oom_kill] = r.events.map(Some);
                s.memory_events = Some(MemoryEvents {
                    low,
                    high,
                    max,
                    oom,
                    oom_kill,
                });
            }
            if want(StatFile::MemoryEventsLocal) {
                let [low, high, max, oom, oom_kill] = r.events_local.map(Some);
                s.memory_events_local = Some(MemoryEventsLocal {
                    low,
                    high,
                    max,
                    oom,
                    oom_kill,
                });
            }
        }
        s
    }

    /// memory.numa_stat: the `nodes` the text prints, in its units.
    fn numa_stat(&self, r: &Record, nodes: u64) -> Option<BTreeMap<u32, MemoryNumaStat>> {
        let layout = self.limits.numa?;
        let stats = (0..NUMA_NODES)
            .filter(|n| nodes & (1 << n) != 0)
            .map(|n| {
                let mut m = MemoryNumaStat::default();
                for ((item, &idx), &v) in NUMA_ITEMS.iter().zip(&layout).zip(&r.numa[n]) {
                    if idx != NUMA_NO_IDX {
                        *(item.field)(&mut m) = Some(
                            v * match item.unit {
                                Unit::Page => self.page_size,
                                Unit::One => 1,
                                Unit::KiB => 1024,
                            },
                        );
                    }
                }
                (n as u32, m)
            })
            .collect();
        Some(stats)
    }

    fn cpu_stat(&self, r: &Record, prev: &mut HashMap<u64, (u64, u64)>) -> CpuStat {
        // Start from the newer of the kernel's prev_cputime (moved by text
        // readers) and ours, as the text would.
        let kernel = (r.prev_utime_ns, r.prev_stime_ns);
        let start = match prev.get(&r.id) {
            Some(&ours) if ours.0 + ours.1 > kernel.0 + kernel.1 => ours,
            _ => kernel,
        };
        let (utime, stime) = cputime_adjust(r.usage_ns, r.utime_ns, r.stime_ns, start);
        prev.insert(r.id, (utime, stime));
        let extra = |v: u64| (r.flags & HAS_CPU != 0 && v != ABSENT).then_some(v);
        CpuStat {
            usage_usec: Some(r.usage_ns / 1000),
            user_usec: Some(utime / 1000),
            system_usec: Some(stime / 1000),
            nr_periods: extra(r.nr_periods),
            nr_throttled: extra(r.nr_throttled),
            throttled_usec: extra(r.throttled_ns).map(|v| v / 1000),
        }
    }
}

/// The root's files that BPF cannot serve but the plan gives to BPF.
fn root_text_files(bpf: FileSet) -> FileSet {
    [
        StatFile::CpuStat,
        StatFile::CpuPressure,
        StatFile::IoPressure,
        StatFile::MemoryPressure,
    ]
    .into_iter()
    .filter(|f| bpf.contains(*f))
    .collect()
}

/// The kernel's cputime_adjust(): split rtime in the raw utime:stime ratio,
/// never letting either go below the previous result.
fn cputime_adjust(rtime: u64, utime: u64, stime: u64, prev: (u64, u64)) -> (u64, u64) {
    let (prev_u, prev_s) = prev;
    if prev_u + prev_s >= rtime {
        return prev;
    }
    let mut st = if stime == 0 {
        0
    } else if utime == 0 {
        rtime
    } else {
        (stime as u128 * rtime as u128 / (stime as u128 + utime as u128)) as u64
    };
    st = st.max(prev_s);
    let mut ut = rtime - st;
    if ut < prev_u {
        ut = prev_u;
        st = rtime - ut;
    }
    (ut, st)
}

/// sched_weight_to_cgroup(scale_load_down(shares)).
fn cpu_weight(shares: u64) -> u32 {
    let w = if shares == 0 {
        0
    } else {
        (shares >> 10).max(2)
    };
    ((w * 100 + 512) / 1024).clamp(1, 10000) as u32
}

fn pressure(r: &Record) -> cgroupfs::Pressure {
    let row = |i: usize| PressureMetrics {
        avg10: Some(load_avg(r.psi_avg[i][0])),
        avg60: Some(load_avg(r.psi_avg[i][1])),
        avg300: Some(load_avg(r.psi_avg[i][2])),
        total: Some(r.psi_total_ns[i] / 1000),
    };
    cgroupfs::Pressure {
        cpu: cgroupfs::CpuPressure {
            some: row(4),
            full: Some(row(5)),
        },
        io: cgroupfs::IoPressure {
            some: row(0),
            full: row(1),
        },
        memory: cgroupfs::MemoryPressure {
            some: row(2),
            full: row(3),
        },
    }
}

/// A psi average (11 fraction bits) as the text prints it, "%lu.%02lu",
/// then parsed: an exact decimal divided once rounds like the parser.
fn load_avg(v: u64) -> f64 {
    let int = v >> 11;
    let frac = ((v & 2047) * 100) >> 11;
    (int * 100 + frac) as f64 / 100.0
}

fn controller_names(mask: u32) -> BTreeSet<String> {
    CONTROLLERS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| (*n).to_owned())
        .collect()
}

/// Set bits below `limit`.
fn bits(words: &[u64], limit: usize) -> BTreeSet<u32> {
    (0..limit.min(words.len() * 64))
        .filter(|&b| words[b / 64] & (1 << (b % 64)) != 0)
        .map(|b| b as u32)
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn cputime_adjust_scales_and_stays_monotonic() {
        // 3:1 split of 1000 ns.
        assert_eq!(cputime_adjust(1000, 300, 100, (0, 0)), (750, 250));
        // Only system time seen: all of rtime is system.
        assert_eq!(cputime_adjust(1000, 0, 5, (0, 0)), (0, 1000));
        // Nothing new: the previous split stands.
        assert_eq!(cputime_adjust(1000, 1, 1, (750, 250)), (750, 250));
        // stime may not shrink below its previous value.
        assert_eq!(cputime_adjust(1100, 1000, 1, (750, 250)), (850, 250));
    }

    #[test]
    fn numa_tables_agree() {
        let record: Record = Default::default();
        assert_eq!(record.numa.len(), NUMA_NODES);
        assert_eq!(record.numa[0].len(), NUMA_ITEMS.len());
        for it in &NUMA_ITEMS {
            assert!(MEMCG_NODE_STAT_ITEMS.contains(&it.item), "{}", it.item);
        }
        for thp in THP_ITEMS {
            assert!(NUMA_ITEMS.iter().any(|it| it.item == thp), "{thp}");
        }
    }

    #[test]
    fn converts_kernel_encodings() {
        assert_eq!(cpu_weight(1024 << 10), 100);
        assert_eq!(cpu_weight(10240 << 10), 1000);
        assert_eq!(load_avg(2048 + 1024), 1.5);
        assert_eq!(load_avg(2048 * 3 + 2047), "3.99".parse::<f64>().unwrap());
        assert_eq!(bits(&[0b101, 1], 128), BTreeSet::from([0, 2, 64]));
        assert_eq!(bits(&[0b101, 1], 2), BTreeSet::from([0]));
        assert_eq!(
            controller_names(0b1010),
            BTreeSet::from(["cpu".to_owned(), "memory".to_owned()])
        );
    }
}
