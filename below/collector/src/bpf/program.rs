//! The fork's program, bstats.bpf.c: below main's cgroup_stats with the
//! fork's pressure (cgroup_psi.bpf.c, [`super::psi`]), memory.numa_stat
//! (cgroup_numa.bpf.c, [`super::numa`]), the cgroups' names
//! (cgroup_name.h) and the top-N pass modes of cgroup_rank.h, loaded through the core's loader ([`Loaded::prepare`],
//! [`Loaded::attach`]). Where it does not load, the backend runs below
//! main's program alone ([`Program::Core`]): pressure and numa_stat are
//! read as text then, names found by listing the parent's directory, and
//! ranking done over the samples.

use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::path::PathBuf;

use anyhow::Context;
use anyhow::Result;
use libbpf_rs::skel::Skel;
use libbpf_rs::MapCore;
use libbpf_rs::MapFlags;
use libbpf_rs::MapHandle;
use libbpf_rs::OpenObject;

use super::kernel::LoadConfig;
use super::layer;
use super::layer::MapView;
use super::layer::Pod;
use super::load::first_capacity;
use super::load::Loaded;
use super::load::Pass;
use super::load::Walk;
use super::numa::Numa;
use super::numa::NumaRow;
use super::protocol::Passes;
use super::protocol::Rows;
use super::protocol::Slots;
use super::psi::PressureRow;
use super::psi::PsiPass;

// libbpf-cargo's output: its unwrap()s are not ours to change.
#[allow(clippy::unwrap_used)]
pub(crate) mod skel {
    include!(concat!(env!("OUT_DIR"), "/bstats.skel.rs"));
}

/// bindgen of the fork's headers (build.rs): cgroup_psi.h (see psi.rs),
/// cgroup_numa.h (numa.rs), cgroup_name.h and cgroup_rank.h, PASS_*.
#[allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all)]
pub(crate) mod fork_h {
    include!(concat!(env!("OUT_DIR"), "/bstats_h.rs"));
}
pub(crate) use fork_h::cgroup_name as CgroupName;
pub(crate) use fork_h::PASS_FULL;
pub(crate) use fork_h::PASS_RANK;
pub(crate) use fork_h::PASS_WANTED;

/// The program's name in the object (its forms: [`Walk::program`]).
pub(crate) const PROGRAM: &str = "bstats";

/// Its `.data.numa`: the nodes memory.numa_stat prints at the pass.
use skel::types::data_numa as DataNuma;
/// Its `.data.psi`: what the pass found of pressure.
use skel::types::data_psi as DataPsi;
/// The program's `.data.rank`: the pass mode in, `moved` out.
use skel::types::data_rank as Control;
/// Its `.rodata.numa`: where memory.numa_stat's items are.
use skel::types::rodata_numa as RodataNuma;
/// Its `.rodata.psi`: nr_cpu_ids.
use skel::types::rodata_psi as RodataPsi;

// SAFETY: the skeleton's #[repr(C)] types of the program's data sections
// and map values: integers and arrays of them.
unsafe impl Pod for Control {}
// SAFETY: as above.
unsafe impl Pod for DataPsi {}
// SAFETY: as above.
unsafe impl Pod for RodataPsi {}
// SAFETY: as above.
unsafe impl Pod for PressureRow {}
// SAFETY: as above.
unsafe impl Pod for DataNuma {}
// SAFETY: as above.
unsafe impl Pod for RodataNuma {}
// SAFETY: as above.
unsafe impl Pod for NumaRow {}
// SAFETY: as above.
unsafe impl Pod for CgroupName {}

/// A name map entry as the directory's name: its bytes (any but '/' and
/// NUL, not always UTF-8) before the NUL the kernel ends it with.
pub(crate) fn name(n: &CgroupName) -> OsString {
    OsString::from_vec(layer::c_bytes(&n.name))
}

/// What the fork's program is loaded with: below main's program's
/// config, and how memory.numa_stat is read (None: left to the files).
#[derive(Clone, Copy)]
pub(crate) struct ForkConfig {
    pub(crate) core: LoadConfig,
    pub(crate) numa: Option<Numa>,
}

/// Map key 0, for the one entry of a data section.
const ENTRY: [u8; 4] = 0u32.to_ne_bytes();

