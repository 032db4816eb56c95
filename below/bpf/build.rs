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

//! Compiles the layer's test program (tests/bpf), which the integration
//! tests load, and its skeleton (their types for its data sections).

use std::env;
use std::path::PathBuf;

const SRC: &str = "tests/bpf/layer_test.bpf.c";

fn main() {
    let clang = bstats_bpf_build::clang();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bstats_bpf_build::skeleton(SRC, &clang, &[])
        .obj(out.join("layer_test.bpf.o"))
        .build_and_generate(out.join("layer_test.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
