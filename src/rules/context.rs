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

/// The weight a convolution or linear layer reads, as stored.
pub struct LayerWeight<'a> {
    /// The stored value (behind a DequantizeLinear: its quantized input).
    pub value: ValueId,
    pub tensor: &'a Tensor,
    /// The logical shape (a packed 4-bit weight: `[N, K]`).
    pub dims: Vec<u64>,
    /// Stored bytes per parameter (0.5 for 4-bit).
    pub bytes_per_param: f64,
    /// Why the weight is not rewritten, when it is quantized: nnlint rewrites float weights.
    pub quantized: Option<String>,
}

impl LayerWeight<'_> {
    /// Stored bytes of `params` parameters of this weight.
    pub fn bytes(&self, params: u64) -> u64 {
        (params as f64 * self.bytes_per_param).round() as u64
    }

    /// The finding's fix text, with why it cannot be rewritten when quantized.
    pub fn fix_text(&self, fix: String) -> String {
        match &self.quantized {
            Some(why) => format!(
                "{fix} (not rewritten: {why}; rewrite the float model, then quantize it again)"
            ),
            None => fix,
        }
    }
}

/// The model under lint, analysed.
pub struct LintContext<'a> {
    pub model: &'a Model,
    pub settings: &'a Settings,
    pub report: MemReport,
    /// Shapes, typed ops and MACs at the configured batch.
    pub inf: Inference,
    pub facts: Vec<Fact>,
    /// MACs per node; `None` where unknown (an unknown op, an unknown shape): never read as 0.
    pub macs: Vec<Option<u64>>,
    /// Why memory estimates cannot be made (input dimensions left unbound), if so.
    pub unbound: Option<String>,
    training: OnceLock<Training>,
    added: OnceLock<Vec<super::fix::Applied>>,
}

impl<'a> LintContext<'a> {
    pub fn new(model: &'a Model, settings: &'a Settings) -> Result<Self> {
        let inf = analysis::shape::infer(model, &settings.bindings)?;
        let report = analysis::checked_report(model, &inf, None)?;
        analysis::training::check_range(&model.graph, &inf, &settings.train)
            .map_err(|m| crate::Error::graph(&model.path, m))?;
        let unbound = inf
            .require_bound(model, "the memory estimate")
            .err()
            .map(|e| e.to_string());
        let macs = inf
            .macs
            .iter()
            .map(|m| m.as_ref().and_then(|d| d.as_u64()))
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

    /// A layer's parameters: the elements of the trainable tensors it reads (weight and bias,
    /// through a DequantizeLinear for quantized ones, packed 4-bit at their logical count), the
    /// same count `mem` shows in the layer's row and `rewrite` reports before and after.
    pub fn layer_params(&self, n: NodeId) -> u64 {
        let g = self.graph();
        g.nodes[n]
            .inputs()
            .iter()
            .flatten()
            .filter_map(|v| {
                let v = self.dequantized(v).unwrap_or(v);
                let t = g.stored(v)?;
                let numel = storage::logical_numel(g, v, t.dtype, t.numel()?);
                (storage::classify(g, v, t.dtype, numel) == Role::Param).then_some(numel)
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The stored tensor behind a `DequantizeLinear` that produces `v`, if one does.
    pub fn dequantized_weight(&self, v: ValueId) -> Option<&'a Tensor> {
        self.graph().stored(self.dequantized(v)?)
    }

    /// The stored tensor a `DequantizeLinear` producing `v` reads, if it does.
    fn dequantized(&self, v: ValueId) -> Option<ValueId> {
        let (p, node) = self.producer(v)?;
        let q = node.input(0)?;
        (matches!(self.op(p), Op::DequantizeLinear(_)) && self.graph().stored(q).is_some())
            .then_some(q)
    }

    /// The weight of a convolution or linear layer as stored, float or quantized: Conv, Gemm and
    /// MatMul (an initializer, a `Constant`, or an integer tensor behind a DequantizeLinear),
    /// ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul, QGemm and MatMulNBits.
    pub fn layer_weight(&self, n: NodeId) -> Option<LayerWeight<'a>> {
        let g = self.graph();
        let node = &g.nodes[n];
        let slot = match self.op(n) {
            Op::Conv(_) | Op::Gemm(_) | Op::MatMul | Op::ConvInteger(_) | Op::MatMulInteger => 1,
            Op::MatMulNBits(_) => 1,
            Op::QLinearConv(_) | Op::QLinearMatMul | Op::QGemm(_) => 3,
            _ => return None,
        };
        let w = node.input(slot)?;
        let (value, behind_dq) = match g.stored(w) {
            Some(_) => (w, false),
            None => (self.dequantized(w)?, true),
        };
        let tensor = g.stored(value)?;
        let op = &node.op_type;
        let (dims, quantized) = match self.op(n) {
            Op::MatMulNBits(nb) => (
                vec![u64::try_from(nb.n).ok()?, u64::try_from(nb.k).ok()?],
                Some(format!("its weight is packed {}-bit ({op})", nb.bits)),
            ),
            _ if behind_dq => (
                tensor.dims.to_vec(),
                Some(format!(
                    "its weight is {} behind a DequantizeLinear",
                    tensor.dtype
                )),
            ),
            Op::Conv(_) | Op::Gemm(_) | Op::MatMul => (tensor.dims.to_vec(), None),
            _ => (
                tensor.dims.to_vec(),
                Some(format!("its weight is {} ({op})", tensor.dtype)),
            ),
        };
        let numel = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        let bytes_per_param = match tensor.byte_size() {
            Some(b) if numel > 0 => b as f64 / numel as f64,
            _ => tensor.dtype.bytes_for(1).unwrap_or(4) as f64,
        };
        Some(LayerWeight {
            value,
            tensor,
            dims,
            bytes_per_param,
            quantized,
        })
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
                .any(|a| a.kind == kind && a.added.iter().any(|n| n == g.value_name(v)))
        })
    }

    /// A value's shape as numbers, if fully known.
    pub fn shape(&self, v: ValueId) -> Option<Vec<u64>> {
        self.facts[v].known_shape()
    }

    /// The node that produces a value.
    pub fn producer(&self, v: ValueId) -> Option<(NodeId, &'a Node)> {
        let g = self.graph();
        g.values[v].producer().map(|(n, _)| (n, &g.nodes[n]))
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
