//! The command line (clap derive): the only module that knows clap. Enum-valued options take their
//! names and help from the library's [`Named`] enums through [`named`], so the spelling users type
//! is the one reports print.

use std::path::PathBuf;

use crate::analysis::llm::forward::Attn;
use crate::analysis::llm::layers::CacheLayout;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use super::config::FailOn;
use crate::analysis::fit::Gpu;
use crate::analysis::saved::{Device, Precision};
use crate::analysis::training::{Checkpoint, Optimizer, Shard};
use crate::report::lint::LintFormat;
use crate::report::rewrite::RewriteFormat;
use crate::report::{FitFormat, MemFormat, SortKey};
use crate::rewrite::RankChoice;
use crate::util::names::Named;
use crate::util::units::parse_size;

/// A clap value parser for a [`Named`] enum: its names, their help, and the value itself.
pub fn named<T: Named + Clone>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(
        T::ALL
            .iter()
            .map(|v| PossibleValue::new(v.name()).help(v.help())),
    )
    .try_map(|s: String| T::from_name(&s).ok_or_else(|| format!("'{s}' is not a valid value")))
}

/// `--shard`: the data-parallel and sharding strategies of training (tensor parallelism is how
/// `fit` splits serving, not a training plan).
fn training_shard() -> impl TypedValueParser<Value = Shard> {
    PossibleValuesParser::new(
        Shard::ALL
            .iter()
            .filter(|v| **v != Shard::TensorParallel)
            .map(|v| PossibleValue::new(v.name()).help(v.help())),
    )
    .try_map(|s: String| Shard::from_name(&s).ok_or_else(|| format!("'{s}' is not a valid value")))
}

/// A count that must be at least 1 (a batch, a number of GPUs or steps, `--top`), with messages
/// about the value: negative numbers reach it (`allow_negative_numbers`) instead of clap's
/// "use '-- -1'" tip, and scientific notation is asked for in digits.
fn positive<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let t = s.trim().replace('_', "");
    match t.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(v) => T::try_from(v).map_err(|_| format!("{v} is too large")),
        Err(_) if t.starts_with('-') && t[1..].parse::<f64>().is_ok() => {
            Err(format!("'{s}' is negative: give a positive integer"))
        }
        Err(_) => match t.parse::<f64>() {
            Ok(f) if f.is_finite() && f.fract() == 0.0 && (1.0..1.8e19).contains(&f) => Err(
                format!("'{s}' is not written in digits: write {}", f as u64),
            ),
            Ok(f) if f.is_finite() && f > u64::MAX as f64 => Err(format!("'{s}' is too large")),
            Ok(_) => Err(format!("'{s}' is not a whole number")),
            Err(_) => Err(format!("'{s}' is not a positive integer")),
        },
    }
}

/// A count that may be 0 (data-loader workers), with [`positive`]'s messages otherwise.
fn count<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    if s.trim() == "0" {
        return T::try_from(0).map_err(|_| "0 is out of range".to_string());
    }
    positive(s)
}