/// The loaded fork's program.
pub(crate) struct ForkLoaded {
    loaded: Loaded,
    wanted: MapHandle,
    control: MapHandle,
    /// A row per record slot (map `pressure`).
    pressure: MapView<PressureRow>,
    /// A name per record slot (map `names`).
    names: MapView<CgroupName>,
    psi: MapView<DataPsi>,
    numa: Option<Numa>,
    /// `numa.nodes` rows per record slot (map `numa`).
    numa_rows: MapView<NumaRow>,
    numa_pass: MapView<DataNuma>,
    /// What `wanted` holds per slot (none after a load).
    marks: Vec<u64>,
}

impl ForkLoaded {
    /// The first load, in the form [`Walk::first`] picks.
    pub(crate) fn first(root: BorrowedFd, config: ForkConfig, btf: Option<&Path>) -> Result<Self> {
        let btf = btf.map(Path::to_path_buf);
        let capacity = first_capacity(root);
        Walk::first(config.core.rcu_walk, |walk| {
            Self::new(root, capacity, config, walk, btf.clone())
        })
    }

    fn new(
        root: BorrowedFd,
        capacity: u32,
        config: ForkConfig,
        walk: Walk,
        btf: Option<PathBuf>,
    ) -> Result<Self> {
        let prog = walk.program(PROGRAM);
        let skel = layer::load(skel::BstatsSkelBuilder::default(), btf.as_deref(), |open| {
            Self::prepare(open, &prog, root, capacity, &config)
        })?;
        Self::attach(Box::new(skel), &prog, root, capacity, config, walk, btf)
    }

    /// Before the load of the object: [`Loaded::prepare`] and the fork's
    /// maps sized for `capacity` records, its constants set.
    pub(crate) fn prepare(
        open: &mut OpenObject,
        prog: &str,
        root: BorrowedFd,
        capacity: u32,
        config: &ForkConfig,
    ) -> Result<()> {
        Loaded::prepare(open, prog, root, capacity, &config.core)?;
        for map in ["wanted", "pressure", "names"] {
            layer::open_map(open, map)?
                .set_max_entries(capacity)
                .with_context(|| format!("Failed to size the {map} map"))?;
        }
        let numa_rows = capacity as usize * config.numa.map_or(0, |n| n.nodes);
        layer::open_map(open, "numa")?
            .set_max_entries(u32::try_from(numa_rows.max(1))?)
            .context("Failed to size the numa map")?;
        if let Some(numa) = config.numa {
            layer::set_data(open, ".rodata.numa", |r: &mut RodataNuma| {
                r.numa_node_ids = numa.nodes as u32;
                r.numa_idx = numa.layout;
            })?;
        }
        layer::set_data(open, ".rodata.psi", |r: &mut RodataPsi| {
            // Unknown: pressure is left to the files (probe).
            r.nr_cpus = config.core.cpus.unwrap_or(0) as u32;
        })
    }

    /// After the load: attaches `prog` as [`Loaded::attach`]
    /// does and maps the fork's maps.
    pub(crate) fn attach(
        skel: Box<dyn Skel<'static>>,
        prog: &str,
        root: BorrowedFd,
        capacity: u32,
        config: ForkConfig,
        walk: Walk,
        btf: Option<PathBuf>,
    ) -> Result<Self> {
        let object = skel.object();
        let wanted = MapHandle::try_from(&layer::map(object, "wanted")?)?;
        let control = MapHandle::try_from(&layer::map(object, ".data.rank")?)?;
        let pressure = MapView::new(&layer::map(object, "pressure")?)?;
        let names = MapView::new(&layer::map(object, "names")?)?;
        let psi = MapView::new(&layer::map(object, ".data.psi")?)?;
        let numa_rows = MapView::new(&layer::map(object, "numa")?)?;
        let numa_pass = MapView::new(&layer::map(object, ".data.numa")?)?;
        let loaded = Loaded::attach(skel, prog, root, capacity, config.core, walk, btf)?;
        Ok(ForkLoaded {
            loaded,
            wanted,
            control,
            pressure,
            names,
            psi,
            numa: config.numa,
            numa_rows,
            numa_pass,
            marks: Vec::new(),
        })
    }

