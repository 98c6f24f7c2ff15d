//! The cache layouts against the worked examples of docs/cache-layouts.md, computed by hand from
//! vLLM 0.34's and llama.cpp 0c1e57098's sources: batch 1, 1000 tokens, TP 1, bf16 weights.
//! Each architecture is a fixture's config.json with the real model's numbers written in.

use super::layers::CacheLayout::{self, Hf, LlamaCpp, Vllm};
use super::*;
use serde_json::{json, Value};

fn arch(fixture: &str, real: Value) -> Arch {
    let path = format!(
        "{}/testdata/llm/{fixture}/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (k, v) in real.as_object().unwrap() {
        c[k] = v.clone();
    }
    c["dtype"] = json!("bfloat16");
    arch::from_config(&c).unwrap().unwrap()
}

/// (after the prefill, in steady decoding) at batch 1 × 1000 tokens.
fn cache(a: &Arch, layout: CacheLayout, block_size: u64, kv: Option<DType>) -> (u64, u64) {
    let o = LlmOptions {
        seq: 1000,
        kv_dtype: kv,
        cache_layout: layout,
        block_size,
        ..LlmOptions::default()
    };
    let i = inference(a, 0, 0, 2, &o, &Default::default()).unwrap();
    (i.kv_cache_bytes, i.kv_cache_decode_bytes)
}

fn decode(a: &Arch, layout: CacheLayout, block_size: u64) -> u64 {
    cache(a, layout, block_size, None).1
}

fn alternating(n: usize, a: &str, b: &str) -> Value {
    json!((0..n)
        .map(|i| if i % 2 == 0 { a } else { b })
        .collect::<Vec<_>>())
}

#[test]
fn llama_3_8b() {
    let a = arch(
        "llama",
        json!({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
               "head_dim": 128, "num_hidden_layers": 32, "intermediate_size": 14336}),
    );
    // 4096 B per token and layer: 1000 tokens; 16 blocks of 64; 63 of 16; 1024 cells
    assert_eq!(decode(&a, Hf, 64), 131_072_000);
    assert_eq!(decode(&a, Vllm, 64), 134_217_728);
    assert_eq!(decode(&a, Vllm, 16), 132_120_576);
    assert_eq!(decode(&a, LlamaCpp, 64), 134_217_728);
    // the block size only matters to vLLM
    assert_eq!(decode(&a, LlamaCpp, 16), 134_217_728);
}

#[test]
fn gpt_oss_20b() {
    let a = arch(
        "gpt_oss",
        json!({"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
               "head_dim": 64, "num_hidden_layers": 24, "sliding_window": 128,
               "layer_types": alternating(24, "sliding_attention", "full_attention")}),
    );
    // HF: 12 full layers of 2,048,000, 12 windows of 128 tokens (+ an int64 counter each)
    assert_eq!(decode(&a, Hf, 64), 27_721_824);
    // vLLM 64: full 16 blocks of 131,072; sliding 16 - floor(873/64) = 3 blocks
    assert_eq!(cache(&a, Vllm, 64, None), (50_331_648, 29_884_416));
    // vLLM 16: full 63 blocks of 32,768, sliding 63 - 54 = 9
    assert_eq!(decode(&a, Vllm, 16), 28_311_552);
    // llama.cpp: 1024 cells for full layers, pad256(min(1024, 128 + 512)) = 768 for SWA
    assert_eq!(cache(&a, LlamaCpp, 64, None), (44_040_192, 44_040_192));
}

#[test]
fn deepseek_v3() {
    let a = arch(
        "deepseek_v3",
        json!({"hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
               "num_hidden_layers": 61, "kv_lora_rank": 512, "q_lora_rank": 1536,
               "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "qk_head_dim": 192,
               "v_head_dim": 128, "head_dim": 64, "first_k_dense_replace": 3}),
    );
    // 576 elements per token and layer, one head, no V
    assert_eq!(decode(&a, Hf, 64), 70_272_000);
    assert_eq!(decode(&a, Vllm, 64), 71_958_528);
    assert_eq!(decode(&a, Vllm, 16), 70_834_176);
    assert_eq!(
        cache(&a, Vllm, 64, Some(DType::F8E4M3FN)),
        (35_979_264, 35_979_264)
    );
    assert_eq!(decode(&a, LlamaCpp, 64), 71_958_528);
}

#[test]
fn qwen3_next_80b() {
    let mut types = vec!["linear_attention"; 48];
    for t in types.iter_mut().skip(3).step_by(4) {
        *t = "full_attention";
    }
    let a = arch(
        "qwen3_next",
        json!({"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2,
               "head_dim": 256, "num_hidden_layers": 48, "layer_types": types,
               "linear_num_key_heads": 16, "linear_num_value_heads": 32,
               "linear_key_head_dim": 128, "linear_value_head_dim": 128,
               "linear_conv_kernel_dim": 4}),
    );
    assert_eq!(decode(&a, Hf, 64), 102_432_768);
    // block 64·cdiv(1,097,728, 64·2048) = 576: 2 attention blocks of 1,179,648, GDN pages padded
    assert_eq!(decode(&a, Vllm, 64), 70_778_880);
    // block 16·34 = 544, page 1,114,112
    assert_eq!(decode(&a, Vllm, 16), 66_846_720);
    // GDN f32: 3·(4096 + 4096)·4 + 128·4096·4 = 2,195,456
    assert_eq!(decode(&a, LlamaCpp, 64), 104_202_240);
}

#[test]
fn granite_4_0_h_small() {
    let mut types = vec!["linear_attention"; 40];
    for i in [5, 15, 25, 35] {
        types[i] = "full_attention";
    }
    let a = arch(
        "granitemoehybrid",
        json!({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_hidden_layers": 40, "layer_types": types,
               "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128,
               "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2}),
    );
    assert_eq!(decode(&a, Hf, 64), 169_811_968);
    // block 64·cdiv(2,147,840, 64·4096) = 576: attention 2 blocks of 2,359,296
    assert_eq!(decode(&a, Vllm, 64), 103_809_024);
    assert_eq!(decode(&a, Vllm, 16), 95_158_272);
    assert_eq!(decode(&a, LlamaCpp, 64), 171_421_696);
}

#[test]
fn the_hf_layout_is_the_default() {
    let a = arch("llama", json!({}));
    assert_eq!(LlmOptions::default().cache_layout, Hf);
    let o = LlmOptions {
        seq: 1000,
        ..LlmOptions::default()
    };
    let i = inference(&a, 0, 0, 2, &o, &Default::default()).unwrap();
    assert_eq!(i.cache_assumptions, None);
    assert_eq!(i.cache_block_size, None);
}

#[test]
fn huge_batches_are_refused_not_wrapped() {
    let a = arch("llama", json!({}));
    for layout in [Hf, Vllm, LlamaCpp] {
        let o = LlmOptions {
            batch: u64::MAX / 2,
            seq: 1 << 20,
            cache_layout: layout,
            ..LlmOptions::default()
        };
        assert!(inference(&a, 0, 0, 2, &o, &Default::default()).is_err());
    }
}
