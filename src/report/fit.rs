//! The `nnlint fit` table.

use super::units::{bytes, count};
use crate::analysis::fit::FitReport;
use crate::util::table::{Align, Table};

/// The table, its plan names shortened to fit `width` when given.
pub fn render(r: &FitReport, width: Option<usize>) -> String {
    let mut out = format!(
        "{} on {}, {}{}\n\n",
        r.model,
        r.gpu.describe(),
        r.mode,
        if r.mode == "training" {
            format!(", effective batch {}", r.effective_batch)
        } else {
            String::new()
        }
    );
    let headers = [
        "rank",
        "plan",
        "max micro-batch",
        "micro x steps x GPUs",
        "peak/GPU",
        "recompute",
        "communication",
    ];
    // serving has no accumulation, recompute or gradient traffic: those columns are training's
    let serving = r.mode != "training";
    let keep = |i: usize| !serving || matches!(i, 0..=4);
    let headers: Vec<&str> = headers
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(i, h)| match (serving, i) {
            (true, 2) => "max batch",
            (true, 3) => "peak at batch",
            (true, 4) => "peak",
            _ => *h,
        })
        .collect();
    let rows: Vec<Vec<String>> = r
        .plans
        .iter()
        .map(|p| {
            let row = vec![
                if p.fits {
                    p.rank.to_string()
                } else {
                    "-".into()
                },
                p.name.clone(),
                if p.fits && p.lower_bound {
                    format!("≤ {}", count(p.max_micro_batch))
                } else if p.fits {
                    count(p.max_micro_batch)
                } else {
                    "does not fit".into()
                },
                if serving {
                    p.micro_batch.to_string()
                } else if p.fits {
                    format!("{} x {} x {}", p.micro_batch, p.accumulate, p.gpus)
                } else {
                    "-".into()
                },
                if p.lower_bound {
                    format!("≥ {}", bytes(p.peak_bytes))
                } else {
                    bytes(p.peak_bytes)
                },
                recompute_text(p),
                communication_text(p),
            ];
            row.into_iter()
                .enumerate()
                .filter(|(i, _)| keep(*i))
                .map(|(_, c)| c)
                .collect()
        })
        .collect();
    let mut t = Table::new(
        headers
            .iter()
            .enumerate()
            .map(|(i, h)| (*h, if i == 1 { Align::Left } else { Align::Right })),
    )
    .squeeze_column(1);
    for row in rows {
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