/// Reads exported neural-network models and tells where the memory goes and how to cut it.
#[derive(Debug, Parser)]
#[command(name = "nnlint", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// No progress bars and no warnings on standard error (errors are still printed).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-layer parameters, activations and MACs, and the inference peak.
    Mem(MemArgs),
    /// Which batch size, precision, checkpointing and sharding make a model fit a GPU.
    Fit(FitArgs),
    /// Checks models against the rule set (costly patterns, memory budgets, graph hygiene).
    Lint(LintArgs),
    /// Writes a new ONNX model with the fixes the rules propose (depthwise-separable convolutions,
    /// a global-average-pooling head, low-rank linear layers), checked numerically.
    Rewrite(RewriteArgs),
    /// Compares a rewritten model with its original numerically (f64, seeded random inputs).
    Verify(VerifyArgs),
    /// Lists the rules.
    Rules(RulesArgs),
    /// Prints a rule's documentation.
    Explain {
        /// A rule code (NL101) or name (heavy-standard-conv).
        rule: String,
    },
    /// Writes one self-contained HTML page: per-layer memory, the inference liveness curve, the
    /// training step, the fit plans, the lint findings and, with --rewritten, the before/after.
    Report(ReportArgs),
    /// Prints a shell completion script (bash, zsh, fish, elvish, powershell) on standard output.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Prints the man page (roff) on standard output, as docs/nnlint.1 holds it.
    Man,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// An ONNX model, a `.safetensors` file, a sharded checkpoint's `*.safetensors.index.json`, a
    /// checkpoint folder holding one of those, or a Hub ID in the local Hugging Face cache
    /// (org/name[@revision], org/name/file.gguf).
    pub model: PathBuf,
    /// Where to write the page, `-` for standard output [default: MODEL-report.html beside the
    /// input].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The GPU the fit plans are for: a memory size or a card (as `fit --gpu`) [default:
    /// A100-80GB].
    #[arg(long, value_parser = crate::analysis::fit::parse_gpu)]
    pub gpu: Option<Gpu>,
    /// The batch per optimizer step the fit plans keep.
    #[arg(long, default_value_t = 256, value_name = "N", allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub effective_batch: u64,
    /// A model `nnlint rewrite` wrote from MODEL: adds its totals before and after.
    #[arg(long, value_name = "FILE")]
    pub rewritten: Option<PathBuf>,
    /// Memory budget for the `memory-budget` rule (e.g. 16GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub budget: Option<u64>,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub dims: DimArgs,
    #[command(flatten)]
    pub plan: TrainArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// How a MODEL that is a Hugging Face Hub ID is read (`mem`, `fit`, `report`). A path that
/// exists always wins over an ID.
#[derive(Debug, Args, Clone, Default)]
pub struct HubArgs {
    /// The revision of a Hub ID: a branch, a tag or a commit, as `@REV` after the ID gives it
    /// [default: main].
    #[arg(long, value_name = "REV", help_heading = "Hugging Face Hub")]
    pub revision: Option<String>,
    /// Never ask the Hub (as HF_HUB_OFFLINE=1): read IDs from the Hugging Face cache and
    /// nnlint's own cache only.
    #[arg(long, help_heading = "Hugging Face Hub")]
    pub offline: bool,
    /// Fetch a Hub ID's headers again even when nnlint's cache holds them (a branch that moved).
    #[arg(long, help_heading = "Hugging Face Hub", conflicts_with = "offline")]
    pub refresh: bool,
}

/// Where rule thresholds come from, for the commands that run the rules.
#[derive(Debug, Args, Clone, Default)]
pub struct ConfigArgs {
    /// Configuration file: an nnlint.toml, or a pyproject.toml with [tool.nnlint] [default: the
    /// nearest of those from the working directory up; nnlint.toml first].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Ignore any nnlint.toml or [tool.nnlint].
    #[arg(long, conflicts_with = "config")]
    pub no_config: bool,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// ONNX models to lint (in parallel; one report). A Hub ID (org/name[@revision]) is looked up
    /// in the local Hugging Face cache, and a checkpoint found there has no graph to lint.
    #[arg(required = true)]
    pub models: Vec<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Rules to run: codes, code prefixes, names or categories (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub select: Vec<String>,
    /// Rules not to run (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub ignore: Vec<String>,
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<LintFormat>(), default_value = "human")]
    pub format: LintFormat,
    /// Lowest severity that makes the run fail with exit code 1 [default: error].
    #[arg(long, value_parser = named::<FailOn>())]
    pub fail_on: Option<FailOn>,
    /// Report only findings not in this baseline file.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Write the current findings as a baseline file and exit 0.
    #[arg(long, value_name = "FILE")]
    pub write_baseline: Option<PathBuf>,
    /// Memory budget for `memory-budget` (e.g. 16GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Batch size the rules analyse at [default: the config's, else 1].
    #[arg(long, short = 'b', value_name = "N", allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub batch: Option<u64>,
    /// Binds a named symbolic dimension (repeatable).
    #[arg(long = "dim", value_name = "NAME=V", value_parser = parse_dim)]
    pub dims: Vec<(String, i64)>,
    /// Gives one input its whole shape, e.g. `--input x=1x3x224x224` (repeatable).
    #[arg(long = "input", value_name = "NAME=SHAPE", value_parser = parse_input)]
    pub inputs: Vec<(String, Vec<u64>)>,
    /// Gives a scalar input its value, e.g. `--value sr=16000` (repeatable): decides the `If`s
    /// whose condition and the `Loop`s whose trip count is computed from it.
    #[arg(long = "value", value_name = "NAME=V", value_parser = parse_value)]
    pub values: Vec<(String, i64)>,
    /// Training precision for the memory rules [default: the config's, else fp32].
    #[arg(long, value_parser = named::<Precision>())]
    pub precision: Option<Precision>,
}

