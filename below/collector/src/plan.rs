//! Which backend serves each stat file, and why.

use std::fmt;

use anyhow::bail;
use anyhow::Result;
use serde::Deserialize;
use serde::Serialize;

use crate::FileSet;
use crate::NotServed;
use crate::Served;
use crate::StatFile;

/// What the user asked for (`--cgroup-backend`, config `cgroup_backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// Per file: BPF, else stream, else plain read.
    #[default]
    Auto,
    Bpf,
    Stream,
    Read,
}

/// The name `--cgroup-backend` takes.
impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = clap::ValueEnum::to_possible_value(self).expect("no value is skipped");
        f.write_str(name.get_name())
    }
}

/// A backend that serves files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Bpf,
    Stream,
    Read,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Bpf => "bpf",
            BackendKind::Stream => "stream",
            BackendKind::Read => "read",
        })
    }
}

/// What a backend can serve on this kernel: the files, how fresh each is,
/// and for each file it cannot serve, why. `Err` when it cannot run at all.
#[derive(Clone, Debug, Default)]
pub struct Support {
    pub files: FileSet,
    pub served: Vec<(StatFile, Served)>,
    pub not_served: Vec<(StatFile, NotServed)>,
}

pub type Capability = std::result::Result<Support, NotServed>;

impl Support {
    fn served(&self, f: StatFile) -> Option<&Served> {
        self.served.iter().find(|(g, _)| *g == f).map(|(_, s)| s)
    }

    fn why_not(&self, f: StatFile) -> NotServed {
        self.not_served
            .iter()
            .find(|(g, _)| *g == f)
            .map_or(NotServed::NotAskedFor, |(_, why)| why.clone())
    }
}

/// A backend's refusal of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub backend: BackendKind,
    pub why: NotServed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChoice {
    pub file: StatFile,
    pub backend: BackendKind,
    /// What `served` or `not_served` say, for people.
    pub reason: String,
    /// How fresh the backend's values are (None: plain read).
    #[serde(default)]
    pub served: Option<Served>,
    /// Why each backend tried before plain read did not serve it.
    #[serde(default)]
    pub not_served: Vec<Refusal>,
}

/// One choice per stat file, in [`StatFile::ALL`] order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub files: Vec<FileChoice>,
}

impl Plan {
    /// Chooses per file. `bpf` and `stream` are what probing found.
    pub fn choose(choice: BackendChoice, bpf: &Capability, stream: &Capability) -> Result<Plan> {
        let tiers: &[(BackendKind, &Capability)] = match choice {
            BackendChoice::Auto => &[(BackendKind::Bpf, bpf), (BackendKind::Stream, stream)],
            BackendChoice::Bpf => &[(BackendKind::Bpf, bpf)],
            BackendChoice::Stream => &[(BackendKind::Stream, stream)],
            BackendChoice::Read => &[],
        };
        if choice != BackendChoice::Auto {
            if let Some((kind, Err(why))) = tiers.first() {
                bail!("--cgroup-backend {} is unavailable: {}", kind, why);
            }
        }
        let files = StatFile::ALL
            .iter()
            .map(|&file| {
                let mut not_served = Vec::new();
                for (kind, cap) in tiers {
                    let why = match cap {
                        Ok(s) if s.files.contains(file) => {
                            let served = s.served(file).cloned();
                            let reason = match &served {
                                Some(how) => format!("supported by this kernel ({how})"),
                                None => "supported by this kernel".to_owned(),
                            };
                            return FileChoice {
                                file,
                                backend: *kind,
                                reason,
                                served,
                                not_served,
                            };
                        }
                        Ok(s) => s.why_not(file),
                        Err(e) => e.clone(),
                    };
                    not_served.push(Refusal {
                        backend: *kind,
                        why,
                    });
                }
                let reason = if choice == BackendChoice::Read {
                    "--cgroup-backend read".to_owned()
                } else {
                    let said: Vec<String> = not_served
                        .iter()
                        .map(|r| format!("{}: {}", r.backend, r.why))
                        .collect();
                    said.join("; ")
                };
                FileChoice {
                    file,
                    backend: BackendKind::Read,
                    reason,
                    served: None,
                    not_served,
                }
            })
            .collect();
        Ok(Plan { files })
    }

    pub fn files_of(&self, kind: BackendKind) -> FileSet {
        self.files
            .iter()
            .filter(|c| c.backend == kind)
            .map(|c| c.file)
            .collect()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.files {
            writeln!(f, "  {:<24} {:<6} {}", c.file.name(), c.backend, c.reason)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn support(files: &[StatFile]) -> Capability {
        Ok(Support {
            files: files.iter().copied().collect(),
            not_served: vec![(StatFile::IoStat, NotServed::IoNotFlushable)],
            ..Default::default()
        })
    }

    #[test]
    fn auto_prefers_bpf_then_stream_then_read() {
        let bpf = support(&[StatFile::MemoryStat]);
        let stream = support(&[StatFile::MemoryStat, StatFile::CpuStat]);
        let p = Plan::choose(BackendChoice::Auto, &bpf, &stream).unwrap();
        let of = |f| p.files.iter().find(|c| c.file == f).unwrap().clone();
        assert_eq!(of(StatFile::MemoryStat).backend, BackendKind::Bpf);
        assert_eq!(of(StatFile::CpuStat).backend, BackendKind::Stream);
        let io = of(StatFile::IoStat);
        assert_eq!(io.backend, BackendKind::Read);
        assert_eq!(io.not_served[0].why, NotServed::IoNotFlushable);
        assert_eq!(io.not_served[0].backend, BackendKind::Bpf);
        assert_eq!(p.files.len(), StatFile::ALL.len());
    }

    #[test]
    fn forced_backend_fails_with_reason() {
        let why = NotServed::MissingKfunc("bpf_mem_cgroup_page_state".into());
        let bpf: Capability = Err(why.clone());
        let e = Plan::choose(BackendChoice::Bpf, &bpf, &support(&[])).unwrap_err();
        assert!(e.to_string().contains("bpf_mem_cgroup_page_state"), "{}", e);
        let p = Plan::choose(BackendChoice::Auto, &bpf, &Err(NotServed::NotAskedFor)).unwrap();
        assert_eq!(p.files_of(BackendKind::Read), FileSet::all());
        assert_eq!(p.files[0].not_served[0].why, why);
    }
}
