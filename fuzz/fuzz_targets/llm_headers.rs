//! Language-model inputs: the first byte picks the file, the rest is its content.
//! - even: a `.gguf` file (header, metadata, tensor infos) → the checkpoint report, with and
//!   without a training (LoRA) estimate;
//! - odd: a `config.json` beside a valid tiny safetensors file → the architecture, the KV cache,
//!   the training forward (with images for a multimodal config) and `fit`'s plans on one GPU or
//!   eight (tensor-parallel serving, the FSDP adapter plans).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nnlint::analysis::llm::{self, forward, LlmOptions};
use nnlint::analysis::training::TrainConfig;
use nnlint::load;

#[path = "common.rs"]
mod common;

/// A valid safetensors file with one [4, 4] F32 tensor `model.layers.0.mlp.up_proj.weight`.
fn tiny_safetensors() -> Vec<u8> {
    let header = br#"{"model.layers.0.mlp.up_proj.weight":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}"#;
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.resize(b.len() + 64, 0);
    b
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let batch = 1 + (pick as u64 >> 4);
    let options = LlmOptions {
        batch,
        seq: 1 + (pick as u64 & 0x0f) * 37,
        lora: (pick & 2 != 0).then(|| forward::Lora {
            rank: 4,
            targets: forward::Targets::AllLinear,
        }),
        qlora: pick & 4 != 0,
        images: u64::from(pick & 8 != 0),
        image_size: (pick & 8 != 0).then_some((1 + u64::from(pick) * 13, 7 + u64::from(pick) * 29)),
        ..LlmOptions::default()
    };
    let train = TrainConfig::default();
    if pick % 2 == 0 {
        let path = common::write_input("model.gguf", rest);
        if let Ok(g) = load::gguf::load(&path) {
            let _ = llm::analyze_gguf(&g, &options, None);
            let _ = llm::analyze_gguf(&g, &options, Some(&train));
        }
        return;
    }
    let dir = common::write_input("ckpt/model.safetensors", &tiny_safetensors());
    let dir = dir.parent().expect("a folder").to_path_buf();
    std::fs::write(dir.join("config.json"), rest).expect("write config.json");
    if let Ok(ck) = load::hf::load(&dir) {
        if let Ok(r) = llm::analyze_checkpoint(&ck, &options, Some(&train)) {
            if let Some(m) = r.llm.as_ref().and_then(|l| l.model.as_ref()) {
                let gpu = nnlint::analysis::fit::parse_gpu("RTX-4090").expect("a known card");
                let f = llm::fit::FitOptions {
                    base: TrainConfig {
                        gpus: if pick & 32 != 0 { 8 } else { 1 },
                        ..train
                    },
                    optimizer: None,
                    llm: LlmOptions {
                        images: 0,
                        image_size: None,
                        ..options.clone()
                    },
                    lora_rank: 8,
                    effective_batch: 8,
                    inference: pick & 64 != 0,
                };
                let _ = llm::fit::fit(m, gpu, &f);
            }
        }
    }
});
