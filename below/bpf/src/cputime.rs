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

//! CPU time as the kernel reports it: the user and system split of a
//! runtime.

/// The kernel's cputime_adjust(): split rtime in the utime:stime ratio of
/// the tick samples, never letting either go below `prev` (the last
/// split; (0, 0) for a single one).
pub fn cputime_adjust(rtime: u64, utime: u64, stime: u64, prev: (u64, u64)) -> (u64, u64) {
    let (prev_u, prev_s) = prev;
    if prev_u + prev_s >= rtime {
        return prev;
    }
    let mut st = if stime == 0 {
        0
    } else if utime == 0 {
        rtime
    } else {
        (stime as u128 * rtime as u128 / (stime as u128 + utime as u128)) as u64
    };
    st = st.max(prev_s);
    let mut ut = rtime - st;
    if ut < prev_u {
        ut = prev_u;
        st = rtime - ut;
    }
    (ut, st)
}

#[cfg(test)]
mod tests;
