//! Which processes a recorder starts, from BSD process accounting
//! (acct(2)): the kernel appends one record per process as it exits, with
//! its pid, parent pid and name. Counted over the bill's window, the
//! recorder's descendants show what each sample runs (below 0.9:
//! `lsb_release` and its helpers, `getconf`).

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::path::PathBuf;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

/// `struct acct_v3` (include/uapi/linux/acct.h): 64 bytes.
const RECORD: usize = 64;
const VERSION: u8 = 3;

/// Accounting on, into a file of our own, until [`Accounting::finish`].
pub struct Accounting {
    file: PathBuf,
}

impl Accounting {
    /// Fails where the kernel has no BSD process accounting (ENOSYS), we
    /// may not turn it on (CAP_SYS_PACCT), or it would write nothing: the
    /// kernel suspends it while its file's filesystem has less free space
    /// than kernel.acct's first value (percent), silently.
    pub fn start(file: &Path) -> Result<Accounting> {
        std::fs::write(file, b"")?;
        let resume = std::fs::read_to_string("/proc/sys/kernel/acct")
            .context("reading kernel.acct")?
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("kernel.acct: no resume percentage")?;
        let fs = nix::sys::statvfs::statvfs(file).context("statvfs of the accounting file")?;
        let free_pct = fs.blocks_available() as u64 * 100 / (fs.blocks() as u64).max(1);
        if free_pct <= resume {
            bail!(
                "BSD process accounting would count nothing: {} has {free_pct}% free, \
                 the kernel needs more than {resume}% (kernel.acct); put the file elsewhere (TMPDIR)",
                file.display()
            );
        }
        set(Some(file)).context("acct(2): BSD process accounting")?;
        Ok(Accounting {
            file: file.to_path_buf(),
        })
    }

    /// Turns accounting off; the processes descended from `pid` that
    /// exited meanwhile, counted by name.
    pub fn finish(self, pid: u32) -> Result<BTreeMap<String, u64>> {
        set(None)?;
        let data = std::fs::read(&self.file)?;
        let _ = std::fs::remove_file(&self.file);
        let mut by_name = BTreeMap::new();
        for comm in descendants(&parse(&data)?, pid) {
            *by_name.entry(comm).or_insert(0) += 1;
        }
        Ok(by_name)
    }
}

impl Drop for Accounting {
    fn drop(&mut self) {
        // Off even when the run failed between start and finish.
        let _ = set(None);
    }
}

fn set(file: Option<&Path>) -> Result<()> {
    let path = file
        .map(|f| CString::new(f.as_os_str().as_bytes()))
        .transpose()?;
    // SAFETY: acct takes a NUL-terminated path or NULL (off).
    let rc = unsafe { libc::acct(path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr())) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// (pid, parent pid, name) of each record.
fn parse(data: &[u8]) -> Result<Vec<(u32, u32, String)>> {
    anyhow::ensure!(
        data.len().is_multiple_of(RECORD),
        "accounting file of {} bytes: not whole acct_v3 records",
        data.len()
    );
    data.chunks_exact(RECORD)
        .map(|r| {
            anyhow::ensure!(
                r[1] & 0x7f == VERSION,
                "accounting record version {}, not 3",
                r[1]
            );
            let u32_at = |o: usize| u32::from_ne_bytes(r[o..o + 4].try_into().unwrap());
            let comm = &r[48..64];
            let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            Ok((
                u32_at(16),
                u32_at(20),
                String::from_utf8_lossy(&comm[..end]).into_owned(),
            ))
        })
        .collect()
}

/// Names of the records descended from `pid` (children exit before the
/// parent that waits for them: repeat until no more join).
fn descendants(records: &[(u32, u32, String)], pid: u32) -> Vec<String> {
    let mut family: HashSet<u32> = HashSet::from([pid]);
    let mut taken = vec![false; records.len()];
    loop {
        let before = family.len();
        for (i, (p, parent, _)) in records.iter().enumerate() {
            if !taken[i] && family.contains(parent) {
                family.insert(*p);
                taken[i] = true;
            }
        }
        if family.len() == before {
            break;
        }
    }
    records
        .iter()
        .zip(taken)
        .filter(|(_, t)| *t)
        .map(|((_, _, c), _)| c.clone())
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    /// Accounting sees a child's grandchildren by name, and nothing else.
    #[test]
    fn counts_a_process_tree() {
        if bstats_testkit::skip_unless_root("turns on process accounting") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let acct = match Accounting::start(&dir.path().join("acct")) {
            Ok(a) => a,
            Err(e) => {
                println!("skipped: {e:#}");
                return;
            }
        };
        std::process::Command::new("true").status().unwrap();
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "true; true; sleep 0; exit 0"])
            .spawn()
            .unwrap();
        let pid = sh.id();
        sh.wait().unwrap();
        let seen = acct.finish(std::process::id()).unwrap();
        assert_eq!(seen.get("sleep"), Some(&1), "{seen:?}");
        assert_eq!(seen.get("true"), Some(&1), "{seen:?}");
        assert!(
            seen.contains_key("sh") || seen.contains_key("dash"),
            "{seen:?}"
        );
        // Ours now, not the (exited) shell's: nothing counted for it.
        let theirs = {
            let acct = Accounting::start(&dir.path().join("acct2")).unwrap();
            std::process::Command::new("true").status().unwrap();
            acct.finish(pid).unwrap()
        };
        assert!(theirs.is_empty(), "another process's children: {theirs:?}");
    }

    #[test]
    fn descendants_follow_parents() {
        let r = |p, pp, c: &str| (p, pp, c.to_string());
        // Exit order: grandchild, child, unrelated.
        let recs = [r(12, 11, "cut"), r(11, 10, "sh"), r(20, 1, "cron")];
        let mut d = descendants(&recs, 10);
        d.sort();
        assert_eq!(d, ["cut", "sh"]);
    }
}
