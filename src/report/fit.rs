//! The `nnlint fit` table.

use super::units::{bytes, count};
use crate::analysis::fit::{FitReport, PlanResult};
use crate::util::table::{Align, Table};

/// A plan's cells as `fit` and `report` print them: the largest micro-batch (bounds marked:
/// `≤` on a lower-bound peak, `≥` at the search's cap, `?` at the cap on a lower bound), the
/// micro-batch x steps x GPUs, the peak, the longest sequence at batch 1.
pub struct Cells {
    pub max_batch: String,
    pub schedule: String,
    pub peak: String,
    pub max_seq: String,
}

pub fn cells(p: &PlanResult) -> Cells {
    use crate::analysis::plan::MAX_BATCH;
    Cells {
        max_batch: if p.max_micro_batch == 0 {
            "does not fit".into()
        } else if p.max_micro_batch >= MAX_BATCH && p.lower_bound {
            "?".into()
        } else if p.max_micro_batch >= MAX_BATCH {
            format!("≥ {}", count(MAX_BATCH))
        } else if p.lower_bound {
            format!("≤ {}", count(p.max_micro_batch))
        } else {
            count(p.max_micro_batch)
        },
        schedule: if p.fits {
            format!("{} x {} x {}", p.micro_batch, p.accumulate, p.gpus)
        } else {
            "-".into()
        },
        peak: match p.peak_bytes {
            None => "?".into(),
            Some(b) if p.lower_bound => format!("≥ {}", bytes(b)),
            Some(b) => bytes(b),
        },
        max_seq: match p.max_seq_at_batch_1 {
            None | Some(0) => "-".into(),
            Some(s) if p.lower_bound => format!("≤ {s}"),
            Some(s) => s.to_string(),
        },
    }
}

/// The table, its plan names shortened to fit `width` when given.
pub fn render(r: &FitReport, width: Option<usize>) -> String {
    let mut out = format!(
        "{} on {}{}, {}{}{}\n\n",
        r.model,
        if r.gpus > 1 && r.seq.is_some() {
            format!("{} x ", r.gpus)
        } else {
            String::new()
        },
        r.gpu.describe(),
        match (r.seq, r.params) {
            (Some(s), Some(p)) => format!("sequences of {s} tokens, {p} parameters, "),
            _ => String::new(),
        },
        r.mode,
        if r.mode == "training" {
            format!(", effective batch {}", r.effective_batch)
        } else {
            String::new()
        }
    );
    // serving has no accumulation, recompute or gradient traffic; a graph has no sequence
    let serving = r.mode != "training";
    let seqs = r.plans.iter().any(|p| p.max_seq_at_batch_1.is_some());
    let trains = r.plans.iter().any(|p| p.trainable_params.is_some()) && seqs;
    let mut headers: Vec<(&str, Align)> = vec![
        ("rank", Align::Right),
        ("plan", Align::Left),
        (
            if serving {
                "max batch"
            } else {
                "max micro-batch"
            },
            Align::Right,
        ),
        (
            if serving {
                "peak at batch"
            } else {
                "micro x steps x GPUs"
            },
            Align::Right,
        ),
        (if serving { "peak" } else { "peak/GPU" }, Align::Right),
    ];
    if seqs {
        headers.push(("max seq at batch 1", Align::Right));
    }
    if trains {
        headers.push(("trains", Align::Right));
    }
    if !serving {
        headers.push(("recompute", Align::Right));
        headers.push(("communication", Align::Right));
    }
    let mut t = Table::new(headers).squeeze_column(1);
    for p in &r.plans {
        let c = cells(p);
        let mut row = vec![
            if p.fits {
                p.rank.to_string()
            } else {
                "-".into()
            },
            p.name.clone(),
            c.max_batch,
            if serving {
                p.micro_batch.to_string()
            } else {
                c.schedule
            },
            c.peak,
        ];
        if seqs {
            row.push(c.max_seq);
        }
        if trains {
            row.push(p.trainable_params.map_or("-".into(), count));
        }
        if !serving {
            row.push(recompute_text(p));
            row.push(communication_text(p));
        }
        t.push(row);
    }
    out.push_str(&t.render_fitting(width));
    if r.mode == "training" {
        out.push_str("\npeak/GPU is at the plan's micro-batch (batch 1 when it does not fit); recompute is the extra compute of a step.\n");
    }
    for s in &r.suggestions {
        out.push_str(&format!("what would fit: {s}\n"));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// A plan's recompute cost: `+33%`, or `-` without checkpointing (the table and the HTML page).
pub fn recompute_text(p: &crate::analysis::fit::PlanResult) -> String {
    if p.recompute_fraction > 0.0 {
        format!("+{:.0}%", p.recompute_fraction * 100.0)
    } else {
        "-".into()
    }
}

/// A plan's traffic per optimizer step, or `-` on one GPU.
pub fn communication_text(p: &crate::analysis::fit::PlanResult) -> String {
    if p.communication_bytes > 0 {
        format!("{}/step", bytes(p.communication_bytes))
    } else {
        "-".into()
    }
}
