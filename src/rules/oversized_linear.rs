//! `oversized-linear` (NL103): a large linear layer whose low-rank factorisation would save
//! parameters. A rank-r factorisation of an m × n weight costs r(m + n): it pays below
//! r = mn/(m + n). With `spectrum = true` the rank that keeps `energy` of the squared singular
//! values is measured (the weights are read for that layer only); otherwise the rule reports the
//! break-even rank and the saving at half of it, and claims nothing about accuracy.

use serde::Deserialize;

use super::heavy_conv::round4;
use super::{options, Finding, Fix, LintContext, RewriteKind, Rule, Saving};
use crate::analysis::ops::Op;
use crate::ir::{Tensor, Values};
use crate::util::svd;
use crate::util::units::count;

pub struct OversizedLinear;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// Smallest weight considered, in elements.
    min_params: u64,
    /// Share of the squared singular values kept.
    energy: f64,
    /// Smallest share of the layer's parameters saved.
    min_saving: f64,
    /// Measure the singular values (reads the weights).
    spectrum: bool,
}

/// Singular values of an m × n weight, largest first (f64, as faer's f32 SVD is unreliable on
/// rectangular matrices).
fn singular_values(t: &Tensor) -> Option<Vec<f64>> {
    let (m, n) = (
        usize::try_from(t.dims[0]).ok()?,
        usize::try_from(t.dims[1]).ok()?,
    );
    let Values::Float(w) = t.read_values(u64::MAX)? else {
        return None;
    };
    if Some(w.len()) != m.checked_mul(n) {
        return None;
    }
    let mat = svd::matrix(&w, m, n);
    svd::singular_values(mat.as_ref(), svd::Par::rayon(0)).ok()
}

/// The smallest rank whose squared singular values reach `energy` of the total.
fn rank_for_energy(s: &[f64], energy: f64) -> usize {
    let total: f64 = s.iter().map(|x| x * x).sum();
    if total <= 0.0 {
        return 0;
    }
    svd::rank_for_energy(s, total, energy).unwrap_or(s.len())
}

impl Rule for OversizedLinear {
    fn name(&self) -> &'static str {
        "oversized-linear"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL103-oversized-linear")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        let o: Options = options(self.meta(), user)?;
        if !(0.0..=1.0).contains(&o.energy) {
            return Err(format!(
                "option 'energy' = {} is not between 0 and 1",
                o.energy
            ));
        }
        Ok(())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let g = cx.graph();
        let per_param = crate::analysis::training::bytes_per_param(&cx.settings.train);
        let mut out = Vec::new();
        for (n, node) in g.nodes.iter().enumerate() {
            let linear = matches!(
                cx.op(n),
                Op::Gemm(_)
                    | Op::MatMul
                    | Op::MatMulInteger
                    | Op::QLinearMatMul
                    | Op::QGemm(_)
                    | Op::MatMulNBits(_)
            );
            if !linear || cx.made_by(n, RewriteKind::LowRank) {
                continue;
            }
            let Some(lw) = cx.layer_weight(n) else {
                continue;
            };
            let t = lw.tensor;
            if lw.dims.len() != 2 {
                continue;
            }
            let (m, k) = (lw.dims[0], lw.dims[1]);
            let Some(params) = m.checked_mul(k) else {
                continue;
            };
            if params < o.min_params || m + k == 0 {
                continue;
            }
            let full = m.min(k);
            let break_even = params / (m + k);
            let (rank, how) = if o.spectrum && lw.quantized.is_none() {
                match singular_values(t) {
                    Some(s) => (
                        rank_for_energy(&s, o.energy) as u64,
                        format!("keeps {:.0}% of the spectrum's energy", o.energy * 100.0),
                    ),
                    None => (
                        break_even / 2,
                        "half the break-even rank (the weights could not be read)".into(),
                    ),
                }
            } else {
                (break_even / 2, "half the break-even rank; `spectrum = true` measures the rank that keeps the energy".into())
            };
            let rank = rank.max(1);
            let new_params = rank.saturating_mul(m + k);
            let saving = 1.0 - new_params as f64 / params as f64;
            if saving < o.min_saving {
                continue;
            }
            let saved = params.saturating_sub(new_params);
            let rows = cx.macs[n].map(|m| m / params.max(1));
            out.push(Finding {
                code: &meta.code,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(node.name).to_string(),
                op: node.op_type.to_string(),
                message: format!(
                    "a {m}x{k} weight ({} parameters); a factorisation pays below rank {break_even}, and rank {rank} ({how}) saves {:.0}%",
                    count(params),
                    saving * 100.0
                ),
                measured: round4(saving),
                limit: o.min_saving,
                unit: "share saved",
                fix: lw.fix_text(format!("two layers {m}x{rank} and {rank}x{k} from a truncated SVD ({} parameters)", count(new_params))),
                saving: Saving {
                    params: Some(saved),
                    bytes: Some(lw.bytes(saved)),
                    macs: rows.map(|r| r.saturating_mul(saved)),
                    training_bytes: Some(saved.saturating_mul(per_param) as i64),
                },
                rewrite: lw
                    .quantized
                    .is_none()
                    .then(|| Fix::low_rank(n, rank, full)),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_rank() {
        assert_eq!(rank_for_energy(&[3.0, 1.0, 0.0], 0.9), 1);
        assert_eq!(rank_for_energy(&[1.0, 1.0, 1.0, 1.0], 0.9), 4);
        assert_eq!(rank_for_energy(&[1.0, 1.0, 1.0, 1.0], 0.5), 2);
    }

    #[test]
    fn singular_values_of_a_known_matrix() {
        // [[3, 0], [0, 4], [0, 0]] has singular values 4 and 3
        let bytes: Vec<u8> = [3.0f32, 0.0, 0.0, 4.0, 0.0, 0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = Tensor {
            name: "w".into(),
            dtype: crate::ir::DType::F32,
            dims: vec![3, 2].into(),
            data: crate::ir::TensorData::Raw(bytes::Bytes::from(bytes)),
        };
        let s = singular_values(&t).unwrap();
        assert!(
            (s[0] - 4.0).abs() < 1e-9 && (s[1] - 3.0).abs() < 1e-9,
            "{s:?}"
        );
    }
}
