//! Parsers for the cgroup v2 text files a below `CgroupSample` holds.
//!
//! Each parser takes the whole file as `&str` (read into a reused buffer by
//! the caller) and walks it with borrowed slices: nothing is allocated per
//! line. Errors carry the 1-based line number (0 = the file as a whole) so
//! the caller can report `path:line`.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt;

use cgroupfs::CgroupStat;
use cgroupfs::CpuMax;
use cgroupfs::CpuStat;
use cgroupfs::Cpuset;
use cgroupfs::IoStat;
use cgroupfs::MemNodes;
use cgroupfs::MemoryEvents;
use cgroupfs::MemoryEventsLocal;
use cgroupfs::MemoryNumaStat;
use cgroupfs::MemoryStat;
use cgroupfs::PressureMetrics;

use self::keys::*;
use crate::cgroupfs_ext;

mod keys;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number; 0 when the file as a whole is at fault.
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "line {}: {}", self.line, self.msg)
        }
    }
}

impl std::error::Error for ParseError {}

pub type Result<T> = std::result::Result<T, ParseError>;

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T> {
    Err(ParseError {
        line,
        msg: msg.into(),
    })
}

/// Non-empty lines with their 1-based numbers.
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn first_line(text: &str) -> Result<&str> {
    match text.lines().next() {
        Some(l) if !l.trim().is_empty() => Ok(l.trim()),
        _ => err(0, "empty file"),
    }
}

fn parse_num<T: std::str::FromStr>(line: usize, s: &str) -> Result<T> {
    s.parse()
        .or_else(|_| err(line, format!("invalid number {:?}", s)))
}

/// A file holding one unsigned integer (memory.current, pids.current …).
pub fn single_u64(text: &str) -> Result<u64> {
    parse_num(1, first_line(text)?)
}

/// memory.current and memory.swap.current, which below keeps as i64.
pub fn single_i64(text: &str) -> Result<i64> {
    let line = first_line(text)?;
    let v: u64 = parse_num(1, line)?;
    i64::try_from(v).or_else(|_| err(1, format!("value out of range {:?}", line)))
}

/// A file holding one unsigned integer or "max" (-1), as below represents
/// limits (memory.max, pids.max …).
pub fn u64_or_max(text: &str) -> Result<i64> {
    max_or_num(1, first_line(text)?)
}

fn max_or_num(line: usize, s: &str) -> Result<i64> {
    if s == "max" {
        return Ok(-1);
    }
    let v: u64 = parse_num(line, s)?;
    i64::try_from(v).or_else(|_| err(line, format!("value out of range {:?}", s)))
}

/// cpu.weight
pub fn single_u32(text: &str) -> Result<u32> {
    parse_num(1, first_line(text)?)
}

/// cpu.max: "<max|quota> <period>".
pub fn cpu_max(text: &str) -> Result<CpuMax> {
    let line = first_line(text)?;
    let mut it = line.split_ascii_whitespace();
    match (it.next(), it.next(), it.next()) {
        (Some(max), Some(period), None) => Ok(CpuMax {
            max_usec: max_or_num(1, max)?,
            period_usec: parse_num(1, period)?,
        }),
        _ => err(
            1,
            format!("expected \"<quota|max> <period>\", got {:?}", line),
        ),
    }
}

/// cpuset.cpus / cpuset.mems and their .effective: "0-3,8,10-11" or empty.
fn id_list(text: &str) -> Result<BTreeSet<u32>> {
    let line = text.lines().next().unwrap_or("").trim();
    let mut ids = BTreeSet::new();
    if line.is_empty() {
        return Ok(ids);
    }
    for part in line.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (parse_num::<u32>(1, a)?, parse_num::<u32>(1, b)?),
            None => {
                let v = parse_num::<u32>(1, part)?;
                (v, v)
            }
        };
        if first > last {
            return err(1, format!("invalid range {:?}", part));
        }
        ids.extend(first..=last);
    }
    Ok(ids)
}

pub fn cpuset(text: &str) -> Result<Cpuset> {
    Ok(Cpuset {
        cpus: id_list(text)?,
    })
}

pub fn mem_nodes(text: &str) -> Result<MemNodes> {
    Ok(MemNodes {
        nodes: id_list(text)?,
    })
}

/// cgroup.controllers / cgroup.subtree_control: space-separated names or empty.
pub fn controllers(text: &str) -> Result<BTreeSet<String>> {
    Ok(text
        .lines()
        .next()
        .unwrap_or("")
        .split_ascii_whitespace()
        .map(str::to_owned)
        .collect())
}

/// Calls `set(key, value)` for each "key value" line of a flat keyed file
/// (cpu.stat, memory.stat, memory.events, cgroup.stat). `set` returns
/// whether it knew the key: unknown keys are skipped (kernels add lines), but
/// a file with no known key at all is malformed.
pub fn flat_keyed(text: &str, mut set: impl FnMut(&str, u64) -> bool) -> Result<()> {
    let mut known = 0;
    for (n, line) in numbered_lines(text) {
        let mut it = line.split_ascii_whitespace();
        let (Some(key), Some(val), None) = (it.next(), it.next(), it.next()) else {
            return err(n, format!("expected \"<key> <value>\", got {:?}", line));
        };
        if set(key, parse_num(n, val)?) {
            known += 1;
        }
    }
    if known == 0 {
        return err(0, "no known keys");
    }
    Ok(())
}

/// Assigns `$val` to the `Option` field of `$s` named `$key`; evaluates to
/// whether the key named one of the listed fields.
macro_rules! set_named_field {
    ($s:expr, $key:expr, $val:expr, [$($field:ident),+ $(,)?]) => {
        match $key {
            $(stringify!($field) => {
                $s.$field = Some($val);
                true
            })+
            _ => false,
        }
    };
}

