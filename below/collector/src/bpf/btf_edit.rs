//! Synthetic kernels for tests: raw BTF (a kernel's /sys/kernel/btf/vmlinux)
//! with one name renamed or one enum value removed, so the BTF says the
//! kernel lacks that member, enum value or function. The format: a header
//! (magic, version, flags, header length, then the type and string
//! sections' offsets and lengths), the types (a 12-byte `btf_type` each,
//! then data whose size depends on the kind and its vlen), the strings.

const MAGIC: u16 = 0xeb9f;

/// What to take away from the BTF.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Edit<'a> {
    /// Rename member `member` of every struct named `ty`.
    Member { ty: &'a str, member: &'a str },
    /// Rename value `value` of every enum named `ty`.
    EnumVal { ty: &'a str, value: &'a str },
    /// Remove value `value` of every enum named `ty` (as a config would).
    RemoveEnumVal { ty: &'a str, value: &'a str },
    /// Rename every function named `name`.
    Func { name: &'a str },
    /// Set the element count of the array that is member `member` of
    /// struct `ty`.
    ArrayLen {
        ty: &'a str,
        member: &'a str,
        len: u32,
    },
}

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// Bytes after a type's 12-byte header, and the size of each of its vlen
/// entries (members, values, parameters).
fn extra(kind: u32) -> (usize, usize) {
    match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => (4, 0),
        KIND_ARRAY => (12, 0),
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => (0, 12),
        KIND_ENUM | KIND_FUNC_PROTO => (0, 8),
        _ => (0, 0),
    }
}

struct Raw {
    data: Vec<u8>,
    hdr_len: usize,
}

