use super::*;

/// root ─┬─ a ─┬─ a1
///       │     └─ a2 ─ a2x
///       └─ b ─── b1
fn tree() -> Vec<Option<usize>> {
    vec![None, Some(0), Some(1), Some(1), Some(3), Some(0), Some(5)]
}

fn kept(mask: &[bool]) -> Vec<usize> {
    (0..mask.len()).filter(|&i| mask[i]).collect()
}

#[test]
fn keeps_top_n_and_their_ancestors() {
    let parents = tree();
    let scores = [1000, 1, 5, 2, 9, 0, 7];
    let none = [false; 7];
    // a2x (9) and b1 (7): their ancestors a2, a, b and the root come along.
    assert_eq!(
        kept(&select(&parents, &scores, &none, 2)),
        [0, 1, 3, 4, 5, 6]
    );
    // The root's score does not count: it is never ranked.
    assert_eq!(kept(&select(&parents, &scores, &none, 1)), [0, 1, 3, 4]);
    assert_eq!(kept(&select(&parents, &scores, &none, 0)), [0]);
    assert_eq!(
        kept(&select(&parents, &scores, &none, 100)),
        [0, 1, 2, 3, 4, 5, 6]
    );
}

#[test]
fn ties_go_to_the_earlier_cgroup() {
    let parents = tree();
    let scores = [0; 7];
    let none = [false; 7];
    assert_eq!(kept(&select(&parents, &scores, &none, 2)), [0, 1, 2]);
}

#[test]
fn always_kept_come_with_their_ancestors() {
    let parents = tree();
    let scores = [0, 0, 0, 0, 0, 0, 50];
    let mut always = [false; 7];
    always[2] = true;
    assert_eq!(
        kept(&select(&parents, &scores, &always, 1)),
        [0, 1, 2, 5, 6]
    );
}

#[test]
fn kept_set_is_closed_under_parent_on_random_trees() {
    // A deterministic pseudo-random forest: every kept node's parent is kept
    // and exactly the n best non-root scores are in.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for len in [1usize, 2, 10, 500] {
        let parents: Vec<Option<usize>> = (0..len)
            .map(|i| (i > 0).then(|| (next() % i as u64) as usize))
            .collect();
        let scores: Vec<u64> = (0..len).map(|_| next() % 1000).collect();
        let always = vec![false; len];
        for n in [0, 1, 7, len] {
            let keep = select(&parents, &scores, &always, n);
            assert!(keep[0]);
            for i in 1..len {
                if keep[i] {
                    assert!(keep[parents[i].unwrap()], "len {len} n {n} node {i}");
                }
            }
            let mut ranked: Vec<usize> = (1..len).collect();
            ranked.sort_by(|&a, &b| scores[b].cmp(&scores[a]).then(a.cmp(&b)));
            for (pos, &i) in ranked.iter().enumerate() {
                if pos < n {
                    assert!(keep[i], "len {len} n {n}: top node {i} dropped");
                }
            }
        }
    }
}

#[test]
fn rates_are_against_the_previous_pass_of_every_cgroup() {
    let mut r = Ranker::new(TopN {
        n: 1,
        by: TopBy::Cpu,
        keep: None,
    });
    // First pass: no history, the whole counter counts.
    assert_eq!(r.score(1, Some(100)), 100);
    assert_eq!(r.score(2, Some(50)), 50);
    r.commit();
    assert_eq!(r.score(1, Some(130)), 30);
    assert_eq!(r.score(2, Some(90)), 40);
    r.commit();
    // Cgroup 2 was ranked (not stored) last pass: its rate is over one
    // interval, not since the sample that last stored it.
    assert_eq!(r.score(2, Some(95)), 5);
    // No value (controller off): ranks last.
    assert_eq!(r.score(1, None), 0);
    r.commit();
    // 1 was not seen last pass (no value): it starts over.
    assert_eq!(r.score(1, Some(140)), 140);
}

/// A sample ranked and then not used (a later step failed): ranking
/// again gives the same rates, not rates against values read moments
/// earlier.
#[test]
fn a_sample_ranks_again_against_the_same_previous_sample() {
    let mut r = Ranker::new(TopN {
        n: 1,
        by: TopBy::Cpu,
        keep: None,
    });
    r.score(1, Some(100));
    r.commit();
    assert_eq!(r.score(1, Some(130)), 30);
    assert_eq!(r.score(1, Some(131)), 31, "against the first sample again");
    r.commit();
    assert_eq!(r.score(1, Some(150)), 19, "and on from the second");
}

