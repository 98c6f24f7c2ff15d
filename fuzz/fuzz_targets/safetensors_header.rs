//! Arbitrary bytes as a `.safetensors` file: load (header parsing, offsets, dtypes) and the
//! weights-only memory report.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nnlint::analysis::{self, Bindings};
use nnlint::load;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::write_input("model.safetensors", data);
    let _ = load::load(&path);
    let _ = analysis::analyze_path(&path, &Bindings::default(), None);
});