#[derive(Debug, Args)]
pub struct RewriteArgs {
    /// The ONNX model to rewrite (never modified).
    pub model: PathBuf,
    /// Where to write the rewritten model [default: MODEL-rewritten.onnx beside the input].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Rewrites to apply, by rule (NL101, heavy-standard-conv) or by rewrite (depthwise-separable,
    /// gap-head, low-rank), comma-separated [default: every finding that has a rewrite].
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub rule: Vec<String>,
    /// Only rewrite findings on nodes whose name matches this glob (repeatable).
    #[arg(long = "node", value_name = "GLOB")]
    pub nodes: Vec<String>,
    /// Rank of the factorisations: a number (one below the full rank changes the output; asking
    /// for it applies it), or `full` for the exact decomposition [default, with `--lossy`: 1 for
    /// convolutions (the MobileNet block), the rule's proposal for linear layers].
    #[arg(long, value_name = "N|full", value_parser = parse_rank, conflicts_with = "energy")]
    pub rank: Option<RankChoice>,
    /// Keep the smallest rank whose squared singular values hold this share of the total (0-1].
    #[arg(long, value_name = "E", value_parser = parse_energy)]
    pub energy: Option<f64>,
    /// Also apply rewrites that change the model's output (a rank below full, a GAP head): the
    /// model must then be fine-tuned [default: exact rewrites only; `--rank N` and `--energy E`
    /// ask for their truncated factorisations].
    #[arg(long)]
    pub lossy: bool,
    /// Skip the numeric check of the written model.
    #[arg(long)]
    pub no_verify: bool,
    /// Print a unified diff of the graph before and after.
    #[arg(long)]
    pub diff: bool,
    /// Write the weights to an external data file (OUT.data) [default: when the input has one].
    #[arg(long)]
    pub external_data: bool,
    /// Seed of the random inputs and of the randomized SVD.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = count::<u64>)]
    pub seed: u64,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub dims: DimArgs,
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<RewriteFormat>(), default_value = "table")]
    pub format: RewriteFormat,
    #[command(flatten)]
    pub plan: TrainArgs,
}

fn parse_rank(s: &str) -> Result<RankChoice, String> {
    if s.eq_ignore_ascii_case("full") {
        return Ok(RankChoice::Full);
    }
    match s.parse::<u64>() {
        Ok(r) if r >= 1 => Ok(RankChoice::Fixed(r)),
        _ => Err(format!("'{s}' is not a rank (a number from 1, or 'full')")),
    }
}

fn parse_energy(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(e) if e > 0.0 && e <= 1.0 => Ok(e),
        _ => Err(format!("'{s}' is not a share in (0, 1]")),
    }
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The original model.
    pub original: PathBuf,
    /// The model `nnlint rewrite` wrote from it.
    pub rewritten: PathBuf,
    #[command(flatten)]
    pub dims: DimArgs,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the whole-model inputs and both models' outputs as .npy files (float64) and a
    /// manifest.json into this directory.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<RewriteFormat>(), default_value = "table")]
    pub format: RewriteFormat,
}

#[derive(Debug, Args)]
pub struct RulesArgs {
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<RulesFormat>(), default_value = "table")]
    pub format: RulesFormat,
}

crate::named_enum! {
    /// Output formats of `nnlint rules`.
    pub enum RulesFormat {
        /// One line per rule.
        Table = "table",
        /// The rules' metadata and documentation.
        Json = "json",
        /// The rule catalog (docs/rules.md).
        Markdown = "markdown",
    }
}

