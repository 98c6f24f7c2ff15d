//! The command line and `nnlint.toml`, resolved once into one [`Settings`] value (ripgrep's split
//! of low-level arguments and high-level settings): every command builds [`Inputs`] from its
//! arguments and gets the same precedence rules. The command line wins over the file; the file
//! wins over the defaults. Only `lint` and `rewrite` read the file (it holds the rules'
//! thresholds); the other commands resolve from the command line alone.

use std::path::Path;

use super::cli::{ConfigArgs, TrainArgs};
use super::config::{self, Config, FailOn};
use crate::analysis::saved::Precision;
use crate::analysis::training::{HostPipeline, Optimizer, Overhead, TrainConfig};
use crate::analysis::Bindings;
use crate::error::{Error, Result};
use crate::rules::Selection;

/// The largest fixed overhead (`--overhead-context`, `--overhead-workspace`): 1 PiB.
const MAX_OVERHEAD: u64 = 1 << 50;

/// What a command passes in: its raw arguments, each `None`/empty when it has no such option.
#[derive(Default)]
pub struct Inputs<'a> {
    /// Where the configuration comes from; `None`: the command reads no configuration file.
    pub config: Option<&'a ConfigArgs>,
    pub batch: Option<u64>,
    pub dims: &'a [(String, i64)],
    pub inputs: &'a [(String, Vec<u64>)],
    /// `--value NAME=V`: scalar inputs' values.
    pub values: &'a [(String, i64)],
    pub plan: Option<&'a TrainArgs>,
    /// `lint --precision`.
    pub precision: Option<Precision>,
    pub budget: Option<u64>,
    pub select: &'a [String],
    pub ignore: &'a [String],
    pub fail_on: Option<FailOn>,
}

/// Everything a command runs with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: Config,
    pub bindings: Bindings,
    pub train: TrainConfig,
    pub budget: Option<u64>,
    pub selection: Selection,
    pub fail_on: FailOn,
}

impl Settings {
    pub fn resolve(i: Inputs) -> Result<Settings> {
        let config = match i.config {
            Some(c) => find_config(c.config.as_deref(), c.no_config)?,
            None => Config::default(),
        };
        for s in i.select.iter().chain(i.ignore) {
            config::check_selector(s)
                .map_err(|e| Error::Usage(format!("--select/--ignore: {e}")))?;
        }
        let mut dims = config.dims.clone();
        dims.extend(i.dims.iter().cloned());
        let mut inputs = std::collections::BTreeMap::new();
        for (name, shape) in i.inputs {
            if let Some(prev) = inputs.insert(name.clone(), shape.clone()) {
                if prev != *shape {
                    return Err(Error::Usage(format!(
                        "--input {name} is given twice with different shapes"
                    )));
                }
            }
        }
        let mut values = std::collections::BTreeMap::new();
        for (name, v) in i.values {
            if let Some(prev) = values.insert(name.clone(), *v) {
                if prev != *v {
                    return Err(Error::Usage(format!(
                        "--value {name} is given twice with different values ({prev} and {v})"
                    )));
                }
            }
        }
        let bindings = Bindings {
            batch: i.batch.or(config.batch),
            dims,
            inputs,
            values,
        };
        let train = train_config(i.plan, i.precision, &config)?;
        let selection = Selection {
            select: if i.select.is_empty() {
                config.select.clone()
            } else {
                Some(i.select.to_vec())
            },
            ignore: i.ignore.iter().chain(&config.ignore).cloned().collect(),
            ignore_nodes: config.ignore_nodes.clone(),
            rules: config.rules.clone(),
            source: config.path.clone(),
        };
        Ok(Settings {
            budget: i.budget.or(config.budget),
            fail_on: i.fail_on.or(config.fail_on).unwrap_or(FailOn::Error),
            bindings,
            train,
            selection,
            config,
        })
    }
}

/// The training plan: the command line's, then the file's precision and optimizer, then defaults.
fn train_config(
    plan: Option<&TrainArgs>,
    precision: Option<Precision>,
    config: &Config,
) -> Result<TrainConfig> {
    let d = TrainConfig::default();
    let precision = precision
        .or(plan.and_then(|p| p.precision))
        .or(config.precision)
        .unwrap_or(d.precision);
    let optimizer: Optimizer = plan
        .and_then(|p| p.optimizer)
        .or(config.optimizer)
        .unwrap_or(d.optimizer);
    let Some(p) = plan else {
        return Ok(TrainConfig {
            precision,
            optimizer,
            ..d
        });
    };
    // a CPU run has no CUDA context, cuDNN workspace or caching allocator
    let o = if p.device == crate::analysis::saved::Device::Cpu {
        Overhead {
            cuda_context: 0,
            workspace: 0,
            fragmentation: 0.0,
        }
    } else {
        Overhead::default()
    };
    let fragmentation = p.fragmentation.unwrap_or(o.fragmentation);
    if !(0.0..=10.0).contains(&fragmentation) {
        return Err(Error::Usage(format!(
            "--fragmentation {fragmentation} is not a fraction"
        )));
    }
    if p.gpus == 0 || p.accumulate == 0 {
        return Err(Error::Usage(
            "--gpus and --accumulate must be at least 1".into(),
        ));
    }
    // a fixed overhead past a pebibyte is a typo, and would overflow the peak's sum
    for (flag, v) in [
        ("--overhead-context", p.overhead_context),
        ("--overhead-workspace", p.overhead_workspace),
    ] {
        if let Some(v) = v.filter(|&v| v > MAX_OVERHEAD) {
            return Err(Error::Usage(format!("{flag} {v} B is more than 1 PiB")));
        }
    }
    Ok(TrainConfig {
        optimizer,
        precision,
        checkpoint: p.checkpoint,
        accumulate: p.accumulate,
        gpus: p.gpus,
        shard: p.shard,
        device: p.device,
        overhead: Overhead {
            cuda_context: p.overhead_context.unwrap_or(o.cuda_context),
            workspace: p.overhead_workspace.unwrap_or(o.workspace),
            fragmentation,
        },
        host: HostPipeline {
            workers: p.workers,
            prefetch: p.prefetch,
            pinned: !p.no_pin,
        },
    })
}

/// `--config`, else `nnlint.toml` found from the working directory up, else defaults.
fn find_config(explicit: Option<&Path>, none: bool) -> Result<Config> {
    if none {
        return Ok(Config::default());
    }
    let path = match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => std::env::current_dir()
            .ok()
            .and_then(|d| config::discover(&d)),
    };
    match path {
        Some(p) => config::load(&p),
        None => Ok(Config::default()),
    }
}
