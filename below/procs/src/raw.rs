//! The crate's only unsafe code: records in the iterator's output read as
//! the skeleton's types.

use crate::skel::types::rec_head;

/// Implemented by the #[repr(C)] record types generated from the BPF
/// object's BTF, made of integers and byte arrays only (any bit pattern is
/// a valid value).
pub(crate) trait Plain: Copy {}

impl Plain for rec_head {}
impl Plain for crate::skel::types::facts_rec {}
impl Plain for crate::skel::types::thread_rec {}
impl Plain for crate::skel::types::proc_rec {}

/// A `T` from the start of `data`, or None if it is too short.
pub(crate) fn read<T: Plain>(data: &[u8]) -> Option<T> {
    if data.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: `T: Plain` (any bit pattern is valid); `data` holds at least
    // size_of::<T>() bytes; read_unaligned has no alignment requirement.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

/// The bytes of a record, as the program prints them (for tests).
#[cfg(test)]
pub(crate) fn bytes<T: Plain>(v: &T) -> Vec<u8> {
    // SAFETY: `T: Plain` is plain old data without padding (every field of
    // the records is naturally aligned and each is a multiple of 8 bytes).
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}