#[derive(Debug, Args)]
// fit chooses these itself (it ranks every plan) and refuses them: they stay out of its help
#[command(
    mut_arg("precision", |a| a.hide(true)),
    mut_arg("checkpoint", |a| a.hide(true)),
    mut_arg("accumulate", |a| a.hide(true)),
    mut_arg("shard", |a| a.hide(true))
)]
pub struct FitArgs {
    /// An ONNX model, a Hugging Face checkpoint folder, a GGUF file, or a Hub ID in the local
    /// Hugging Face cache (org/name[@revision], org/name/file.gguf).
    pub model: PathBuf,
    /// The GPU: a memory size (16GiB) or a card (T4, V100-16GB, V100-32GB, A10, L4, RTX-3090,
    /// RTX-4090, A100-40GB, L40S, A100-80GB, H100-80GB, H200).
    #[arg(long, value_parser = crate::analysis::fit::parse_gpu)]
    pub gpu: Gpu,
    /// The batch per optimizer step to keep (samples, or sequences of a language model), with
    /// accumulation where a plan needs it [default: 256].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub effective_batch: Option<u64>,
    /// Language models: tokens per sequence [default: the context length, at most 4096].
    #[arg(long, visible_alias = "max-model-len", value_name = "TOKENS", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub seq: Option<u64>,
    /// Language models: the rank of the LoRA and QLoRA plans [default: 16].
    #[arg(long, value_name = "RANK", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub lora: Option<u64>,
    /// Answer for serving (inference) instead of training.
    #[arg(long)]
    pub inference: bool,
    #[command(flatten)]
    pub layout: CacheLayoutArgs,
    #[command(flatten)]
    pub image: ImageArgs,
    /// Binds a named symbolic dimension other than the batch, e.g. `--dim seq=512` (repeatable).
    #[arg(long = "dim", value_name = "NAME=V", value_parser = parse_dim)]
    pub dims: Vec<(String, i64)>,
    /// Gives one input its shape but for the batch, e.g. `--input ids=1x512` (repeatable; the batch
    /// axis is searched).
    #[arg(long = "input", value_name = "NAME=SHAPE", value_parser = parse_input)]
    pub inputs: Vec<(String, Vec<u64>)>,
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<FitFormat>(), default_value = "table")]
    pub format: FitFormat,
    #[command(flatten)]
    pub plan: TrainArgs,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Dimensions to bind, shared by every command that analyses a graph.
#[derive(Debug, Args, Clone, Default)]
pub struct DimArgs {
    /// Batch size: binds the first axis of the graph inputs [default: 1 when it is symbolic].
    #[arg(long, short = 'b', value_name = "N", allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub batch: Option<u64>,
    /// Binds a named symbolic dimension, e.g. `--dim seq=512` (repeatable).
    #[arg(long = "dim", value_name = "NAME=V", value_parser = parse_dim)]
    pub dims: Vec<(String, i64)>,
    /// Gives one input its whole shape, e.g. `--input x=1x3x48x192` (repeatable), as trtexec's
    /// `--shapes` and onnxsim's `--overwrite-input-shape` do; binds dims that have no usable name.
    #[arg(long = "input", value_name = "NAME=SHAPE", value_parser = parse_input)]
    pub inputs: Vec<(String, Vec<u64>)>,
    /// Gives a scalar input its value, e.g. `--value sr=16000` (repeatable): an `If` whose
    /// condition is computed from it counts only the branch that runs, a `Loop` whose trip count
    /// is, its body that many times.
    #[arg(long = "value", value_name = "NAME=V", value_parser = parse_value)]
    pub values: Vec<(String, i64)>,
}

/// `NAME=V`: an integer (a boolean input takes 0 or 1), split at the last `=` as input names may
/// hold one.
fn parse_value(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expected NAME=V, got '{s}'"))?;
    if name.trim().is_empty() {
        return Err(format!("'{s}' names no input"));
    }
    let v: i64 = match value.trim() {
        "true" => 1,
        "false" => 0,
        t => t
            .parse()
            .map_err(|_| format!("'{value}' is not an integer (nor true/false)"))?,
    };
    Ok((name.trim().to_string(), v))
}

