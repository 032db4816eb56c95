//! `verifier` without a kernel: the forms it loads are the objects'
//! programs, and its arithmetic.

use std::time::Duration;

use std::mem::MaybeUninit;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::skel::SkelBuilder;

use super::contract::skel::CgroupBpfSkelBuilder;
use super::load::NoRcuWalk;
use super::load::Walk;
use super::program::skel::BstatsSkelBuilder;
use super::verifier::cpu_count;
use super::verifier::median_range;
use super::verifier::VerifierLog;
use super::verifier::Whose;

/// The programs an object holds (opened, not loaded: no kernel needed).
fn programs(builder: impl for<'o> SkelBuilder<'o>) -> Vec<String> {
    let mut storage = MaybeUninit::uninit();
    let open = builder.open(&mut storage).expect("the object opens");
    open.open_object()
        .progs()
        .map(|p| p.name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn each_form_is_a_program_of_its_object() {
    for (whose, progs) in [
        (Whose::BelowMain, programs(CgroupBpfSkelBuilder::default())),
        (Whose::Fork, programs(BstatsSkelBuilder::default())),
    ] {
        for walk in [Walk::Rcu, Walk::Locked(NoRcuWalk::Unavailable("test"))] {
            let form = walk.program(whose.program());
            assert!(
                progs.contains(&form),
                "{} has no program {form}: {progs:?}",
                whose.object()
            );
        }
    }
}

#[test]
fn cpu_lists() {
    assert_eq!(cpu_count("0\n"), Some(1));
    assert_eq!(cpu_count("0-3,8"), Some(5));
    assert_eq!(cpu_count("0-1,4-5,7\n"), Some(5));
    assert_eq!(cpu_count(""), Some(0));
    assert_eq!(cpu_count("3-1"), None);
    assert_eq!(cpu_count("0-x"), None);
}

#[test]
fn median_least_most() {
    let ms = Duration::from_millis;
    let of = |v: &[u64]| median_range(v.iter().map(|&v| ms(v)));
    assert_eq!(of(&[]), None);
    assert_eq!(of(&[7]), Some((ms(7), ms(7), ms(7))));
    assert_eq!(of(&[30, 10, 50, 20, 40]), Some((ms(30), ms(10), ms(50))));
    assert_eq!(of(&[40, 10, 20, 30]), Some((ms(25), ms(10), ms(40))));
}

#[test]
fn verifier_log_statistics() {
    // 6.18's log at BPF_LOG_STATS (6.1's has the same lines).
    let log = "func#0 @0\nverification time 4707 usec\nstack depth 64+0\n\
               processed 2035 insns (limit 1000000) max_states_per_insn 4 \
               total_states 143 peak_states 141 mark_read 31\n";
    assert_eq!(
        VerifierLog::parse(log),
        VerifierLog {
            time: Some(Duration::from_micros(4707)),
            processed: Some(2035),
            total_states: Some(143),
            peak_states: Some(141),
        }
    );
    assert_eq!(VerifierLog::parse(""), VerifierLog::default());
    assert_eq!(
        VerifierLog::parse("processed x insns").processed,
        None,
        "not a number"
    );
}
