//! The command line (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::report::{MemFormat, SortKey};

/// Reads exported neural-network models and tells where the memory goes and how to cut it.
#[derive(Debug, Parser)]
#[command(name = "nnlint", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-layer parameters, activations and MACs, and the inference peak.
    Mem(MemArgs),
}

/// Dimensions to bind, shared by every command that analyses a graph.
#[derive(Debug, Args, Clone, Default)]
pub struct DimArgs {
    /// Batch size: binds the first axis of the graph inputs [default: 1 when it is symbolic].
    #[arg(long, short = 'b', value_name = "N")]
    pub batch: Option<u64>,
    /// Binds a named symbolic dimension, e.g. `--dim seq=512` (repeatable).
    #[arg(long = "dim", value_name = "NAME=V", value_parser = parse_dim)]
    pub dims: Vec<(String, i64)>,
}

fn parse_dim(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=V, got '{s}'"))?;
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| format!("'{value}' is not an integer"))?;
    if v < 0 {
        return Err(format!("dimension {name} cannot be negative"));
    }
    Ok((name.trim().to_string(), v))
}

#[derive(Debug, Args)]
pub struct MemArgs {
    /// An ONNX model (`-` reads standard input), a `.safetensors` file, or a sharded checkpoint's
    /// `*.safetensors.index.json`.
    pub model: PathBuf,
    #[command(flatten)]
    pub dims: DimArgs,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value = "table")]
    pub format: MemFormat,
    /// Show only the K largest layers (by --sort, or by parameters).
    #[arg(long, value_name = "K")]
    pub top: Option<usize>,
    /// Sort layers, largest first (default: graph order).
    #[arg(long, value_enum)]
    pub sort: Option<SortKey>,
    /// Also show shape-computation nodes whose outputs fold to constants.
    #[arg(long)]
    pub all: bool,
}