/// `NAME=1x3x224x224` (or `NAME:1,3,224,224`): split at the last `=` (or `:`), since input names
/// may hold either (`onnx::Flatten_0`).
fn parse_input(s: &str) -> Result<(String, Vec<u64>), String> {
    let (name, shape) = s
        .rsplit_once('=')
        .or_else(|| s.rsplit_once(':'))
        .ok_or_else(|| format!("expected NAME=SHAPE such as x=1x3x224x224, got '{s}'"))?;
    if name.is_empty() {
        return Err(format!("'{s}' names no input"));
    }
    if shape.trim().is_empty() {
        return Ok((name.to_string(), Vec::new())); // a scalar
    }
    let dims = shape
        .split(['x', 'X', ','])
        .map(|d| {
            d.trim().parse::<u64>().map_err(|_| {
                format!("'{d}' in '{shape}' is not a dimension (a non-negative integer)")
            })
        })
        .collect::<Result<Vec<u64>, String>>()?;
    Ok((name.to_string(), dims))
}

fn parse_dim(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=V, got '{s}'"))?;
    let v: i64 = value.trim().parse().map_err(|e: std::num::ParseIntError| {
        use std::num::IntErrorKind::{NegOverflow, PosOverflow};
        match e.kind() {
            PosOverflow | NegOverflow => {
                format!(
                    "'{value}' is too large for a dimension (at most {})",
                    i64::MAX
                )
            }
            _ => format!("'{value}' is not an integer"),
        }
    })?;
    if v < 0 {
        return Err(format!("dimension {name} cannot be negative"));
    }
    Ok((name.trim().to_string(), v))
}

