// Copyright (c) Facebook, Inc. and its affiliates.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! A small layer over libbpf-rs for loading and reading BPF programs:
//!
//! - Load: `load(SkelBuilder::default(), |open| { open_map(open, "m")?.set_max_entries(n)?;
//!   set_data(open, ".rodata", |r: &mut Rodata| r.x = 1) })` gives the loaded skeleton, which owns
//!   its object; a failure says why (the verifier's verdict, a failed CO-RE relocation, else
//!   libbpf's error, its warnings going to libbpf's print callback).
//! - Programs and maps by name: `prog(skel.object(), "p")?.attach()`, `map(skel.object(), "m")`,
//!   `map(skel.object(), ".bss")`.
//! - Iterator: `run_iter(&link, &mut out)` runs one pass to its end (`out`: what it printed);
//!   `attach_task_iter(&prog, tid)` attaches a task iterator to one thread.
//! - Shared memory: `MapView::<T>::new(&map)?` mmaps an array map (`get`, `slice`);
//!   `read::<T>(bytes)` for a value in bytes. `T` is `Pod` (skeleton types: `unsafe impl`).
//! - BTF: `KernelBtf::open()` checks it once: `has_func` (kfuncs), `enum_values`.
//! - `page_size`, for mappings and page counters.

use std::ffi::CString; // fork-only
use std::io::ErrorKind;
use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::OpenSkel;
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::AsRawLibbpf;
use libbpf_rs::Iter;
use libbpf_rs::Link;
use libbpf_rs::Map;
use libbpf_rs::MapCore;
use libbpf_rs::Object;
use libbpf_rs::OpenMapMut;
use libbpf_rs::OpenObject;
use libbpf_rs::ProgramMut;

/// Plain data shared with a BPF program: `#[repr(C)]`, every bit pattern
/// valid (integers and arrays of them, as libbpf-cargo's skeleton types).
///
/// # Safety
///
/// Implement it only for such types: the layer reads them out of bytes
/// the kernel wrote.
pub unsafe trait Pod: Copy {}

/// A `T` read from the start of `bytes`; None when too short.
// series: fn read<T: Pod>(bytes: &[u8]) -> Option<T> {
pub fn read<T: Pod>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= size_of::<T>())
        // SAFETY: T is Pod and `bytes` holds at least its size;
        // read_unaligned has no alignment requirement.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The verifier log's size. Since 6.4 the kernel keeps a log's end when it
/// does not fit (the verdict is there); older kernels keep its start, and a
/// failed load then says the log was cut rather than loading again.
const LOG_SIZE: usize = 4 << 20;

/// What the skeleton builder `B` loads: its program's typed skeleton.
pub type Skeleton<B> = <<B as SkelBuilder<'static>>::Output as OpenSkel<'static>>::Output;

/// Opens the object of the skeleton `builder` (libbpf-cargo's), lets
/// `setup` size maps and fill `.rodata`, and loads it.
/// `btf`: CO-RE relocates against this file, not the kernel's BTF. // fork-only
///
/// The skeleton owns its object (the storage libbpf-rs asks for is a
/// pointer, leaked per load): its users keep it across samples and reload
/// it to resize a map, with no lifetime to carry.
pub fn load<B: SkelBuilder<'static>>(
    builder: B,
    btf: Option<&Path>, // fork-only
    mut setup: impl FnMut(&mut OpenObject) -> Result<()>,
) -> Result<Skeleton<B>> {
    // fork-only {
    let btf = btf
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .context("Failed to pass the BTF path: it holds a NUL byte")?;
    // } fork-only
    let mut log = vec![0u8; LOG_SIZE];
    // libbpf-rs's builder has no per-object log buffer: the open options
    // are ours, everything after the open is libbpf-rs's.
    let opts = libbpf_sys::bpf_object_open_opts {
        sz: size_of::<libbpf_sys::bpf_object_open_opts>() as _,
        btf_custom_path: btf.as_deref().map_or(std::ptr::null(), |p| p.as_ptr()), // fork-only
        kernel_log_buf: log.as_mut_ptr().cast(),
        kernel_log_size: log.len() as _,
        ..Default::default()
    };
    // libbpf writes `log` only during the load below, which `log` outlives.
    // It copies the BTF path during the open. // fork-only
    let mut open = builder.open_opts(opts, Box::leak(Box::new(MaybeUninit::uninit())))?;
    setup(open.open_object_mut())?;
    let e = match open.load() {
        Ok(skel) => return Ok(skel),
        Err(e) => e,
    };
    let len = log.iter().position(|&b| b == 0).unwrap_or(LOG_SIZE);
    let log = String::from_utf8_lossy(&log[..len]);
    // libbpf's error stays in the chain for callers to match; where the
    // verifier did not run, libbpf's warnings (its print callback) say why.
    let why = verifier_verdict(&log).or_else(|| {
        (len + 1 >= LOG_SIZE)
            .then(|| format!("the verifier's log did not fit in {} MiB", LOG_SIZE >> 20))
    });
    Err(match why {
        Some(why) => anyhow::Error::new(e).context(why),
        None => anyhow::Error::new(e),
    })
}