pub fn set_cpu_stat(s: &mut CpuStat, key: &str, v: u64) -> bool {
    set_named_field!(
        s,
        key,
        v,
        [
            usage_usec,
            user_usec,
            system_usec,
            nr_periods,
            nr_throttled,
            throttled_usec,
        ]
    )
}

fn set_cgroup_stat(s: &mut CgroupStat, key: &str, v: u64) -> bool {
    match u32::try_from(v) {
        Ok(v) => set_named_field!(s, key, v, [nr_descendants, nr_dying_descendants]),
        Err(_) => false,
    }
}

fn keyed<T: Default>(text: &str, set: fn(&mut T, &str, u64) -> bool) -> Result<T> {
    let mut s = T::default();
    flat_keyed(text, |k, v| set(&mut s, k, v))?;
    Ok(s)
}

pub fn cpu_stat(text: &str) -> Result<CpuStat> {
    keyed(text, set_cpu_stat)
}

pub fn memory_stat(text: &str) -> Result<MemoryStat> {
    keyed(text, set_memory_stat).map(Into::into)
}

pub fn memory_events(text: &str) -> Result<MemoryEvents> {
    keyed(text, set_memory_events).map(Into::into)
}

pub fn memory_events_local(text: &str) -> Result<MemoryEventsLocal> {
    keyed(text, set_memory_events_local).map(Into::into)
}

pub fn cgroup_stat(text: &str) -> Result<CgroupStat> {
    keyed(text, set_cgroup_stat)
}

/// Iterates the `key=value` items after the first word of a line.
fn kv_items(n: usize, rest: &str) -> impl Iterator<Item = Result<(&str, &str)>> {
    rest.split_ascii_whitespace().map(move |item| {
        item.split_once('=').ok_or_else(|| ParseError {
            line: n,
            msg: format!("expected key=value, got {:?}", item),
        })
    })
}

fn split_head(line: &str) -> (&str, &str) {
    let line = line.trim_start();
    line.split_once(char::is_whitespace).unwrap_or((line, ""))
}

/// cpu/io/memory.pressure: a "some" line and, except for the root's
/// cpu.pressure on old kernels, a "full" line.
pub fn pressure(text: &str) -> Result<(PressureMetrics, Option<PressureMetrics>)> {
    let (mut some, mut full) = (None, None);
    for (n, line) in numbered_lines(text) {
        let (kind, rest) = split_head(line);
        let mut m = PressureMetrics::default();
        for kv in kv_items(n, rest) {
            let (k, v) = kv?;
            match k {
                "avg10" => m.avg10 = Some(parse_num(n, v)?),
                "avg60" => m.avg60 = Some(parse_num(n, v)?),
                "avg300" => m.avg300 = Some(parse_num(n, v)?),
                "total" => m.total = Some(parse_num(n, v)?),
                _ => {}
            }
        }
        if m == PressureMetrics::default() {
            return err(n, format!("no pressure values in {:?}", line));
        }
        match kind {
            "some" => some = Some(m),
            "full" => full = Some(m),
            _ => return err(n, format!("unknown pressure line {:?}", kind)),
        }
    }
    match some {
        Some(some) => Ok((some, full)),
        None => err(0, "no \"some\" line"),
    }
}

/// io.stat: "<maj:min> rbytes=… wbytes=… …" per device; lines without values
/// (devices with no I/O yet) are skipped.
pub fn io_stat(text: &str) -> Result<BTreeMap<String, IoStat>> {
    let mut map = BTreeMap::new();
    for (n, line) in numbered_lines(text) {
        let (dev, rest) = split_head(line);
        if rest.trim().is_empty() {
            continue;
        }
        let mut s = IoStat::default();
        for kv in kv_items(n, rest) {
            let (k, v) = kv?;
            let slot = match k {
                "rbytes" => &mut s.rbytes,
                "wbytes" => &mut s.wbytes,
                "rios" => &mut s.rios,
                "wios" => &mut s.wios,
                "dbytes" => &mut s.dbytes,
                "dios" => &mut s.dios,
                "cost.usage" => &mut s.cost_usage,
                "cost.wait" => &mut s.cost_wait,
                "cost.indebt" => &mut s.cost_indebt,
                "cost.indelay" => &mut s.cost_indelay,
                _ => continue,
            };
            *slot = Some(parse_num(n, v)?);
        }
        if s == IoStat::default() {
            return err(n, format!("no known io.stat keys in {:?}", line));
        }
        map.insert(dev.to_owned(), s);
    }
    Ok(map)
}

/// memory.numa_stat: "<key> N0=<v> N1=<v> …" → per-node stats.
pub fn numa_stat(text: &str) -> Result<BTreeMap<u32, MemoryNumaStat>> {
    let mut map: BTreeMap<u32, cgroupfs_ext::MemoryNumaStat> = BTreeMap::new();
    for (n, line) in numbered_lines(text) {
        let (key, rest) = split_head(line);
        if rest.trim().is_empty() {
            return err(n, format!("no per-node values in {:?}", line));
        }
        for kv in kv_items(n, rest) {
            let (node, v) = kv?;
            let Some(node) = node.strip_prefix('N') else {
                return err(n, format!("expected N<node>=<value>, got {:?}", node));
            };
            let node: u32 = parse_num(n, node)?;
            let v: u64 = parse_num(n, v)?;
            set_numa_stat(map.entry(node).or_default(), key, v);
        }
    }
    if map.is_empty()
        || map
            .values()
            .any(|s| *s == cgroupfs_ext::MemoryNumaStat::default())
    {
        return err(0, "no known keys");
    }
    Ok(cgroupfs_ext::numa_stat_09(map))
}

#[cfg(test)]
#[path = "parse_test.rs"]
mod test;
