//! nnlint reads exported neural-network models (ONNX graphs, safetensors weights) and tells where
//! the memory goes and how to cut it.
//!
//! The modules are the stages of one pipeline, listed in the order data flows through them; a
//! module only imports modules listed before it (`tests/layering.rs` checks every `crate::` path),
//! and docs/architecture.md says what goes where.

pub mod util;

pub mod error;

pub mod ir;

pub mod load;

pub mod analysis;

pub mod rules;

pub mod rewrite;

pub mod verify;

pub mod report;

pub mod app;

pub use app::{run, ExitStatus};
pub use error::{Error, Result};
