//! The crate's only unsafe code: a ring buffer record read as the
//! skeleton's event type.

use crate::skel::types::exit_event as Event;

/// The event in `data`, or None if the record is too short.
pub(crate) fn event(data: &[u8]) -> Option<Event> {
    if data.len() < std::mem::size_of::<Event>() {
        return None;
    }
    // SAFETY: `Event` is the #[repr(C)] struct generated from the BPF
    // object's BTF, made of integers and byte arrays only (any bit pattern
    // is valid); `data` holds at least that many bytes; read_unaligned has
    // no alignment requirement.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<Event>()) })
}
