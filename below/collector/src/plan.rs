//! Which backend serves each stat file, and why.

use std::fmt;

use anyhow::bail;
use anyhow::Result;
use serde::Deserialize;
use serde::Serialize;

use crate::FileSet;
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

/// What a backend can serve on this kernel: the files, and for each file it
/// cannot serve, why. `Err` when it cannot run at all.
#[derive(Clone, Debug)]
pub struct Support {
    pub files: FileSet,
    pub reasons: Vec<(StatFile, String)>,
}

pub type Capability = std::result::Result<Support, String>;

impl Support {
    fn why_not(&self, f: StatFile) -> String {
        self.reasons
            .iter()
            .find(|(g, _)| *g == f)
            .map_or_else(|| "not served".to_owned(), |(_, r)| r.clone())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChoice {
    pub file: StatFile,
    pub backend: BackendKind,
    pub reason: String,
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
                let mut why_not = Vec::new();
                for (kind, cap) in tiers {
                    match cap {
                        Ok(s) if s.files.contains(file) => {
                            // A served file's reason is a note, if any.
                            let note = s.reasons.iter().find(|(g, _)| *g == file);
                            return FileChoice {
                                file,
                                backend: *kind,
                                reason: note.map_or_else(
                                    || "supported by this kernel".to_owned(),
                                    |(_, n)| format!("supported by this kernel ({})", n),
                                ),
                            };
                        }
                        Ok(s) => why_not.push(format!("{}: {}", kind, s.why_not(file))),
                        Err(e) => why_not.push(format!("{}: {}", kind, e)),
                    }
                }
                let reason = if choice == BackendChoice::Read {
                    "--cgroup-backend read".to_owned()
                } else {
                    why_not.join("; ")
                };
                FileChoice {
                    file,
                    backend: BackendKind::Read,
                    reason,
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
            reasons: vec![(StatFile::IoStat, "io cannot be flushed from BPF".into())],
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
        assert!(io.reason.contains("io cannot be flushed"), "{}", io.reason);
        assert_eq!(p.files.len(), StatFile::ALL.len());
    }

    #[test]
    fn forced_backend_fails_with_reason() {
        let bpf: Capability = Err("kernel lacks bpf_mem_cgroup_page_state".into());
        let e = Plan::choose(BackendChoice::Bpf, &bpf, &support(&[])).unwrap_err();
        assert!(e.to_string().contains("bpf_mem_cgroup_page_state"), "{}", e);
        let p = Plan::choose(BackendChoice::Auto, &bpf, &Err("no".into())).unwrap();
        assert_eq!(p.files_of(BackendKind::Read), FileSet::all());
        assert!(p.files[0].reason.contains("bpf_mem_cgroup_page_state"));
    }
}
