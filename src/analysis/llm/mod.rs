//! Language-model checkpoints (Hugging Face folders, GGUF files): the architecture from the
//! config, parameters from the headers, the KV cache and inference memory, and the memory of a
//! fine-tuning step (full, LoRA, QLoRA) from a model of what autograd keeps ([`forward`]).

pub mod arch;
pub mod forward;
pub mod tape;
