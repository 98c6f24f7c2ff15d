//! What rules see: the model, its analysis at the configured batch, and (computed once, when a rule
//! asks) the training-memory estimate at the configured precision.

use std::sync::OnceLock;

use super::fix::RewriteKind;
use crate::analysis::fact::Fact;
use crate::analysis::ops::Op;
use crate::analysis::storage::{self, Role};
use crate::analysis::training::{self, TrainConfig, Training};
use crate::analysis::{self, Bindings, Inference, MemReport};
use crate::error::Result;
use crate::ir::{Graph, Model, Node, NodeId, Tensor, ValueId};

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
    added: OnceLock<Vec<super::fix::Applied>>,
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
            added: OnceLock::new(),
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

    /// The stored tensor behind a value (an initializer or a `Constant` node's tensor), if any.
    pub fn weight(&self, v: ValueId) -> Option<&'a Tensor> {
        self.graph().stored(v)
    }

    /// A layer's parameters: the elements of the trainable tensors it reads (weight and bias), the
    /// same count `mem` shows in the layer's row and `rewrite` reports before and after.
    pub fn layer_params(&self, n: NodeId) -> u64 {
        let g = self.graph();
        g.nodes[n]
            .inputs
            .iter()
            .flatten()
            .filter_map(|&v| {
                let t = g.stored(v)?;
                let numel = t.numel()?;
                (storage::classify(g, v, t.dtype, numel) == Role::Param).then_some(numel)
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Whether node `n`'s output was made by an earlier rewrite of this kind (recorded in the
    /// model's metadata): its findings are not proposed for the same rewrite again.
    pub fn made_by(&self, n: NodeId, kind: RewriteKind) -> bool {
        let g = self.graph();
        let added = self.added.get_or_init(|| {
            super::fix::applied(self.model)
                .ok()
                .flatten()
                .unwrap_or_default()
        });
        g.nodes[n].output(0).is_some_and(|v| {
            added
                .iter()
                .any(|a| a.kind == kind && a.added.contains(&g.values[v].name))
        })
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
