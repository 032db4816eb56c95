//! The cgroup files a below `CgroupSample` is built from, one entry per
//! sample field, so each can be served by a different backend.

use std::ffi::CStr;
use std::fmt;

use serde::Deserialize;
use serde::Serialize;

macro_rules! stat_files {
    ($($variant:ident => $name:literal,)+) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum StatFile {
            $($variant,)+
        }

        impl StatFile {
            pub const ALL: &'static [StatFile] = &[$(StatFile::$variant,)+];

            /// The file's name in a cgroup directory, for `openat`.
            pub fn path(self) -> &'static CStr {
                match self {
                    $(StatFile::$variant => $name,)+
                }
            }
        }
    };
}

stat_files! {
    CpuStat => c"cpu.stat",
    IoStat => c"io.stat",
    PidsCurrent => c"pids.current",
    PidsMax => c"pids.max",
    MemoryCurrent => c"memory.current",
    MemoryStat => c"memory.stat",
    CpuPressure => c"cpu.pressure",
    IoPressure => c"io.pressure",
    MemoryPressure => c"memory.pressure",
    MemorySwapCurrent => c"memory.swap.current",
    MemoryMin => c"memory.min",
    MemoryLow => c"memory.low",
    MemoryHigh => c"memory.high",
    MemoryMax => c"memory.max",
    MemorySwapMax => c"memory.swap.max",
    MemoryZswapMax => c"memory.zswap.max",
    MemoryEvents => c"memory.events",
    MemoryEventsLocal => c"memory.events.local",
    CgroupStat => c"cgroup.stat",
    MemoryNumaStat => c"memory.numa_stat",
    CpusetCpus => c"cpuset.cpus",
    CpusetCpusEffective => c"cpuset.cpus.effective",
    CpusetMems => c"cpuset.mems",
    CpusetMemsEffective => c"cpuset.mems.effective",
    CpuWeight => c"cpu.weight",
    CpuMax => c"cpu.max",
    CgroupControllers => c"cgroup.controllers",
    CgroupSubtreeControl => c"cgroup.subtree_control",
}

impl StatFile {
    pub fn name(self) -> &'static str {
        self.path().to_str().expect("file names are ASCII")
    }

    pub fn by_name(name: &str) -> Option<StatFile> {
        StatFile::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The controller whose interface file this is: it exists in a
    /// cgroup only while that controller is in the cgroup's
    /// cgroup.controllers. None: a core file every cgroup has.
    pub fn controller(self) -> Option<&'static str> {
        use StatFile::*;
        match self {
            IoStat => Some("io"),
            PidsCurrent | PidsMax => Some("pids"),
            MemoryCurrent | MemoryStat | MemorySwapCurrent | MemoryMin | MemoryLow | MemoryHigh
            | MemoryMax | MemorySwapMax | MemoryZswapMax | MemoryEvents | MemoryEventsLocal
            | MemoryNumaStat => Some("memory"),
            CpusetCpus | CpusetCpusEffective | CpusetMems | CpusetMemsEffective => Some("cpuset"),
            CpuWeight | CpuMax => Some("cpu"),
            CpuStat | CpuPressure | IoPressure | MemoryPressure | CgroupStat
            | CgroupControllers | CgroupSubtreeControl => None,
        }
    }

    /// The three pressure files fill one sample field together.
    pub fn is_pressure(self) -> bool {
        matches!(
            self,
            StatFile::CpuPressure | StatFile::IoPressure | StatFile::MemoryPressure
        )
    }
}

impl fmt::Display for StatFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`StatFile`]s.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct FileSet(u64);

impl FileSet {
    pub const fn empty() -> Self {
        FileSet(0)
    }

    pub fn all() -> Self {
        StatFile::ALL.iter().copied().collect()
    }

    pub fn contains(self, f: StatFile) -> bool {
        self.0 & (1 << f as u64) != 0
    }

    pub fn insert(&mut self, f: StatFile) {
        self.0 |= 1 << f as u64;
    }

    pub fn remove(&mut self, f: StatFile) {
        self.0 &= !(1 << f as u64);
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, o: FileSet) -> FileSet {
        FileSet(self.0 | o.0)
    }

    pub fn intersection(self, o: FileSet) -> FileSet {
        FileSet(self.0 & o.0)
    }

    pub fn difference(self, o: FileSet) -> FileSet {
        FileSet(self.0 & !o.0)
    }

    pub fn iter(self) -> impl Iterator<Item = StatFile> {
        StatFile::ALL
            .iter()
            .copied()
            .filter(move |f| self.contains(*f))
    }
}

impl FromIterator<StatFile> for FileSet {
    fn from_iter<I: IntoIterator<Item = StatFile>>(iter: I) -> Self {
        let mut s = FileSet::empty();
        for f in iter {
            s.insert(f);
        }
        s
    }
}

impl fmt::Debug for FileSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}