#[derive(Debug, Args)]
pub struct MemArgs {
    /// An ONNX model (`-` reads standard input), a `.safetensors` file, a sharded checkpoint's
    /// `*.safetensors.index.json`, a checkpoint folder, a GGUF file, or a Hub ID in the local
    /// Hugging Face cache (org/name[@revision], org/name/file.gguf).
    pub model: PathBuf,
    #[command(flatten)]
    pub dims: DimArgs,
    /// Output format.
    #[arg(long, short = 'f', value_parser = named::<MemFormat>(), default_value = "table")]
    pub format: MemFormat,
    /// Show only the K largest layers (by --sort, or by parameters); 0 shows the totals only.
    #[arg(long, value_name = "K", allow_negative_numbers = true, value_parser = count::<usize>)]
    pub top: Option<usize>,
    /// Sort layers, largest first (default: graph order).
    #[arg(long, value_parser = named::<SortKey>())]
    pub sort: Option<SortKey>,
    /// Also show shape-computation nodes whose outputs fold to constants.
    #[arg(long)]
    pub all: bool,
    /// Estimate the memory of a training step (weights, gradients, optimizer, saved activations).
    #[arg(long)]
    pub train: bool,
    #[command(flatten)]
    pub plan: TrainArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Options of language-model checkpoints (Hugging Face folders, GGUF files).
#[derive(Debug, Args, Clone)]
pub struct LlmArgs {
    /// Tokens per sequence [default: the context length, at most 4096].
    #[arg(long, visible_alias = "max-model-len", value_name = "TOKENS", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub seq: Option<u64>,
    /// KV-cache dtype: fp32, bf16, fp16 or fp8 [default: the checkpoint's].
    #[arg(long, value_name = "DTYPE", value_parser = parse_kv_dtype, help_heading = "Language models")]
    pub kv_dtype: Option<crate::ir::DType>,
    #[command(flatten)]
    pub layout: CacheLayoutArgs,
    /// Attention implementation: eager keeps the S×S probabilities, sdpa and flash do not.
    #[arg(long, value_parser = named::<Attn>(), default_value = "sdpa", help_heading = "Language models")]
    pub attn: Attn,
    /// Fine-tune with LoRA adapters of this rank (implies --train).
    #[arg(long, value_name = "RANK", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub lora: Option<u64>,
    /// Modules that get adapters: names (q_proj,v_proj; the family's own names work too) or
    /// all-linear. A list no linear layer of the model matches is refused, as peft refuses it
    /// [default: q_proj,v_proj; all-linear with --qlora].
    #[arg(long, value_name = "MODULES", help_heading = "Language models")]
    pub lora_targets: Option<String>,
    /// QLoRA: a 4-bit NF4 base (double quantization, bf16 compute) with LoRA adapters (rank
    /// --lora, default 16; on every linear layer unless --lora-targets says otherwise; implies
    /// --train).
    #[arg(long, help_heading = "Language models")]
    pub qlora: bool,
    /// Serving: count the logits of every prefilled position (a `forward()` without
    /// `logits_to_keep`), not only the last one that generation keeps.
    #[arg(long, help_heading = "Language models")]
    pub all_logits: bool,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// Image inputs of multimodal checkpoints (`mem`, `fit`, `report`).
#[derive(Debug, Args, Clone, Default)]
pub struct ImageArgs {
    /// Multimodal models: images per sequence; their tokens join --seq's text tokens, and the
    /// vision encoder's memory is counted.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub images: Option<u64>,
    /// The images' size, HxW or one side for a square [default: the processor's fixed or
    /// largest size; Qwen-VL reads images at their own size and needs it].
    #[arg(long, value_name = "HxW", value_parser = parse_image_size, help_heading = "Language models")]
    pub image_size: Option<(u64, u64)>,
}

fn parse_image_size(s: &str) -> Result<(u64, u64), String> {
    let side = |x: &str| -> Result<u64, String> {
        match x.trim().parse::<u64>() {
            Ok(v) if v > 0 && v <= 1 << 20 => Ok(v),
            _ => Err(format!(
                "'{x}' in '{s}' is not an image side (pixels, 1 to 1048576)"
            )),
        }
    };
    match s.split_once(['x', 'X']) {
        Some((h, w)) => Ok((side(h)?, side(w)?)),
        None => side(s).map(|v| (v, v)),
    }
}

impl LlmArgs {
    /// The options given a value other than their default.
    pub fn given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (flag, on) in [
            ("--seq", self.seq.is_some()),
            ("--kv-dtype", self.kv_dtype.is_some()),
            (
                "--cache-layout",
                self.layout.cache_layout != CacheLayout::Hf,
            ),
            ("--block-size", self.layout.block_size.is_some()),
            ("--attn", self.attn != Attn::Sdpa),
            ("--lora", self.lora.is_some()),
            ("--qlora", self.qlora),
            ("--lora-targets", self.lora_targets.is_some()),
            ("--all-logits", self.all_logits),
            ("--images", self.image.images.is_some()),
            ("--image-size", self.image.image_size.is_some()),
        ] {
            if on {
                out.push(flag);
            }
        }
        out
    }

    /// The error for these options on a model that is not a language-model checkpoint (an ONNX
    /// graph, a weights file), `None` when none was given.
    pub fn refused_for_graphs(&self) -> Option<crate::error::Error> {
        let given = self.given();
        if given.is_empty() {
            return None;
        }
        Some(crate::error::Error::Usage(format!(
            "{} {} only to language-model checkpoints (a Hugging Face folder or a .gguf file){}",
            given.join(", "),
            if given.len() == 1 { "applies" } else { "apply" },
            if given.contains(&"--seq") {
                "; an ONNX graph's sequence is bound with --dim NAME=N"
            } else {
                ""
            }
        )))
    }

