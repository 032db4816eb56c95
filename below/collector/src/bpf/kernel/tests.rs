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

//! The id limits from sysfs lists; the controllers the record has bits
//! for.

use super::*;

#[test]
fn id_limits_from_sysfs_lists() {
    assert_eq!(ids_in("0\n"), Some(1));
    assert_eq!(ids_in("0-63\n"), Some(64));
    assert_eq!(ids_in("0-3,8\n"), Some(9));
    // No guess where the list is not one.
    assert_eq!(ids_in(""), None);
    assert_eq!(ids_in("0-"), None);
    assert_eq!(ids_in("possible\n"), None);
}

#[test]
fn controllers_the_record_has_bits_for() {
    // 7.3's enum cgroup_subsys_id (Debian's config).
    let ids = [
        "cpuset_cgrp_id",
        "cpu_cgrp_id",
        "cpuacct_cgrp_id",
        "io_cgrp_id",
        "memory_cgrp_id",
        "devices_cgrp_id",
        "freezer_cgrp_id",
        "net_cls_cgrp_id",
        "perf_event_cgrp_id",
        "net_prio_cgrp_id",
        "hugetlb_cgrp_id",
        "pids_cgrp_id",
        "rdma_cgrp_id",
        "misc_cgrp_id",
        "dmem_cgrp_id",
        "CGROUP_SUBSYS_COUNT",
    ];
    assert!(unknown_controllers(ids.into_iter()).is_empty());
    // One this code does not know, and debug (shown with cgroup_debug).
    let more = ids.into_iter().chain(["foo_cgrp_id", "debug_cgrp_id"]);
    assert_eq!(unknown_controllers(more), ["foo", "debug"]);
}