    /// One pass of `mode`, and whether a WANTED pass found the tree moved.
    fn run(&mut self, mode: u32, rank_groups: u32) -> Result<(Pass, Slots)> {
        let control = Control {
            pass_mode: mode,
            rank_groups,
            moved: 0,
        };
        // SAFETY: Control is integers with no padding between or after
        // them (u32s), all initialized.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const control).cast::<u8>(), size_of::<Control>())
        };
        (self.control.update(&ENTRY, bytes, MapFlags::ANY)).context("setting the pass mode")?;
        let pass = self.loaded.run()?;
        let after = (self.control.lookup(&ENTRY, MapFlags::ANY))
            .context("reading the pass's `moved`")?
            .and_then(|b| layer::read::<Control>(&b))
            .context("no .data.rank entry")?;
        let slots = match after.moved {
            0 => Slots::Held,
            _ => Slots::Moved,
        };
        Ok((pass, slots))
    }

    /// What the last pass found of pressure.
    pub(crate) fn psi(&self) -> PsiPass {
        let d = self.psi.get(0);
        PsiPass::new(d.psi_features, d.psi_no_clock, d.psi_now, d.psi_period_ns)
    }

    /// memory.numa_stat of the first `n` records, where the pass read it.
    fn numa(&self, n: u32) -> Option<NumaRows<'_>> {
        let numa = self.numa?;
        let pass = self.numa_pass.get(0);
        (pass.numa_read != 0).then(|| NumaRows {
            numa,
            memory_nodes: pass.memory_nodes,
            // SAFETY: as in `pressure`; the map has `numa.nodes` rows
            // per record slot.
            rows: unsafe { self.numa_rows.slice(n as usize * numa.nodes) },
        })
    }

    /// The pressure rows of the first `n` records (valid where a record
    /// has HAS_PSI).
    fn pressure(&self, n: u32) -> &[PressureRow] {
        // SAFETY: the kernel wrote them during the last run, and no run
        // happens while the slice (borrowing self) is alive.
        unsafe { self.pressure.slice(n as usize) }
    }

    /// The names of the first `n` records' cgroups.
    fn names(&self, n: u32) -> &[CgroupName] {
        // SAFETY: as in `pressure`.
        unsafe { self.names.slice(n as usize) }
    }
}

/// The program a backend runs.
// One per backend, made once: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Program {
    /// below main's program alone: the fork's did not load.
    Core(Loaded),
    Fork(ForkLoaded),
}

impl Program {
    /// The fork's program, else below main's with why not the fork's.
    pub(crate) fn first(
        root: BorrowedFd,
        config: ForkConfig,
        btf: Option<&Path>,
    ) -> Result<(Self, Option<String>)> {
        match ForkLoaded::first(root, config, btf) {
            Ok(fork) => Ok((Program::Fork(fork), None)),
            Err(e) => {
                let core = Loaded::first(root, config.core, btf)?;
                Ok((Program::Core(core), Some(format!("{e:#}"))))
            }
        }
    }

    pub(crate) fn loaded(&self) -> &Loaded {
        match self {
            Program::Core(loaded) => loaded,
            Program::Fork(f) => &f.loaded,
        }
    }

    /// One pass of every record in full, in the room it has.
    pub(crate) fn run(&mut self) -> Result<Pass> {
        match self {
            Program::Core(loaded) => loaded.run(),
            Program::Fork(f) => f.run(PASS_FULL, 0).map(|(pass, _)| pass),
        }
    }

    /// memory.numa_stat of the first `n` records of the last pass;
    /// None: not read.
    pub(crate) fn numa(&self, n: u32) -> Option<NumaRows<'_>> {
        match self {
            Program::Core(_) => None,
            Program::Fork(f) => f.numa(n),
        }
    }

    /// What the last pass found of pressure; None: the program has none.
    pub(crate) fn psi(&self) -> Option<PsiPass> {
        match self {
            Program::Core(_) => None,
            Program::Fork(f) => Some(f.psi()),
        }
    }

    /// The first `n` records of the last pass, their pressure rows and
    /// names.
    pub(crate) fn rows(&self, n: u32) -> Rows<'_> {
        let records = self.loaded().records(n);
        match self {
            Program::Core(_) => Rows {
                records,
                pressure: &[],
                names: &[],
            },
            Program::Fork(f) => Rows {
                records,
                pressure: f.pressure(n),
                names: f.names(n),
            },
        }
    }

    /// Whether it runs the top-N pass modes.
    pub(crate) fn ranks(&self) -> bool {
        matches!(self, Program::Fork(_))
    }
}

