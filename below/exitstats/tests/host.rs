//! On this machine (root, a kernel with BTF): the program loads and
//! attaches, and a child that burns CPU and exits is caught with the pid,
//! name, cgroup and CPU time the kernel gave its parent at reaping.

use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use nix::sys::resource::getrusage;
use nix::sys::resource::UsageWho;

fn children_cpu_usecs() -> i64 {
    let r = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() * 1_000_000 + t.tv_usec();
    us(r.user_time()) + us(r.system_time())
}

#[test]
fn catches_a_short_lived_process_with_its_cpu_time() {
    if bstats_testkit::skip_unless_root("loads BPF") {
        return;
    }
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let data = std::sync::Arc::default();
    let _exits = bstats_exitstats::ExitStats::start(logger, std::sync::Arc::clone(&data))
        .expect("exitstats must load as root on a kernel with BTF");
    let before = children_cpu_usecs();
    let status = Command::new("sh")
        .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i + 1)); done"])
        .spawn()
        .expect("spawn sh");
    let pid = status.id() as i32;
    assert!(status.wait_with_output().unwrap().status.success());
    let reaped = children_cpu_usecs() - before;

    let deadline = Instant::now() + Duration::from_secs(10);
    let info = loop {
        if let Some(i) = data.lock().unwrap().remove(&pid) {
            break i;
        }
        assert!(Instant::now() < deadline, "no exit event for pid {pid}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(info.stat.pid, Some(pid));
    assert_eq!(info.stat.comm.as_deref(), Some("sh"));
    assert_eq!(info.stat.state, Some(procfs::PidState::Dead));
    assert_eq!(info.stat.ppid, Some(std::process::id() as i32));
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own_cgroup = own_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup2 line");
    assert_eq!(info.cgroup, own_cgroup);
    let caught = (info.stat.user_usecs.unwrap() + info.stat.system_usecs.unwrap()) as i64;
    eprintln!("caught {caught} us of CPU for pid {pid}; the kernel reaped {reaped} us");
    assert!(reaped > 20_000, "the child burned only {reaped} us");
    // Same runtime; the parent's rusage is rounded to ticks differently.
    let slack = 5_000.max(reaped / 20);
    assert!(
        (caught - reaped).abs() <= slack,
        "caught {caught} us of CPU, the kernel reaped {reaped} us"
    );
}