    /// The analysis options.
    pub fn options(&self) -> crate::analysis::llm::LlmOptions {
        use crate::analysis::llm::forward::{Lora, Targets};
        let given = self.lora_targets.as_deref().unwrap_or(if self.qlora {
            "all-linear"
        } else {
            "q_proj,v_proj"
        });
        let targets = if given.eq_ignore_ascii_case("all-linear") {
            Targets::AllLinear
        } else {
            Targets::Named(
                given
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            )
        };
        crate::analysis::llm::LlmOptions {
            batch: 1,
            seq: self.seq.unwrap_or(0),
            kv_dtype: self.kv_dtype,
            attn: self.attn,
            lora: (self.lora.is_some() || self.qlora).then(|| Lora {
                rank: self.lora.unwrap_or(16),
                targets,
            }),
            qlora: self.qlora,
            all_logits: self.all_logits,
            cache_layout: self.layout.cache_layout,
            block_size: self.layout.block_size(),
            images: self.image.images.unwrap_or(0),
            image_size: self.image.image_size,
        }
    }
}

/// Whose allocation the KV cache is counted as (`mem`, `fit`, `report`).
#[derive(Debug, Args, Clone)]
pub struct CacheLayoutArgs {
    /// The KV cache as this runtime allocates it: hf (what transformers 5.24 holds), vllm
    /// (vLLM 0.34's paged blocks) or llama.cpp (0c1e57098's unified cache of 256-cell steps).
    #[arg(long, value_parser = named::<CacheLayout>(), default_value = "hf", help_heading = "Language models")]
    pub cache_layout: CacheLayout,
    /// Tokens per vLLM block (with --cache-layout vllm) [default: 64, vLLM 0.34's; 16 before].
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, value_parser = positive::<u64>, help_heading = "Language models")]
    pub block_size: Option<u64>,
}

impl CacheLayoutArgs {
    /// `--block-size` sizes vLLM's blocks only: refused with another layout, not ignored.
    pub fn check(&self) -> crate::error::Result<()> {
        if self.block_size.is_some() && self.cache_layout != CacheLayout::Vllm {
            return Err(crate::error::Error::Usage(
                "--block-size sizes vLLM's paged blocks: it needs --cache-layout vllm".into(),
            ));
        }
        Ok(())
    }

    /// The block size to use.
    pub fn block_size(&self) -> u64 {
        self.block_size
            .unwrap_or(crate::analysis::llm::layers::VLLM_BLOCK_SIZE)
    }
}

fn parse_kv_dtype(s: &str) -> Result<crate::ir::DType, String> {
    use crate::ir::DType;
    Ok(match s.to_ascii_lowercase().as_str() {
        "fp32" | "float32" | "f32" => DType::F32,
        "bf16" | "bfloat16" => DType::BF16,
        "fp16" | "float16" | "f16" | "half" => DType::F16,
        "fp8" | "fp8_e4m3" | "f8e4m3" | "fp8_e5m2" | "int8" => DType::F8E4M3FN,
        _ => {
            return Err(format!(
                "'{s}' is not a cache dtype (fp32, bf16, fp16 or fp8)"
            ))
        }
    })
}

/// A training plan (`mem --train`, `fit`, and the training lines of `rewrite`).
#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    /// Optimizer, for the state it keeps per parameter [default: adam].
    #[arg(long, value_parser = named::<Optimizer>(), help_heading = "Training")]
    pub optimizer: Option<Optimizer>,
    /// Numeric precision [default: fp32].
    #[arg(long, value_parser = named::<Precision>(), help_heading = "Training")]
    pub precision: Option<Precision>,
    /// Gradient checkpointing: none, sqrt (sqrt(n) segments), or every:K layers.
    #[arg(
        long,
        default_value = "none",
        value_name = "none|sqrt|every:K",
        help_heading = "Training"
    )]
    pub checkpoint: Checkpoint,
    /// Micro-batches accumulated per optimizer step (--batch is the micro-batch).
    #[arg(
        long,
        default_value_t = 1,
        value_name = "STEPS",
        help_heading = "Training",
        allow_negative_numbers = true,
        value_parser = positive::<u32>
    )]
    pub accumulate: u32,
    /// Number of GPUs.
    #[arg(long, default_value_t = 1, help_heading = "Training", allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub gpus: u32,
    /// Data parallelism and sharding over the GPUs.
    #[arg(long, value_parser = training_shard(), default_value = "none", help_heading = "Training")]
    pub shard: Shard,
    /// Whose autograd behaviour to model (dropout masks, autocast's fp32 ops).
    #[arg(long, value_parser = named::<Device>(), default_value = "cuda", help_heading = "Training")]
    pub device: Device,
    /// CUDA context size [default: 512MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Overhead")]
    pub overhead_context: Option<u64>,
    /// cuDNN/cuBLAS workspace [default: 256MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Overhead")]
    pub overhead_workspace: Option<u64>,
    /// Allocator caching and fragmentation, as a fraction of the peak [default: 0.05].
    #[arg(long, value_name = "FRACTION", help_heading = "Overhead")]
    pub fragmentation: Option<f64>,
    /// Data-loader worker processes, for host memory.
    #[arg(long, default_value_t = 4, help_heading = "Input pipeline", allow_negative_numbers = true, value_parser = count::<u32>)]
    pub workers: u32,
    /// Batches each worker prefetches.
    #[arg(long, default_value_t = 2, help_heading = "Input pipeline", allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub prefetch: u32,
    /// The data loader does not pin host memory.
    #[arg(long, help_heading = "Input pipeline")]
    pub no_pin: bool,
}

