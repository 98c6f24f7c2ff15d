//! Arbitrary bytes as a model file (format sniffed from the first bytes): load, then the memory
//! analysis with default bindings, a bound batch, and a training plan. Errors are fine; panics,
//! aborts, huge allocations and hangs are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nnlint::analysis::{self, training::TrainConfig, Bindings};
use nnlint::load::{self, Loaded};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::write_input("model", data);
    let Ok(Loaded::Onnx(model)) = load::load(&path) else {
        return;
    };
    let train = TrainConfig::default();
    let _ = analysis::analyze(&model, &Bindings::default(), None);
    let _ = analysis::analyze(&model, &Bindings::default(), Some(&train));
    let batch = Bindings {
        batch: Some(8),
        ..Bindings::default()
    };
    let _ = analysis::analyze(&model, &batch, None);
    let _ = analysis::analyze(&model, &batch, Some(&train));
});