/// Why the verifier rejected a program: the last two lines of its log
/// before "processed N insns" (libbpf rewrites a poisoned call into the
/// CO-RE relocation or kfunc that failed). None when it never ran (libbpf
/// failed first, and its warnings say why) or the log lost its end.
fn verifier_verdict(log: &str) -> Option<String> {
    let end = log.lines().position(|l| l.starts_with("processed "))?;
    let lines: Vec<&str> = log
        .lines()
        .take(end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    (lines.len() >= 2).then(|| lines[lines.len() - 2..].join(" / "))
}

/// A map of an opened object, to size it before the load.
pub fn open_map<'o>(open: &'o mut OpenObject, name: &str) -> Result<OpenMapMut<'o>> {
    open.maps_mut()
        .find(|m| m.name().as_bytes() == name.as_bytes())
        .with_context(|| format!("Failed to find map {name} in the BPF object"))
}

/// Sets the initial value of a data section (".rodata", ".data", ".bss")
/// of an opened object through its skeleton type `T`.
pub fn set_data<T: Pod>(
    open: &mut OpenObject,
    section: &str,
    set: impl FnOnce(&mut T),
) -> Result<()> {
    let mut map = open
        .maps_mut()
        .find(|m| is_section(m.name().as_bytes(), section))
        .with_context(|| format!("Failed to find {section} in the BPF object"))?;
    let bytes = map.initial_value_mut().with_context(|| {
        format!("Failed to read {section}: the BPF object holds no data for it")
    })?;
    // The skeleton's type holds the section's globals, padded to its
    // alignment, which the section is not; other statics may follow them.
    if bytes.len() + align_of::<T>() <= size_of::<T>() {
        bail!(
            "{section} size mismatch: BPF {} bytes, Rust {}",
            bytes.len(),
            size_of::<T>()
        );
    }
    let n = bytes.len().min(size_of::<T>());
    let mut padded = vec![0u8; size_of::<T>()];
    padded[..n].copy_from_slice(&bytes[..n]);
    let mut value = read::<T>(&padded).context("checked size")?;
    set(&mut value);
    // SAFETY: `padded` holds exactly a T; write_unaligned has no alignment
    // requirement.
    unsafe { std::ptr::write_unaligned(padded.as_mut_ptr().cast::<T>(), value) };
    bytes[..n].copy_from_slice(&padded[..n]);
    Ok(())
}

/// libbpf names a data section's map "<object name prefix>.<section>";
/// the maps a program declares cannot have a dot in their names.
fn is_section(map: &[u8], section: &str) -> bool {
    map.ends_with(section.as_bytes()) && section.starts_with('.')
}

/// A map of a loaded object by name, or its data section (".bss", ...).
pub fn map<'o>(obj: &'o Object, name: &str) -> Result<Map<'o>> {
    obj.maps()
        .find(|m| m.name().as_bytes() == name.as_bytes() || is_section(m.name().as_bytes(), name))
        .with_context(|| format!("Failed to find map {name} in the BPF object"))
}

/// A program of a loaded object, to attach.
pub fn prog<'o>(obj: &'o Object, name: &str) -> Result<ProgramMut<'o>> {
    obj.progs_mut()
        .find(|p| p.name().as_bytes() == name.as_bytes())
        .with_context(|| format!("Failed to find program {name} in the BPF object"))
}

/// Attaches `prog`, a task iterator (`iter.s/task`), to the one thread
/// `tid`: each run of the link visits that thread once (and then ends).
pub fn attach_task_iter(prog: &ProgramMut, tid: u32) -> Result<Link> {
    let mut info = libbpf_sys::bpf_iter_link_info::default();
    info.task.tid = tid;
    let opts = libbpf_sys::bpf_iter_attach_opts {
        sz: size_of::<libbpf_sys::bpf_iter_attach_opts>() as _,
        link_info: &mut info,
        link_info_len: size_of::<libbpf_sys::bpf_iter_link_info>() as _,
        ..Default::default()
    };
    // SAFETY: a loaded program of a live object; libbpf copies the link
    // info during the call.
    let ptr =
        unsafe { libbpf_sys::bpf_program__attach_iter(prog.as_libbpf_object().as_ptr(), &opts) };
    let ptr = NonNull::new(ptr).ok_or_else(std::io::Error::last_os_error)?;
    // SAFETY: a link libbpf just created, owned from here.
    Ok(unsafe { Link::from_ptr(ptr) })
}

