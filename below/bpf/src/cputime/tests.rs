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

use super::cputime_adjust;

#[test]
fn splits_cputime_like_cputime_adjust() {
    // A first split: the ratio, exact.
    assert_eq!(cputime_adjust(1000, 0, 0, (0, 0)), (1000, 0));
    assert_eq!(cputime_adjust(1000, 4, 0, (0, 0)), (1000, 0));
    assert_eq!(cputime_adjust(1000, 0, 4, (0, 0)), (0, 1000));
    assert_eq!(cputime_adjust(1000, 3, 1, (0, 0)), (750, 250));
    assert_eq!(cputime_adjust(1000, 300, 100, (0, 0)), (750, 250));
    let big = u64::MAX / 2;
    assert_eq!(
        cputime_adjust(big, big, big, (0, 0)),
        (big - big / 2, big / 2)
    );
    // Never below what was handed out: stime held, utime takes the
    // rest; utime held, stime takes the rest.
    assert_eq!(cputime_adjust(1000, 3, 1, (100, 600)), (400, 600));
    assert_eq!(cputime_adjust(1000, 1, 3, (900, 0)), (900, 100));
    // Across samples: neither part goes back.
    assert_eq!(cputime_adjust(1000, 1, 1, (750, 250)), (750, 250));
    assert_eq!(cputime_adjust(1100, 1000, 1, (750, 250)), (850, 250));
    assert_eq!(cputime_adjust(1100, 1, 1000, (750, 250)), (750, 350));
}
