//! libbpf's print callback while loads run: bstats_bpf::load swaps its own in
//! during a load and passes on what it does not keep. Loads finish while
//! another thread makes libbpf print (libbpf-rs calls a callback holding
//! the lock `set_print` takes, so ours must not wait for a lock held
//! around `set_print`), and libbpf's lines reach the callback from before.
//! Needs root; skipped with a line otherwise.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::mpsc::channel;
use std::time::Duration;

use std::mem::MaybeUninit;

use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::PrintLevel;

use super::contract::skel::CgroupBpfSkelBuilder;
use super::kernel::Kernel;
use super::layer::KernelBtf;
use super::load::Loaded;

static PASSED_ON: AtomicUsize = AtomicUsize::new(0);

fn count(_: PrintLevel, _: String) {
    PASSED_ON.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn loads_finish_while_libbpf_prints_elsewhere() {
    let Some(root) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let config = Kernel::read(&KernelBtf::open(None).unwrap()).config;
    let before = libbpf_rs::set_print(Some((PrintLevel::Debug, count)));
    static LOADING: AtomicBool = AtomicBool::new(true);
    // Opening an object (no load) makes libbpf print, outside the layer.
    let printer = std::thread::spawn(|| {
        while LOADING.load(Ordering::Relaxed) {
            let mut storage = MaybeUninit::uninit();
            CgroupBpfSkelBuilder::default().open(&mut storage).unwrap();
        }
    });
    let (done, finished) = channel();
    std::thread::spawn(move || {
        let root = File::open(root).unwrap();
        // Each load swaps the callback in and back.
        for _ in 0..20 {
            Loaded::first(root.as_fd(), config, None).unwrap();
        }
        done.send(()).unwrap();
    });
    // Minutes past what 20 loads take: only a deadlock gets here.
    let result = finished.recv_timeout(Duration::from_secs(600));
    LOADING.store(false, Ordering::Relaxed);
    result.expect("the loads did not finish while libbpf printed: deadlocked");
    printer.join().unwrap();
    libbpf_rs::set_print(before);
    assert!(PASSED_ON.load(Ordering::Relaxed) > 0);
}
