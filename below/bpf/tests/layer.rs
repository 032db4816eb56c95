//! The layer against the running kernel, with its own test program
//! (tests/bpf/layer_test.bpf.c): a load and its setup, an iterator pass,
//! maps read and written through mmap, a load failure's reason (the
//! poisoned CO-RE read; libbpf's error when the verifier never ran), the
//! kernel's BTF, the decoding helpers.

use std::path::Path;
use std::time::Instant;

use bstats_bpf::MapView;
use bstats_bpf::Pod;
use bstats_testkit::skip_unless_root;
use libbpf_rs::skel::Skel;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/layer_test.skel.rs"));
}
use skel::types::bss as Bss;
use skel::types::rodata as Rodata;

// SAFETY: the skeleton's #[repr(C)] types: integers and byte arrays.
unsafe impl Pod for Rodata {}
// SAFETY: as above.
unsafe impl Pod for Bss {}

fn load_with(
    step: u64,
    broken: bool,
    btf: Option<&Path>,
) -> anyhow::Result<skel::LayerTestSkel<'static>> {
    bstats_bpf::load(skel::LayerTestSkelBuilder::default(), btf, |open| {
        bstats_bpf::set_data(open, ".rodata", |r: &mut Rodata| r.step = step)?;
        if broken {
            for mut p in open.progs_mut() {
                p.set_autoload(p.name() == "read_missing_member");
            }
        }
        Ok(())
    })
}

/// The number the pass printed ("counted N").
fn printed(out: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(out);
    let n = text.trim().strip_prefix("counted ");
    n.and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {text:?}"))
}

#[test]
fn loads_runs_an_iterator_and_shares_its_maps() {
    if skip_unless_root("loads BPF") {
        return;
    }
    let skel = load_with(3, false, None).expect("load");
    let obj = skel.object();
    let link = bstats_bpf::prog(obj, "count_tasks")
        .and_then(|p| Ok(p.attach()?))
        .expect("attach");
    let bss = MapView::<Bss>::new(&bstats_bpf::map(obj, ".bss").expect(".bss")).expect("mmap");
    for pass in 0..2 {
        let mut out = Vec::new();
        bstats_bpf::run_iter(&link, &mut out).expect("pass");
        let counted = bss.get(0).counted;
        // What the program printed at its end is what the view reads.
        assert_eq!(printed(&out), counted, "pass {pass}");
        assert_eq!(counted % 3, 0, "the .rodata step set at load");
        assert!(counted / 3 > 1, "more than one task: {counted}");
    }
    let err = bstats_bpf::map(obj, "no_such_map").expect_err("no such map");
    assert_eq!(
        err.to_string(),
        "Failed to find map no_such_map in the BPF object"
    );
}

#[test]
fn a_failed_co_re_relocation_is_the_reason() {
    if skip_unless_root("loads BPF") {
        return;
    }
    // Two threads: one load fails, one succeeds, each with its own log.
    let good = std::thread::spawn(|| load_with(1, false, None).map(|_| ()));
    let err = load_with(1, true, None)
        .map(drop)
        .expect_err("the verifier rejects it");
    let why = format!("{err:#}");
    assert!(
        why.contains("failed to resolve CO-RE relocation") && why.contains("no_such_member"),
        "{why}"
    );
    good.join().expect("thread").expect("the other load");
}

#[test]
fn libbpfs_error_when_the_verifier_never_ran() {
    if skip_unless_root("loads BPF") {
        return;
    }
    // Not BTF: libbpf fails relocating, before any program loads. The
    // error is libbpf's, with its warnings as the reason (no verdict made
    // up from an empty log).
    let err = load_with(1, false, Some(Path::new("/proc/self/stat")))
        .map(drop)
        .expect_err("no BTF to relocate against");
    assert!(err.downcast_ref::<libbpf_rs::Error>().is_some(), "{err:#}");
    assert_eq!(err.chain().count(), 2, "{err:#}");
    assert!(err.to_string().contains("BTF"), "{err:#}");
}

#[test]
fn reads_the_kernels_btf_once() {
    let Ok(btf) = bstats_bpf::KernelBtf::open(None) else {
        println!("skipped: no {}", bstats_bpf::VMLINUX_BTF);
        return;
    };
    assert!(btf.has_func("do_exit"));
    assert!(!btf.has_func("no_such_function"));
    assert!(btf.has_typedef("btf_trace_sched_process_exit"));
    let maps = btf.enum_values("bpf_map_type").expect("enum bpf_map_type");
    assert!(maps.contains(&("BPF_MAP_TYPE_ARRAY".to_owned(), 2)));
    let err = bstats_bpf::KernelBtf::open(Some(Path::new("/no/such/btf")))
        .err()
        .expect("no file");
    assert_eq!(err.to_string(), "no BTF at /no/such/btf");
}

#[test]
fn decodes_c_strings_and_reads_clocks() {
    let mut name = [0i8; 8];
    for (d, b) in name.iter_mut().zip(b"burn\0x") {
        *d = *b as i8;
    }
    assert_eq!(bstats_bpf::c_string(&name), "burn");
    assert_eq!(bstats_bpf::c_string(&[b'a' as i8; 3]), "aaa");
    assert!(bstats_bpf::page_size().is_power_of_two());

    let (thread, process) = (
        bstats_bpf::thread_cpu_time(),
        bstats_bpf::process_cpu_time(),
    );
    // Spin until this thread has run 10 ms, however busy the machine: the
    // thread clock rises with the work, the process clock at least as much.
    let start = Instant::now();
    let mut x = 0u64;
    while (bstats_bpf::thread_cpu_time() - thread).as_millis() < 10 {
        x = std::hint::black_box(x.wrapping_add(1));
        assert!(
            start.elapsed().as_secs() < 120,
            "the thread clock does not rise"
        );
    }
    let spent = bstats_bpf::thread_cpu_time() - thread;
    assert!(bstats_bpf::process_cpu_time() - process >= spent);
}
