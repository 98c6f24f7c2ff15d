//! What a finding proposes to change, typed: the rewrite, the nodes it applies to, its rank and its
//! declared safety. `nnlint rewrite` builds from this proposal instead of matching the pattern
//! again, so lint and rewrite cannot disagree about what is fixable. A rewritten model records
//! what was applied ([`Applied`]) in its metadata, which `verify` reads back and the rules consult
//! so that a rewrite's own output is not proposed for the same rewrite again.

use serde::{Deserialize, Serialize};

use crate::ir::{Model, NodeId};

crate::named_enum! {
    /// The rewrites nnlint can apply.
    pub enum RewriteKind {
        /// A standard convolution becomes a depthwise and a 1x1 convolution.
        DepthwiseSeparable = "depthwise-separable",
        /// A flattened feature map's fully-connected head gets global average pooling first.
        GapHead = "gap-head",
        /// A linear layer becomes two, from a truncated SVD.
        LowRank = "low-rank",
    }
}

crate::named_enum! {
    /// How a rewrite changes the function the model computes.
    pub enum Safety {
        /// The same function up to floating-point round-off (a full-rank decomposition).
        Exact = "exact",
        /// A truncated factorisation: the error is bounded by the energy dropped.
        Approximate = "approximate",
        /// A different function that agrees with the original only in a special case: fine-tune.
        Lossy = "lossy",
    }
}

impl Safety {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

/// The nodes a proposed rewrite replaces, and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// The convolution, and the rank of the per-channel factorisation.
    DepthwiseSeparable { conv: NodeId, rank: u64, full: u64 },
    /// The fully-connected layer, the Flatten/Reshape feeding it, and the pass-through nodes
    /// (Identity, Dropout, Cast) between them, in order from the layer back.
    GapHead {
        layer: NodeId,
        flatten: NodeId,
        through: Vec<NodeId>,
    },
    /// The linear layer, the rank of its factorisation, and the full rank.
    LowRank { layer: NodeId, rank: u64, full: u64 },
}

/// A finding's proposed fix as `nnlint rewrite` applies it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fix {
    pub kind: RewriteKind,
    pub safety: Safety,
    /// The rank of a factorising rewrite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    #[serde(skip)]
    pub plan: Plan,
}

impl Fix {
    /// A factorisation at `rank` of `full`: exact at full rank, approximate below.
    fn factor_safety(rank: u64, full: u64) -> Safety {
        if rank >= full {
            Safety::Exact
        } else {
            Safety::Approximate
        }
    }

    pub fn depthwise(conv: NodeId, rank: u64, full: u64) -> Fix {
        Fix {
            kind: RewriteKind::DepthwiseSeparable,
            safety: Fix::factor_safety(rank, full),
            rank: Some(rank),
            plan: Plan::DepthwiseSeparable { conv, rank, full },
        }
    }

    pub fn gap_head(layer: NodeId, flatten: NodeId, through: Vec<NodeId>) -> Fix {
        Fix {
            kind: RewriteKind::GapHead,
            safety: Safety::Lossy,
            rank: None,
            plan: Plan::GapHead {
                layer,
                flatten,
                through,
            },
        }
    }

    pub fn low_rank(layer: NodeId, rank: u64, full: u64) -> Fix {
        Fix {
            kind: RewriteKind::LowRank,
            safety: Fix::factor_safety(rank, full),
            rank: Some(rank),
            plan: Plan::LowRank { layer, rank, full },
        }
    }

    /// The node the rewrite is anchored on (the finding's node).
    pub fn node(&self) -> NodeId {
        match &self.plan {
            Plan::DepthwiseSeparable { conv, .. } => *conv,
            Plan::GapHead { layer, .. } | Plan::LowRank { layer, .. } => *layer,
        }
    }
}

/// Metadata key holding the records of a rewritten model.
pub const METADATA_KEY: &str = "nnlint.rewrites";

/// One applied rewrite, as stored in the output's metadata: what was replaced by what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The rule whose finding this rewrite fixes (its code).
    pub rule: String,
    pub kind: RewriteKind,
    /// The node the finding is about.
    pub node: String,
    pub safety: Safety,
    pub rank: Option<u64>,
    /// The value the replaced subgraph reads (its activation input).
    pub input: String,
    /// The value it produces; the new nodes produce it under the same name.
    pub output: String,
    /// First output of each replaced node of the original.
    pub replaced: Vec<String>,
    /// First output of each new node, in order.
    pub added: Vec<String>,
}

/// The records stored in a model's metadata, if any.
pub fn applied(model: &Model) -> Result<Option<Vec<Applied>>, String> {
    match model.metadata.iter().find(|(k, _)| k == METADATA_KEY) {
        None => Ok(None),
        Some((_, v)) => serde_json::from_str(v)
            .map(Some)
            .map_err(|e| format!("metadata '{METADATA_KEY}' is not valid: {e}")),
    }
}

/// Values (first outputs) that an earlier rewrite of this kind added to the model.
pub fn added_by(model: &Model, kind: RewriteKind) -> std::collections::HashSet<String> {
    applied(model)
        .ok()
        .flatten()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.kind == kind)
        .flat_map(|a| a.added)
        .collect()
}
