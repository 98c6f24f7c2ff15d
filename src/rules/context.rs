//! What rules see: the model, its analysis at the configured batch, and (computed once, when a rule
//! asks) the training-memory estimate at the configured precision.

use std::sync::OnceLock;

use crate::analysis::fact::Fact;
use crate::analysis::ops::Op;
use crate::analysis::training::{self, TrainConfig, Training};
use crate::analysis::{self, Bindings, Inference, MemReport};
use crate::error::Result;
use crate::ir::{Graph, Model, Node, NodeId, ValueId};

/// Lint settings that are not per rule.
#[derive(Clone, Debug)]
pub struct Settings {
    pub bindings: Bindings,
    pub train: TrainConfig,
    /// Memory budget for `memory-budget`.
    pub budget: Option<u64>,
}

/// The model under lint, analysed.
pub struct LintContext<'a> {
    pub model: &'a Model,
    pub settings: &'a Settings,
    pub report: MemReport,
    /// Shapes, typed ops and MACs at the configured batch.
    pub inf: Inference,
    pub facts: Vec<Fact>,
    pub macs: Vec<u64>,
    /// Why memory estimates cannot be made (input dimensions left unbound), if so.
    pub unbound: Option<String>,
    training: OnceLock<Training>,
}

impl<'a> LintContext<'a> {
    pub fn new(model: &'a Model, settings: &'a Settings) -> Result<Self> {
        let inf = analysis::shape::infer(model, &settings.bindings)?;
        let report = analysis::report(model, &inf, None);
        let unbound = inf
            .require_bound(model, "the memory estimate")
            .err()
            .map(|e| e.to_string());
        let macs = inf
            .macs
            .iter()
            .map(|m| m.as_ref().and_then(|d| d.as_u64()).unwrap_or(0))
            .collect();
        Ok(LintContext {
            model,
            settings,
            report,
            facts: inf.facts.clone(),
            inf,
            macs,
            unbound,
            training: OnceLock::new(),
        })
    }

    pub fn graph(&self) -> &'a Graph {
        &self.model.graph
    }

    /// The training estimate at the configured batch and plan.
    pub fn training(&self) -> &Training {
        self.training
            .get_or_init(|| training::estimate(self.graph(), &self.inf, &self.settings.train))
    }

    /// The typed op of node `n`.
    pub fn op(&self, n: NodeId) -> &Op {
        &self.inf.ops[n]
    }

    /// A value's shape as numbers, if fully known.
    pub fn shape(&self, v: ValueId) -> Option<Vec<u64>> {
        self.facts[v].known_shape()
    }

    /// The node that produces a value.
    pub fn producer(&self, v: ValueId) -> Option<(NodeId, &'a Node)> {
        let g = self.graph();
        g.values[v].producer.map(|(n, _)| (n, &g.nodes[n]))
    }

    /// Bytes of a value at the configured batch.
    pub fn bytes(&self, v: ValueId) -> Option<u64> {
        self.facts[v].bytes()?.as_u64()
    }

    /// The graph's name, for model-wide findings.
    pub fn model_label(&self) -> String {
        let g = &self.graph().name;
        if g.is_empty() {
            "(model)".into()
        } else {
            g.clone()
        }
    }
}
