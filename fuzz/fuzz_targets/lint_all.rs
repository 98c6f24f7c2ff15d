//! Arbitrary bytes as an ONNX model: every lint rule with default settings (unbound, then a
//! bound batch).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nnlint::analysis::{training::TrainConfig, Bindings};
use nnlint::load;
use nnlint::rules::{self, Selection, Settings};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::write_input("model.onnx", data);
    let Ok(model) = load::load_graph(&path, "lint") else {
        return;
    };
    let selection = Selection::default();
    for batch in [None, Some(4)] {
        let settings = Settings {
            bindings: Bindings {
                batch,
                ..Bindings::default()
            },
            train: TrainConfig::default(),
            budget: Some(1 << 30),
        };
        let _ = rules::lint(&model, &settings, &selection);
    }
});
