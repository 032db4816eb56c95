//! What tests craft to play a hostile writer: tars a snapshot could be,
//! index entries a store could hold. Used by this crate's unit tests and by
//! below's integration tests (`below/tests/hostile.rs`), hence compiled in
//! (hidden from the docs). Every helper panics on error, as a test would.

use std::fs::File;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::writer::crc32;

/// A crafted tar entry: name, type, mode, data.
pub type Crafted<'a> = (&'a str, tar::EntryType, u32, &'a [u8]);

/// Writes a tar at `path` holding `entries` as given, with their names raw
/// (`..` and `/` included, which tar's builder refuses); symbolic links
/// point to `link_target`.
pub fn crafted_tar(path: &Path, entries: &[Crafted], link_target: &Path) {
    let mut b = tar::Builder::new(File::create(path).unwrap());
    for (name, kind, mode, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(*kind);
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        if kind.is_symlink() {
            h.set_link_name(link_target).unwrap();
        }
        if kind.is_gnu_sparse() {
            // 8 GiB of which only the last bytes are stored.
            let g = h.as_gnu_mut().unwrap();
            g.set_real_size(8 << 30);
            g.sparse[0].set_offset((8 << 30) - data.len() as u64);
            g.sparse[0].set_length(data.len() as u64);
        }
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap();
}

/// Rewrites entry `n` of the store index file `index` with `edit` applied,
/// its checksum (the last 4 of its 32 bytes) made right again, so that a
/// reader must judge the entry by what it says.
pub fn edit_index_entry(index: &Path, n: u64, edit: impl FnOnce(&mut [u8; 32])) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(index)
        .unwrap();
    let mut raw = [0u8; 32];
    f.read_exact_at(&mut raw, n * 32).unwrap();
    edit(&mut raw);
    let crc = crc32(&raw[..28]);
    raw[28..].copy_from_slice(&crc.to_ne_bytes());
    f.write_all_at(&raw, n * 32).unwrap();
}
