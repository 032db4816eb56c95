//! libbpf's warnings during our loads, kept for the error: the collector
//! falls back and says why, so a user without the right to load BPF sees
//! one reason, not libbpf's lines on the terminal `below live` draws.
//! libbpf's print callback is process-wide: ours only while a load runs,
//! and all it does not keep goes to the callback from before.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;

use anyhow::Result;
use libbpf_rs::PrintCallback;
use libbpf_rs::PrintLevel;

thread_local! {
    /// libbpf's warnings during a load on this thread; None outside one.
    static SAID: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Loads under way, on any thread.
static LOADS: Mutex<usize> = Mutex::new(0);
/// libbpf's print callback from before the first of them, put back when
/// the last one ends. A lock of its own: libbpf-rs calls a callback with
/// its own lock held, which `set_print` takes, so the callback must not
/// wait for LOADS, which is held around `set_print`.
static BEFORE: Mutex<Option<(PrintLevel, PrintCallback)>> = Mutex::new(None);

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `load` (a BPF load) with libbpf's warnings on
/// this thread kept, not printed: an error carries them (cause first: "failed
/// to parse target BTF" / "failed to perform CO-RE relocations"), a
/// success drops them.
pub(crate) fn libbpf_says<T>(load: impl FnOnce() -> Result<T>) -> Result<T> {
    let _borrowed = Borrowed::new();
    SAID.with(|s| *s.borrow_mut() = Some(Vec::new()));
    let out = load();
    let said = SAID.with(|s| s.borrow_mut().take()).unwrap_or_default();
    match out {
        Err(e) if !said.is_empty() => Err(e.context(said.join(" / "))),
        out => out,
    }
}

/// libbpf's print callback borrowed for one load: ours from the first
/// load under way to the last, put back on drop (a panicking load too)
/// unless the process set another meanwhile, which stays.
struct Borrowed;

impl Borrowed {
    fn new() -> Self {
        let mut loads = lock(&LOADS);
        if *loads == 0 {
            *lock(&BEFORE) = libbpf_rs::get_print();
            libbpf_rs::set_print(Some((PrintLevel::Debug, keep_or_pass_on)));
        }
        *loads += 1;
        Borrowed
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        SAID.with(|s| s.borrow_mut().take());
        let mut loads = lock(&LOADS);
        *loads -= 1;
        let ours = libbpf_rs::get_print()
            .is_some_and(|(_, cb)| std::ptr::fn_addr_eq(cb, keep_or_pass_on as PrintCallback));
        if *loads == 0 && ours {
            // Copied, not taken: a callback under way may still read it.
            let before = *lock(&BEFORE);
            libbpf_rs::set_print(before);
        }
    }
}

/// libbpf's print callback during loads: a loading thread's warnings are
/// kept; the rest goes to the callback from before, at its level.
fn keep_or_pass_on(level: PrintLevel, msg: String) {
    let kept = level == PrintLevel::Warn
        && SAID.with(|s| match s.borrow_mut().as_mut() {
            Some(said) => {
                let m = msg.trim_end();
                said.push(m.strip_prefix("libbpf: ").unwrap_or(m).to_owned());
                true
            }
            None => false,
        });
    if kept {
        return;
    }
    let before = *lock(&BEFORE);
    match before {
        Some((max, callback)) if level <= max => callback(level, msg),
        _ => {}
    }
}