impl Raw {
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.data[at..at + 4].try_into().unwrap())
    }

    fn set_u32(&mut self, at: usize, v: u32) {
        self.data[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// (type section start, its length, string section start, its length).
    fn sections(&self) -> (usize, usize, usize, usize) {
        let h = |i: usize| self.u32_at(8 + 4 * i) as usize;
        (self.hdr_len + h(0), h(1), self.hdr_len + h(2), h(3))
    }

    fn name(&self, off: u32) -> &[u8] {
        let (_, _, strs, _) = self.sections();
        let s = &self.data[strs + off as usize..];
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    /// Each type: (its id, its offset, kind, vlen).
    fn types(&self) -> Vec<(u32, usize, u32, usize)> {
        let (start, len, _, _) = self.sections();
        let mut out = Vec::new();
        let mut at = start;
        let mut id = 1;
        while at < start + len {
            let info = self.u32_at(at + 4);
            let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            out.push((id, at, kind, vlen));
            let (fixed, each) = extra(kind);
            at += 12 + fixed + each * vlen;
            id += 1;
        }
        out
    }

    /// Appends a string; its offset.
    fn add_string(&mut self, s: &[u8]) -> u32 {
        let (_, _, strs, str_len) = self.sections();
        assert_eq!(strs + str_len, self.data.len(), "strings are not last");
        self.data.extend_from_slice(s);
        self.data.push(0);
        self.set_u32(20, (str_len + s.len() + 1) as u32);
        str_len as u32
    }

    /// The name_off slots of the entries of types of `kinds` named `ty`
    /// whose name is `name`.
    fn entries(&self, kinds: &[u32], ty: &str, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        for (_, at, kind, vlen) in self.types() {
            if !kinds.contains(&kind) || self.name(self.u32_at(at)) != ty.as_bytes() {
                continue;
            }
            let (fixed, each) = extra(kind);
            for i in 0..vlen {
                let e = at + 12 + fixed + i * each;
                if self.name(self.u32_at(e)) == name.as_bytes() {
                    out.push(e);
                }
            }
        }
        out
    }

    /// The name_off slots of members named `name` of struct `ty`, also in
    /// its anonymous structs and unions (CO-RE looks there too).
    fn members(&self, ty: &str, name: &str) -> Vec<usize> {
        let types = self.types();
        let mut todo: Vec<usize> = (types.iter())
            .filter(|t| t.2 == KIND_STRUCT && self.name(self.u32_at(t.1)) == ty.as_bytes())
            .map(|t| t.1)
            .collect();
        let mut out = Vec::new();
        while let Some(at) = todo.pop() {
            let vlen = (self.u32_at(at + 4) & 0xffff) as usize;
            for i in 0..vlen {
                let m = at + 12 + i * 12;
                let m_name = self.u32_at(m);
                if m_name != 0 && self.name(m_name) == name.as_bytes() {
                    out.push(m);
                } else if m_name == 0 {
                    let id = self.u32_at(m + 4);
                    if let Some(t) = types.iter().find(|t| t.0 == id) {
                        if t.2 == KIND_STRUCT || t.2 == KIND_UNION {
                            todo.push(t.1);
                        }
                    }
                }
            }
        }
        out
    }

    fn rename(&mut self, slots: &[usize], old: &str) {
        let new = self.add_string(format!("bstats_gone_{old}").as_bytes());
        for &s in slots {
            self.set_u32(s, new);
        }
    }
}

/// `btf` with `edit` applied; Err when it names nothing in `btf`.
pub(crate) fn edit(btf: &[u8], edit: Edit) -> Result<Vec<u8>, String> {
    if btf.len() < 24 || u16::from_le_bytes([btf[0], btf[1]]) != MAGIC {
        return Err("not raw BTF".into());
    }
    let mut raw = Raw {
        data: btf.to_vec(),
        hdr_len: u32::from_le_bytes(btf[4..8].try_into().unwrap()) as usize,
    };
    let missing = || Err(format!("{edit:?}: not in the BTF"));
    match edit {
        Edit::Member { ty, member } => {
            let slots = raw.members(ty, member);
            if slots.is_empty() {
                return missing();
            }
            raw.rename(&slots, member);
        }
        Edit::EnumVal { ty, value } => {
            let slots = raw.entries(&[KIND_ENUM, KIND_ENUM64], ty, value);
            if slots.is_empty() {
                return missing();
            }
            raw.rename(&slots, value);
        }
        Edit::Func { name } => {
            let slots: Vec<usize> = (raw.types().into_iter())
                .filter(|&(_, at, kind, _)| {
                    kind == KIND_FUNC && raw.name(raw.u32_at(at)) == name.as_bytes()
                })
                .map(|(_, at, _, _)| at)
                .collect();
            if slots.is_empty() {
                return missing();
            }
            raw.rename(&slots, name);
        }
        Edit::RemoveEnumVal { ty, value } => {
            // Types are found by id, not offset: the type section may shrink.
            let mut slots = raw.entries(&[KIND_ENUM, KIND_ENUM64], ty, value);
            if slots.is_empty() {
                return missing();
            }
            slots.sort_unstable_by(|a, b| b.cmp(a));
            for slot in slots {
                let (_, at, kind, _) = (raw.types().into_iter())
                    .rfind(|&(_, at, _, _)| at < slot)
                    .expect("an entry follows its type");
                let size = extra(kind).1;
                let info = raw.u32_at(at + 4);
                raw.set_u32(at + 4, info - 1);
                raw.data.drain(slot..slot + size);
                let (_, type_len, _, _) = raw.sections();
                raw.set_u32(12, (type_len - size) as u32);
                let str_off = raw.u32_at(16);
                raw.set_u32(16, str_off - size as u32);
            }
        }
        Edit::ArrayLen { ty, member, len } => {
            let slots = raw.entries(&[KIND_STRUCT], ty, member);
            let types = raw.types();
            let arrays: Vec<usize> = slots
                .iter()
                .filter_map(|&s| {
                    let id = raw.u32_at(s + 4);
                    let &(_, at, kind, _) = types.iter().find(|t| t.0 == id)?;
                    (kind == KIND_ARRAY).then_some(at + 12 + 8)
                })
                .collect();
            if arrays.is_empty() {
                return missing();
            }
            for a in arrays {
                raw.set_u32(a, len);
            }
        }
    }
    Ok(raw.data)
}