impl TrainArgs {
    /// The plan options given a value other than their default, as typed (`--precision amp-bf16`):
    /// what `fit` searches itself.
    pub fn plan_options(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(p) = self.precision {
            out.push(format!("--precision {}", p.name()));
        }
        if self.checkpoint != Checkpoint::None {
            out.push(format!("--checkpoint {}", self.checkpoint));
        }
        if self.accumulate != 1 {
            out.push(format!("--accumulate {}", self.accumulate));
        }
        if self.shard != Shard::None {
            out.push(format!("--shard {}", self.shard.name()));
        }
        out
    }

    /// Every training option given a value other than its default (what `mem` without `--train`
    /// would ignore).
    pub fn training_options(&self) -> Vec<String> {
        let mut out = self.plan_options();
        if let Some(o) = self.optimizer {
            out.push(format!("--optimizer {}", o.name()));
        }
        if self.gpus != 1 {
            out.push(format!("--gpus {}", self.gpus));
        }
        if self.device != Device::Cuda {
            out.push(format!("--device {}", self.device.name()));
        }
        for (flag, given) in [
            ("--overhead-context", self.overhead_context.is_some()),
            ("--overhead-workspace", self.overhead_workspace.is_some()),
            ("--fragmentation", self.fragmentation.is_some()),
            ("--workers", self.workers != 4),
            ("--prefetch", self.prefetch != 2),
            ("--no-pin", self.no_pin),
        ] {
            if given {
                out.push(flag.to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn dim_bindings_say_what_is_wrong_with_the_value() {
        assert_eq!(parse_dim("batch=8"), Ok(("batch".into(), 8)));
        assert_eq!(
            parse_dim("batch=18446744073709551615").unwrap_err(),
            format!(
                "'18446744073709551615' is too large for a dimension (at most {})",
                i64::MAX
            )
        );
        assert_eq!(parse_dim("batch=x").unwrap_err(), "'x' is not an integer");
        assert!(parse_dim("batch=-1").unwrap_err().contains("negative"));
    }

    #[test]
    fn scalar_values_parse_integers_and_booleans() {
        assert_eq!(parse_value("sr=16000"), Ok(("sr".into(), 16000)));
        assert_eq!(parse_value("onnx::a=b=-3"), Ok(("onnx::a=b".into(), -3)));
        assert_eq!(parse_value("flag=true"), Ok(("flag".into(), 1)));
        assert!(parse_value("sr=16k")
            .unwrap_err()
            .contains("not an integer"));
        assert!(parse_value("sr").unwrap_err().contains("NAME=V"));
        assert!(parse_value("=3").unwrap_err().contains("names no input"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn enum_options_take_the_enum_names() {
        let cli = Cli::try_parse_from([
            "nnlint",
            "mem",
            "m.onnx",
            "--train",
            "--precision",
            "amp-bf16",
            "--sort",
            "macs",
        ])
        .unwrap();
        let Command::Mem(m) = cli.command else {
            panic!("mem")
        };
        assert_eq!(m.plan.precision, Some(Precision::AmpBf16));
        assert_eq!(m.sort, Some(SortKey::Macs));
        assert!(Cli::try_parse_from(["nnlint", "mem", "m.onnx", "--sort", "size"]).is_err());
    }
}
