//! Finding the cgroup2 mount.

use std::path::Path;
use std::path::PathBuf;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

/// The first cgroup2 mount point in `/proc/self/mountinfo` (hybrid hosts
/// have it at /sys/fs/cgroup/unified, unified ones at /sys/fs/cgroup).
pub fn find_cgroup2_mount() -> Result<PathBuf> {
    match cgroup2_mount_in(&mountinfo()?) {
        Some(p) => Ok(p),
        None => bail!("No cgroup2 filesystem is mounted (none in /proc/self/mountinfo)"),
    }
}

/// Whether that mount accounts hugetlb to memcg (`memory_hugetlb_accounting`:
/// memory.stat then prints hugetlb); false when it cannot tell.
pub(crate) fn hugetlb_accounting() -> Result<bool> {
    Ok(cgroup2_in(&mountinfo()?)
        .is_some_and(|(_, opts)| opts.split(',').any(|o| o == "memory_hugetlb_accounting")))
}

fn mountinfo() -> Result<String> {
    std::fs::read_to_string("/proc/self/mountinfo").context("Failed to read /proc/self/mountinfo")
}

fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    cgroup2_in(mountinfo).map(|(point, _)| PathBuf::from(unescape_octal(point)))
}

/// The first cgroup2 line's mount point (escaped) and superblock options.
fn cgroup2_in(mountinfo: &str) -> Option<(&str, &str)> {
    mountinfo.lines().find_map(|line| {
        // "<id> <parent> <maj:min> <root> <mount point> <opts> [tags] - <fstype> <source> <super opts>"
        let (head, tail) = line.split_once(" - ")?;
        let mut tail = tail.split_ascii_whitespace();
        if tail.next()? != "cgroup2" {
            return None;
        }
        let point = head.split_ascii_whitespace().nth(4)?;
        Some((point, tail.nth(1).unwrap_or("")))
    })
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks that `root` is a readable directory on a cgroup2 filesystem.
pub fn check_cgroup2_root(root: &Path) -> Result<()> {
    let st = nix::sys::statfs::statfs(root)
        .with_context(|| format!("Cannot access cgroup root {}", root.display()))?;
    if st.filesystem_type() != nix::sys::statfs::CGROUP2_SUPER_MAGIC {
        bail!("{} is not a cgroup2 filesystem", root.display());
    }
    std::fs::read_dir(root)
        .with_context(|| format!("Cannot read cgroup root {}", root.display()))?;
    Ok(())
}

/// For tests that need root and a cgroup2 mount: the mount, or None after
/// saying why the test is skipped (`needs`: what the test does as root).
#[cfg(test)]
pub(crate) fn test_cgroup2(needs: &str) -> Option<PathBuf> {
    if bstats_testkit::skip_unless_root(needs) {
        return None;
    }
    let mount = find_cgroup2_mount();
    if mount.is_err() {
        println!("skipped: no cgroup2 mount");
    }
    mount.ok()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn finds_unified_mount_in_hybrid_layout() {
        let mi = "\
25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory
";
        assert_eq!(
            cgroup2_mount_in(mi),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn hugetlb_accounting_from_the_superblock_options() {
        let with = "32 31 0:27 / /sys/fs/cgroup rw shared:10 - cgroup2 cgroup2 rw,nsdelegate,memory_hugetlb_accounting\n";
        let opts = |mi| cgroup2_in(mi).map(|(_, o)| o);
        assert_eq!(opts(with), Some("rw,nsdelegate,memory_hugetlb_accounting"));
        assert_eq!(
            opts("1 2 0:1 / /x rw,memory_hugetlb_accounting - cgroup2 none rw\n"),
            Some("rw"),
            "the mount's own options are not the superblock's"
        );
    }

    #[test]
    fn none_without_cgroup2_and_unescapes() {
        assert_eq!(
            cgroup2_mount_in("1 2 0:1 / /x rw - cgroup cgroup rw\n"),
            None
        );
        assert_eq!(
            cgroup2_mount_in("1 2 0:1 / /a\\040b rw - cgroup2 none rw\n"),
            Some(PathBuf::from("/a b"))
        );
    }
}