/// Runs a pass of `program` until one fits, as [`Loaded::run_all`]
/// does for below main's: `reload` loads it again with room for `cap`
/// records (from `loaded`, the [`Loaded`] it has). `T`: what else a pass
/// gives.
pub(crate) fn run_growing<P, T>(
    program: &mut P,
    loaded: fn(&mut P) -> &mut Loaded,
    mut run: impl FnMut(&mut P) -> Result<(Pass, T)>,
    reload: impl Fn(&Loaded, u32) -> Result<P>,
) -> Result<(Pass, T)> {
    loaded(program).check_growth()?;
    loop {
        let (pass, more) = run(program)?;
        let had = loaded(program);
        let Some(cap) = had.room_for(&pass) else {
            return Ok((pass, more));
        };
        match reload(had, cap) {
            Ok(grown) => *program = grown,
            Err(e) => return Err(had.growth_failed(pass.cgroups, cap, e)),
        }
    }
}

/// A [`Program`] running passes under `root`.
pub(crate) struct PassRunner<'a> {
    pub(crate) program: &'a mut Program,
    pub(crate) root: BorrowedFd<'a>,
    /// The BTF file the program was relocated against, if not the kernel's.
    pub(crate) btf: Option<&'a PathBuf>,
}

impl Passes for PassRunner<'_> {
    fn run_all(&mut self, mode: u32, rank_groups: u32) -> Result<(Pass, Slots)> {
        let (root, btf) = (self.root, self.btf);
        match self.program {
            Program::Core(loaded) => {
                anyhow::ensure!(
                    mode == PASS_FULL,
                    "below main's program runs full passes only"
                );
                Ok((loaded.run_all(root)?, Slots::Held))
            }
            Program::Fork(f) => {
                let numa = f.numa;
                run_growing(
                    f,
                    |f| &mut f.loaded,
                    |f| f.run(mode, rank_groups),
                    |had, cap| {
                        let config = ForkConfig {
                            core: *had.config(),
                            numa,
                        };
                        ForkLoaded::new(root, cap, config, had.walk().clone(), btf.cloned())
                    },
                )
            }
        }
    }

    fn rows(&self, n: u32) -> Rows<'_> {
        self.program.rows(n)
    }

    fn wanted(&self) -> &[u64] {
        match &self.program {
            Program::Fork(f) => &f.marks,
            Program::Core(_) => &[],
        }
    }

    fn set_wanted(&mut self, mut marks: Vec<u64>) -> Result<()> {
        let Program::Fork(f) = self.program else {
            anyhow::bail!("below main's program does not rank");
        };
        // Slots past this pass's keep nothing from an earlier one.
        let n = marks.len().max(f.marks.len());
        marks.resize(n, 0);
        if n > 0 {
            let keys: Vec<u8> = (0..n as u32).flat_map(u32::to_ne_bytes).collect();
            let values: Vec<u8> = marks.iter().copied().flat_map(u64::to_ne_bytes).collect();
            (f.wanted
                .update_batch(&keys, &values, n as u32, MapFlags::ANY, MapFlags::ANY))
            .context("writing the wanted map")?;
        }
        f.marks = marks;
        Ok(())
    }
}

/// The memory.numa_stat rows of a pass, as [`Numa`] reads them.
pub(crate) struct NumaRows<'a> {
    pub(crate) numa: Numa,
    /// The nodes the file prints (N_MEMORY at the pass).
    pub(crate) memory_nodes: u64,
    /// `numa.nodes` per record.
    pub(crate) rows: &'a [NumaRow],
}

impl NumaRows<'_> {
    /// Record `i`'s rows, one per node id (valid where it has HAS_NUMA).
    pub(crate) fn of(&self, i: usize) -> &[NumaRow] {
        let n = self.numa.nodes;
        self.rows.get(i * n..(i + 1) * n).unwrap_or_default()
    }
}
