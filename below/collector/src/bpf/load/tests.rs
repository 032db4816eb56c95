// Copyright (c) Facebook, Inc. and its affiliates.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! Which form of the pass loads: under RCU where the kernel has the
//! kfuncs and the verifier takes it, else the cgroup iterator, saying why;
//! the room of the first load.

use std::cell::RefCell;

use anyhow::anyhow;

use super::*;

/// Walk::first with a load that fails for the forms in `refused`; the
/// forms tried, in order, and what it returned.
fn first(rcu_walk: Result<(), &'static str>, refused: &[&str]) -> (Vec<Walk>, Result<Walk>) {
    let tried = RefCell::new(Vec::new());
    let got = Walk::first(rcu_walk, |walk| {
        tried.borrow_mut().push(walk.clone());
        let name = walk.program("pass");
        if refused.contains(&name.as_str()) {
            Err(anyhow!("verifier refused {name}"))
        } else {
            Ok(walk)
        }
    });
    (tried.into_inner(), got)
}

#[test]
fn under_rcu_where_the_kernel_allows_it() {
    let (tried, got) = first(Ok(()), &[]);
    assert_eq!(tried, [Walk::Rcu]);
    assert_eq!(got.expect("loads under RCU"), Walk::Rcu);
}

#[test]
fn the_cgroup_iterator_when_the_rcu_form_is_refused() {
    let (tried, got) = first(Ok(()), &["pass_rcu"]);
    let why = NoRcuWalk::Load("verifier refused pass_rcu".to_owned());
    assert_eq!(tried, [Walk::Rcu, Walk::Locked(why.clone())]);
    assert_eq!(
        got.expect("loads as the cgroup iterator"),
        Walk::Locked(why)
    );
}

#[test]
fn the_cgroup_iterator_without_the_kfuncs_untried_under_rcu() {
    let (tried, got) = first(Err("kernel lacks kfunc bpf_iter_css_new"), &[]);
    let why = NoRcuWalk::Unavailable("kernel lacks kfunc bpf_iter_css_new");
    assert_eq!(tried, [Walk::Locked(why.clone())]);
    assert_eq!(
        got.expect("loads as the cgroup iterator"),
        Walk::Locked(why)
    );
}

#[test]
fn an_error_when_neither_form_loads() {
    let (tried, got) = first(Ok(()), &["pass_rcu", "pass"]);
    assert_eq!(tried.len(), 2);
    let Err(e) = got else {
        panic!("neither form loads, yet it returned a walk");
    };
    assert_eq!(e.to_string(), "verifier refused pass");
}

#[test]
fn the_first_load_is_sized_from_cgroup_stat() {
    let stat = "nr_descendants 41\nnr_dying_descendants 3\n";
    assert_eq!(descendants(stat), Some(41));
    assert_eq!(
        descendants("nr_dying_descendants 3\nnr_descendants 0\n"),
        Some(0)
    );
    // Missing or garbled: the load falls back to FIRST_CAPACITY.
    assert_eq!(descendants("nr_dying_descendants 3\n"), None);
    assert_eq!(descendants("nr_descendants many\n"), None);
    assert_eq!(descendants(""), None);
    assert_eq!(capacity_for(42), 42 + 2 + 64);
}