#[test]
fn additive_values_rank_by_own_share() {
    let parents = tree();
    let none = [false; 7];
    let r = |by| {
        Ranker::new(TopN {
            n: 1,
            by,
            keep: None,
        })
    };
    // b (40) has all 40 of its own (b1: 0) and beats a1 (30); a (50) only
    // sums a1 and a2 (20, all in a2x): its own share is 0.
    let scores = vec![100, 50, 30, 20, 20, 40, 0];
    assert_eq!(
        kept(&r(TopBy::Cpu).choose(&parents, scores.clone(), &none)),
        [0, 5]
    );
    // Pressure does not add up: a (50) leads as reported.
    assert_eq!(
        kept(&r(TopBy::Pressure).choose(&parents, scores, &none)),
        [0, 1]
    );
    // b now only sums b1: the one place goes to a1, with a as its ancestor.
    let scores = vec![100, 50, 30, 20, 20, 10, 10];
    assert_eq!(
        kept(&r(TopBy::Cpu).choose(&parents, scores, &none)),
        [0, 1, 2]
    );
}

#[test]
fn memory_ranks_by_level() {
    let mut r = Ranker::new(TopN {
        n: 1,
        by: TopBy::Memory,
        keep: None,
    });
    assert_eq!(r.score(1, Some(4096)), 4096);
    r.commit();
    assert_eq!(r.score(1, Some(4096)), 4096);
}

/// The tree above in a table, each cgroup's cpu.stat usage from `usage`.
fn table(t: &mut Table, usage: [u64; 7]) {
    let names = ["", "a", "a1", "a2", "a2x", "b", "b1"];
    t.begin();
    for (i, (p, name)) in tree().into_iter().zip(names).enumerate() {
        let pos = t.visit(100 + i as u64, p, || name.into()).unwrap();
        *t.sample_mut(pos) = CgroupSample {
            cpu_stat: Some(cgroupfs::CpuStat {
                usage_usec: Some(usage[i]),
                ..Default::default()
            }),
            ..Default::default()
        };
    }
    t.end();
}

#[test]
fn choose_keeps_the_busiest_since_the_last_pass_as_a_tree() {
    let mut t = Table::new(None, Some(Regex::new("^b$").unwrap()));
    let mut r = Ranker::new(TopN {
        n: 1,
        by: TopBy::Cpu,
        keep: None,
    });
    table(&mut t, [0, 10, 0, 0, 500, 0, 20]);
    choose_by_samples(&mut r, &mut t);
    let paths = |t: &Table| {
        (0..t.len())
            .map(|i| t.row(i).path.clone())
            .collect::<Vec<_>>()
    };
    // a2x leads on its cumulative counter; b is kept by the pattern.
    assert_eq!(paths(&t), ["", "a", "a/a2", "a/a2/a2x", "b"]);
    assert_eq!(t.dropped(), 2);
    assert_eq!(t.parents()[3], Some(2));
    assert_eq!(t.parents()[4], Some(0));
    r.commit();
    // Next sample: b1 did the most since then (a2x only 1 more).
    table(&mut t, [0, 10, 0, 0, 501, 0, 90]);
    choose_by_samples(&mut r, &mut t);
    assert_eq!(paths(&t), ["", "b", "b/b1"]);
    assert_eq!(t.parents()[2], Some(1));
}

#[test]
fn plain_read_reads_the_ranked_file_of_all_and_the_rest_of_the_kept() {
    let t = tempfile::tempdir().unwrap();
    let cg = |rel: &str, files: &[(&str, &str)]| {
        let dir = t.path().join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.controllers"), "cpu memory\n").unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    };
    cg("", &[("cpu.stat", "usage_usec 100\n")]);
    cg(
        "a",
        &[
            ("cpu.stat", "usage_usec 10\n"),
            ("memory.current", "8192\n"),
        ],
    );
    cg(
        "a/b",
        &[("cpu.stat", "usage_usec 8\n"), ("memory.current", "4096\n")],
    );
    cg(
        "c",
        &[("cpu.stat", "usage_usec 3\n"), ("memory.current", "1\n")],
    );
    let mut walker = Walker::new(t.path()).unwrap();
    let mut r = Ranker::new(TopN {
        n: 1,
        by: TopBy::Cpu,
        keep: None,
    });
    let files: FileSet = [StatFile::CpuStat, StatFile::MemoryCurrent]
        .into_iter()
        .collect();
    let mut table = Table::default();
    let mut errors = Vec::new();
    walk(&mut walker, &mut r, &mut table, files, &mut errors);
    // b has 8 of its own, a 2 (10 less b's 8), c 3: b, with a as ancestor.
    let paths: Vec<&str> = (0..table.len())
        .map(|i| table.row(i).path.as_str())
        .collect();
    assert_eq!(paths, ["", "a", "a/b"]);
    assert_eq!(table.dropped(), 1);
    assert_eq!(table.sample(2).memory_current, Some(4096));
    assert_eq!(table.sample(1).memory_current, Some(8192));
    assert!(errors.is_empty(), "{:?}", errors);
    // cpu.stat of all four, memory.current of a and b only (the root has
    // none; c's is never opened).
    assert_eq!(walker.reader.counters.files_opened, 4 + 2);
}