/// Runs the iterator of `link` once to its end, appending what it
/// printed to `out`.
pub fn run_iter(link: &Link, out: &mut Vec<u8>) -> Result<()> {
    // The kernel hands out at most its seq_file buffer (8 pages) per read;
    // a program that prints nothing walks everything in one read(2),
    // which returns 0.
    const CHUNK: usize = 64 * 1024;
    let mut it = Iter::new(link).context("Failed to create a BPF iterator")?;
    loop {
        let len = out.len();
        out.resize(len + CHUNK, 0);
        let read = it.read(&mut out[len..]);
        out.truncate(len + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("Failed to read the BPF iterator"),
        }
    }
}

/// An array map mmapped into this process: what the kernel writes there
/// is seen without a syscall.
pub struct MapView<T: Pod> {
    ptr: NonNull<T>,
    entries: usize,
    len: usize,
}

impl<T: Pod> MapView<T> {
    /// Maps every entry of `map` (an array map with BPF_F_MMAPABLE, as
    /// libbpf creates data sections), whose values must be `T`s.
    pub fn new(map: &Map) -> Result<Self> {
        let name = map.name().to_string_lossy();
        if map.value_size() as usize != size_of::<T>() {
            bail!(
                "map {name} size mismatch: BPF {} bytes, Rust {}",
                map.value_size(),
                size_of::<T>()
            );
        }
        let entries = map.max_entries() as usize;
        // The kernel lays values out 8-byte aligned.
        if entries > 1 && !size_of::<T>().is_multiple_of(8) {
            bail!("map {name}: values of {} bytes are padded", size_of::<T>());
        }
        let len = (size_of::<T>() * entries).next_multiple_of(page_size() as usize);
        // SAFETY: a fresh shared mapping of the map's fd; the kernel
        // checks the size against the map's.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("Failed to mmap the map {name}"));
        }
        Ok(MapView {
            ptr: NonNull::new(ptr.cast()).context("Failed to map a BPF map: mmap returned NULL")?,
            entries,
            len,
        })
    }

    /// A copy of entry `i`: a volatile read, not an atomic one, so read
    /// it when no program writes it (after a pass). Safe, unlike
    /// [`slice`](Self::slice): a write meanwhile tears the copy, while no
    /// reference into the mapping outlives the read.
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.entries, "entry {i} of {}", self.entries);
        // SAFETY: within the mapping; T is Pod.
        unsafe { self.ptr.as_ptr().add(i).read_volatile() }
    }

    /// The first `n` entries (at most all), borrowed.
    ///
    /// # Safety
    ///
    /// No program may write the map while the slice lives: for an
    /// iterator's output, no pass may run. A process with CAP_SYS_ADMIN
    /// can open any program, link and map by id; against it nothing here
    /// holds, as for every reader of BPF maps.
    pub unsafe fn slice(&self, n: usize) -> &[T] {
        // SAFETY: within the mapping; the caller keeps writers out.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), n.min(self.entries)) }
    }
}

impl<T: Pod> Drop for MapView<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; every borrow of it
        // borrows `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The running kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF, read once: what every program checks before loading.
/// (Or a file standing for it.) // fork-only
pub struct KernelBtf {
    /// For the module that holds this layer, which may read more of it. // fork-only
    // series: btf: Btf<'static>,
    pub(super) btf: Btf<'static>,
}

impl KernelBtf {
    /// [`VMLINUX_BTF`]; Err says why there is none.
    /// `custom`: that file instead. // fork-only
    // series: pub fn open() -> Result<Self> {
    pub fn open(custom: Option<&Path>) -> Result<Self> {
        let path = Path::new(VMLINUX_BTF);
        // fork-only {
        if let Some(custom) = custom {
            if !custom.exists() {
                bail!("no BTF at {}", custom.display());
            }
        }
        let path = custom.unwrap_or(path);
        // } fork-only
        if !path.exists() {
            bail!("the kernel has no BTF ({VMLINUX_BTF}; CONFIG_DEBUG_INFO_BTF)");
        }
        let btf =
            Btf::from_path(path).with_context(|| format!("Failed to read {}", path.display()))?;
        Ok(KernelBtf { btf })
    }

    /// Whether a function (a kfunc, or one built only with some CONFIG)
    /// is in the BTF.
    pub fn has_func(&self, name: &str) -> bool {
        self.btf.type_by_name::<types::Func>(name).is_some()
    }

    /// Member names and values of an enum, if the kernel has it.
    pub fn enum_values(&self, name: &str) -> Option<Vec<(String, i64)>> {
        let e = self.btf.type_by_name::<types::Enum>(name)?;
        Some(
            e.iter()
                .filter_map(|m| Some((m.name?.to_string_lossy().into_owned(), m.value)))
                .collect(),
        )
    }
}

/// The size of a page, for mappings and page counters.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => panic!("sysconf(_SC_PAGESIZE) failed"),
    }
}
