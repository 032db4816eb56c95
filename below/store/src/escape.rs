//! Names and command lines made safe to print: a cgroup name or an argv
//! is chosen by whoever made it, and a terminal acts on the control
//! characters in it (`ESC ]0;title BEL` retitles the window, `ESC [2J`
//! clears it). Anything we print from a sample goes through here first.
//!
//! A string without control characters is left as it is. In one that has
//! some, each control character (C0, DEL, C1) shows as `\xNN` (C1 as
//! `\u{NN}`) and `\` as `\\`, the way the collector shows names that are
//! not UTF-8: nothing is dropped, and the original can be read back.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Context;
use anyhow::Result;
use serde_cbor::Value;

/// `s` with its control characters escaped (see the module's doc).
pub fn for_terminal(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Every text string of a decoded CBOR value escaped in place, map keys
/// included. Two keys that come out alike (`a<ESC>` escaped, and a name
/// spelling out `a\x1b`) both stay: the later one gets `#2`, `#3`, ...
pub fn value_for_terminal(v: &mut Value) {
    match v {
        Value::Text(s) => {
            if let Cow::Owned(e) = for_terminal(s) {
                *s = e;
            }
        }
        // A byte string becomes a String field if it is UTF-8 (serde's
        // String visitor takes bytes): escaped as text, kept as bytes.
        Value::Bytes(b) => {
            if let Ok(Cow::Owned(e)) = std::str::from_utf8(b).map(for_terminal) {
                *b = e.into_bytes();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(value_for_terminal),
        Value::Tag(_, inner) => value_for_terminal(inner),
        Value::Map(m) => {
            let needs = m.keys().any(key_has_control);
            m.values_mut().for_each(value_for_terminal);
            if needs {
                let old = std::mem::take(m);
                *m = escape_keys(old);
            }
        }
        _ => {}
    }
}

/// A map key a String field would take with a control character: text,
/// or a byte string that is UTF-8 (serde reads one into a String too).
fn key_has_control(k: &Value) -> bool {
    match k {
        Value::Text(s) => has_control(s),
        Value::Bytes(b) => std::str::from_utf8(b).is_ok_and(has_control),
        _ => false,
    }
}

fn escape_keys(old: BTreeMap<Value, Value>) -> BTreeMap<Value, Value> {
    let mut out = BTreeMap::new();
    // Keys without control characters first: they keep their names.
    let (plain, escaped): (Vec<_>, Vec<_>) =
        old.into_iter().partition(|(k, _)| !key_has_control(k));
    out.extend(plain);
    for (mut k, v) in escaped {
        value_for_terminal(&mut k);
        // Escaped, a byte-string key is the text a String field reads.
        if let Value::Bytes(b) = &k {
            k = Value::Text(String::from_utf8_lossy(b).into_owned());
        }
        if out.contains_key(&k) {
            if let Value::Text(s) = &k {
                let base = s.clone();
                k = (2..)
                    .map(|n| Value::Text(format!("{base}#{n}")))
                    .find(|k| !out.contains_key(k))
                    .expect("an unused suffix");
            }
        }
        out.insert(k, v);
    }
    out
}

/// Whether a CBOR item holds a text string with a control character:
/// a walk over the encoding, without decoding it. True when unsure
/// (indefinite lengths, which serde_cbor does not write, or truncated
/// input): the caller then takes the slow, always right, way.
pub fn cbor_has_control(bytes: &[u8]) -> bool {
    let mut at = 0usize;
    // Items still to read: one at the top.
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let Some(&head) = bytes.get(at) else {
            return true;
        };
        at += 1;
        let (major, info) = (head >> 5, head & 0x1f);
        let arg = match info {
            0..=23 => u64::from(info),
            24..=27 => {
                let n = 1usize << (info - 24);
                let Some(b) = bytes.get(at..at + n) else {
                    return true;
                };
                at += n;
                b.iter().fold(0u64, |a, b| a << 8 | u64::from(*b))
            }
            _ => return true,
        };
        match major {
            0 | 1 | 7 => {}
            2 | 3 => {
                let Some(s) = usize::try_from(arg)
                    .ok()
                    .and_then(|n| bytes.get(at..at.checked_add(n)?))
                else {
                    return true;
                };
                at += s.len();
                // Byte strings too: serde reads one into a String field
                // when it is UTF-8.
                if text_has_control(s) {
                    return true;
                }
            }
            4 => pending = pending.saturating_add(arg),
            5 => pending = pending.saturating_add(arg.saturating_mul(2)),
            _ => pending = pending.saturating_add(1),
        }
    }
    false
}

/// C0 and DEL bytes, and C1 characters in UTF-8 (`C2 80`..`C2 9F`).
fn text_has_control(s: &[u8]) -> bool {
    s.iter().any(|b| *b < 0x20 || *b == 0x7f)
        || s.windows(2)
            .any(|w| w[0] == 0xc2 && (0x80..0xa0).contains(&w[1]))
}

/// A `DataFrame` decoded from CBOR with every string escaped.
pub fn frame_from_cbor(bytes: &[u8]) -> Result<store::DataFrame> {
    if !cbor_has_control(bytes) {
        return serde_cbor::from_slice(bytes).context("Malformed CBOR frame");
    }
    let mut v: Value = serde_cbor::from_slice(bytes).context("Malformed CBOR frame")?;
    value_for_terminal(&mut v);
    serde_cbor::value::from_value(v).context("CBOR frame is not a below sample")
}

/// A sample with every string escaped (for the live view, whose samples
/// never go through a store).
pub fn sample_for_terminal(sample: model::Sample) -> Result<model::Sample> {
    let bytes = serde_cbor::to_vec(&sample).context("Failed to encode a sample")?;
    if !cbor_has_control(&bytes) {
        return Ok(sample);
    }
    let mut v: Value = serde_cbor::from_slice(&bytes).context("Failed to decode a sample")?;
    value_for_terminal(&mut v);
    serde_cbor::value::from_value(v).context("Failed to decode an escaped sample")
}

/// Whether `s` holds anything a terminal would act on.
pub fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn control_characters_show_escaped_and_reversibly() {
        assert_eq!(for_terminal("web.slice"), "web.slice");
        assert!(matches!(for_terminal("a\\x2db"), Cow::Borrowed(_)));
        assert_eq!(
            for_terminal("\x1b]0;TITLE\x07\x1b[31m"),
            "\\x1b]0;TITLE\\x07\\x1b[31m"
        );
        assert_eq!(for_terminal("a\\b\n"), "a\\\\b\\x0a");
        assert_eq!(for_terminal("\u{9b}2J\u{7f}"), "\\u{9b}2J\\x7f");
        assert_eq!(for_terminal("caf\u{e9}\t"), "caf\u{e9}\\x09");
        for s in ["\x1b[2J", "a\\x1b\x1b", "\u{85}x"] {
            assert!(!has_control(&for_terminal(s)), "{s:?}");
        }
    }

    #[test]
    fn control_characters_found_in_cbor_strings_only() {
        let enc = |v: &Value| serde_cbor::to_vec(v).unwrap();
        let text = |s: &str| Value::Text(s.into());
        // 0x1b and 0x07 as numbers are not strings.
        let plain = Value::Array(vec![
            Value::Integer(0x1b),
            Value::Integer(1 << 40),
            Value::Integer(0x07),
            Value::Bytes(b"ok".to_vec()),
            Value::Map([(text("k"), Value::Float(1.5))].into()),
            text("caf\u{e9}"),
        ]);
        assert!(!cbor_has_control(&enc(&plain)));
        for bad in ["a\x1b", "\u{9b}", "\x7f", "tab\t"] {
            let v = Value::Array(vec![Value::Integer(1), text(bad)]);
            assert!(cbor_has_control(&enc(&v)), "{bad:?}");
            let v = Value::Map([(text(bad), Value::Null)].into());
            assert!(cbor_has_control(&enc(&v)), "key {bad:?}");
        }
        assert!(cbor_has_control(&enc(&Value::Bytes(vec![0x1b]))));
        // Unsure is true: cut short, indefinite length.
        let cut = enc(&plain);
        assert!(cbor_has_control(&cut[..cut.len() - 1]));
        assert!(cbor_has_control(&[0x9f, 0xff]));
    }

    /// A command line stored as a CBOR byte string (a hostile store can):
    /// serde reads it into the String field, so it is escaped too (found
    /// by store-fuzz).
    #[test]
    fn a_name_as_a_byte_string_is_escaped() {
        let mut sample = model::Sample::default();
        let pid = procfs::PidInfo {
            exe_path: Some("\x1b[2J".into()),
            ..Default::default()
        };
        sample.processes.insert(7, pid);
        let mut children = BTreeMap::new();
        children.insert("c0\x1b]0;T\x07".to_string(), model::CgroupSample::default());
        sample.cgroup.children = Some(children);
        let mut v = serde_cbor::value::to_value(store::DataFrame { sample }).unwrap();
        // Values and map keys alike.
        fn to_bytes(v: &mut Value) {
            match v {
                Value::Text(s) if s.contains('\x1b') => *v = Value::Bytes(s.clone().into_bytes()),
                Value::Array(a) => a.iter_mut().for_each(to_bytes),
                Value::Map(m) => {
                    let old = std::mem::take(m);
                    for (mut k, mut val) in old {
                        to_bytes(&mut k);
                        to_bytes(&mut val);
                        m.insert(k, val);
                    }
                }
                _ => {}
            }
        }
        to_bytes(&mut v);
        let bytes = serde_cbor::to_vec(&v).unwrap();
        assert!(cbor_has_control(&bytes));
        let f = frame_from_cbor(&bytes).unwrap();
        assert_eq!(f.sample.processes[&7].exe_path.as_deref(), Some("\\x1b[2J"));
        let names: Vec<&String> = f.sample.cgroup.children.as_ref().unwrap().keys().collect();
        assert_eq!(names, ["c0\\x1b]0;T\\x07"]);
    }

    #[test]
    fn names_and_argv_of_a_sample_are_escaped() {
        let mut sample = model::Sample::default();
        let child = model::CgroupSample {
            memory_current: Some(1),
            ..Default::default()
        };
        let mut children = BTreeMap::new();
        children.insert("evil\x1b]0;TITLE\x07".to_string(), child.clone());
        // Spells out what the escaped name becomes: both must stay.
        children.insert("evil\\x1b]0;TITLE\\x07".to_string(), child);
        sample.cgroup.children = Some(children);
        let mut pid = procfs::PidInfo {
            cmdline_vec: Some(vec!["sh".into(), "\x1b]0;x\x07\x1b[2J".into()]),
            ..Default::default()
        };
        pid.stat.comm = Some("a\x1b[31m".into());
        sample.processes.insert(7, pid);
        let s = sample_for_terminal(sample).unwrap();
        let names: Vec<&String> = s.cgroup.children.as_ref().unwrap().keys().collect();
        assert_eq!(
            names,
            ["evil\\x1b]0;TITLE\\x07", "evil\\x1b]0;TITLE\\x07#2"]
        );
        let p = &s.processes[&7];
        assert_eq!(p.cmdline_vec.as_ref().unwrap()[1], "\\x1b]0;x\\x07\\x1b[2J");
        assert_eq!(p.stat.comm.as_deref(), Some("a\\x1b[31m"));
    }
}
