//! The HTML report (`nnlint report`, `nnlint mem --format html`): one self-contained page, with
//! inline CSS and SVG and no script, that nothing outside it is fetched for. Charts are built as
//! SVG text; every name from the model is escaped ([`escape`]), since layer names are untrusted.
//! Hovering a bar or a step shows its numbers (SVG `<title>`). A number nnlint does not know is
//! written as unknown, never drawn as 0.

use std::fmt::Write;

use super::lint::{saving_text, LintRun};
use super::table::{totals_lines, trailer, training_heading, training_lines};
use super::units::{bytes, count, dim_bytes, dim_count};
use super::{MemView, ViewOptions};
use crate::analysis::fit::FitReport;
use crate::analysis::{Curve, Format, LayerRef, MemReport};
use crate::rules::fix::Applied;

/// What one page shows. A section that is `None` is left out; `Some(Err(why))` is shown with the
/// reason it is missing.
pub struct Page<'a> {
    pub mem: &'a MemReport,
    /// Why there is no training estimate, when `mem` has none.
    pub training_missing: Option<String>,
    /// The plans of `nnlint fit` (the same planner for a graph and a language model).
    pub fit: Option<Result<&'a FitReport, String>>,
    pub lint: Option<Result<&'a LintRun, String>>,
    pub rewrite: Option<&'a Comparison>,
}

/// A rewritten model beside its original.
pub struct Comparison {
    pub after: MemReport,
    /// The rewrites the rewritten model records in its metadata.
    pub applied: Vec<Applied>,
}

/// Escapes text for HTML content and attribute values (`<>&"'`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { --params: #4e79a7; --acts: #f28e2b; --saved: #59a14f; --grads: #e15759; --opt: #b07aa1;
        --trans: #edc948; --par: #76b7b2; --over: #9c9c9c; --ink: #1d2330; --muted: #5b6474;
        --line: #d9dde5; --bg: #ffffff; --panel: #f6f7f9; --bad: #c0392b; --good: #2e7d32; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1240px; padding: 24px 32px 48px; color: var(--ink); background: var(--bg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; word-break: break-all; }
h2 { font-size: 17px; margin: 0 0 8px; }
.meta, .note, figcaption { color: var(--muted); }
section { margin: 28px 0 0; padding: 16px 20px; background: var(--panel); border-radius: 8px;
          break-inside: avoid; }
svg { display: block; width: 100%; height: auto; font: 11px system-ui, sans-serif; }
svg text { fill: var(--muted); }
svg .axis { stroke: var(--line); }
table { border-collapse: collapse; width: 100%; margin: 8px 0 0; background: var(--bg); table-layout: auto; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; background: var(--panel); }
td.num, th.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
#fit-plans th.num { white-space: normal; }
td.name { max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
          font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 10px; margin: 16px 0 0;
         align-items: start; }
.card { background: var(--panel); border-radius: 8px; padding: 10px 14px; }
.card b { display: block; font-size: 20px; font-variant-numeric: tabular-nums; }
.card span { color: var(--muted); font-size: 12px; display: -webkit-box; -webkit-line-clamp: 3;
             -webkit-box-orient: vertical; overflow: hidden; overflow-wrap: anywhere; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 6px 0; color: var(--muted); }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
            vertical-align: -1px; }
.sev-error { color: var(--bad); font-weight: 600; }
.sev-warning { color: #b36b00; font-weight: 600; }
.sev-info { color: var(--muted); font-weight: 600; }
tr.fits td:nth-child(-n+2) { color: var(--good); font-weight: 600; }
tr.nofit td:nth-child(-n+2), p.nofit { color: var(--bad); font-weight: 600; }
td.rule { white-space: nowrap; } td.rule small { display: block; color: var(--muted); }
.unknown { color: var(--muted); font-style: italic; }
ul { margin: 6px 0 0; padding-left: 20px; }
@media print { body { max-width: none; padding: 0; } section { background: none; border: 1px solid var(--line); }
               * { -webkit-print-color-adjust: exact; print-color-adjust: exact; } }
"#;

/// Renders the page.
pub fn render(p: &Page) -> String {
    let r = p.mem;
    let mut out = String::with_capacity(64 * 1024 + 400 * r.layers.len());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>nnlint report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&r.model)
    );
    header(&mut out, r);
    layer_chart(&mut out, r);
    liveness(&mut out, r);
    training(&mut out, r, p.training_missing.as_deref());
    if let Some(fit) = &p.fit {
        fit_section(&mut out, fit.as_ref().map(|f| *f));
    }
    if let Some(lint) = &p.lint {
        lint_section(&mut out, lint.as_ref().map(|l| *l));
    }
    if let Some(c) = p.rewrite {
        rewrite_section(&mut out, r, c);
    }
    notes(&mut out, r);
    let _ = write!(
        out,
        "<p class=\"note\">nnlint {}: estimates from the graph and headers alone; the weights were not read.</p>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    out
}

fn header(out: &mut String, r: &MemReport) {
    let mut meta = vec![match r.format {
        Format::Onnx => "ONNX graph".to_string(),
        Format::Safetensors => "safetensors weights (no graph: no activations)".to_string(),
        Format::Checkpoint => {
            "Hugging Face checkpoint (config.json and safetensors headers)".to_string()
        }
        Format::Gguf => "GGUF file (header and tensor infos)".to_string(),
    }];
    if let Some(b) = r.batch {
        meta.push(format!("batch {b}"));
    }
    let dims: Vec<String> = r
        .dims
        .iter()
        .filter(|(_, v)| Some(**v as u64) != r.batch)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !dims.is_empty() {
        meta.push(dims.join(" "));
    }
    if let Some(t) = &r.training {
        meta.push(format!("{}, {}", t.config.optimizer, t.config.precision));
    }
    let _ = write!(
        out,
        "<header id=\"summary\">\n<h1>{}</h1>\n<div class=\"meta\">{}</div>\n<div class=\"cards\">\n",
        escape(&r.model),
        escape(&meta.join(" · "))
    );
    let mut lines = totals_lines(r);
    if let Some(t) = &r.training {
        lines.push((
            "training peak".into(),
            if t.lower_bound {
                format!("≥ {}", bytes(t.total_bytes))
            } else {
                bytes(t.total_bytes)
            },
            "per GPU, one training step".into(),
        ));
    }
    for (label, value, detail) in lines {
        let _ = writeln!(
            out,
            "<div class=\"card\">{}<b>{}</b><span title=\"{detail}\">{detail}</span></div>",
            escape(&label),
            escape(&value),
            detail = escape(&detail)
        );
    }
    out.push_str("</div>\n</header>\n");
}

/// A known zero as `-`, as the tables print it.
fn dash(v: u64, fmt: fn(u64) -> String) -> String {
    if v == 0 {
        "-".into()
    } else {
        fmt(v)
    }
}

/// A known byte count, or `None` for an unknown or symbolic one.
fn known(d: Option<&crate::ir::Dim>) -> Option<u64> {
    d.and_then(crate::ir::Dim::as_u64)
}

fn legend(out: &mut String, items: &[(&str, &str)]) {
    out.push_str("<div class=\"legend\">");
    for (var, label) in items {
        let _ = write!(
            out,
            "<span><i style=\"background:var({var})\"></i>{}</span>",
            escape(label)
        );
    }
    out.push_str("</div>\n");
}

/// Y-axis ticks and labels of a chart whose top is `max` bytes.
fn y_axis(out: &mut String, max: u64, left: f64, top: f64, width: f64, height: f64) {
    for k in 0..=4u64 {
        let v = max / 4 * k;
        let y = top + height - height * (v as f64 / max as f64);
        let _ = write!(
            out,
            "<line class=\"axis\" x1=\"{left:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + width,
            left - 6.0,
            y + 4.0,
            escape(&bytes(v))
        );
    }
}

/// Most bars the per-layer chart draws (and, as `Curve::POINTS`, points the liveness curve): a
/// graph of 100,000 layers drew 440,000 SVG elements (a 44 MB page browsers struggle to open);
/// beyond this, each bar or point stands for several consecutive layers or steps.
const MAX_BARS: usize = 2000;

/// The per-layer chart: parameters, activations and saved-for-backward bytes, stacked, in graph
/// order; and the largest layers as a table.
fn layer_chart(out: &mut String, r: &MemReport) {
    out.push_str("<section id=\"layers\">\n<h2>Memory per layer</h2>\n");
    let rows: Vec<LayerRef> = r
        .layers
        .iter()
        .filter(|l| l.depth == 0 && !l.folded)
        .collect();
    let graph = r.format == Format::Onnx;
    // a checkpoint's rows carry the activations and MACs its architecture gives; per-layer saved
    // bytes come from a graph only (a checkpoint's step has them in total)
    let acts_shown = graph || rows.iter().any(|l| l.activation_bytes.is_some());
    let training = r.training.is_some() && rows.iter().any(|l| l.saved_bytes.is_some());
    let saved_in_total_only = r.training.is_some() && !training;
    let stack = |l: &LayerRef| -> u64 {
        (l.param_bytes + l.buffer_bytes)
            .saturating_add(known(l.activation_bytes).unwrap_or(0))
            .saturating_add(l.saved_bytes.unwrap_or(0))
    };
    let max = rows.iter().map(&stack).max().unwrap_or(0);
    let mut items = vec![("--params", "parameters and buffers")];
    if acts_shown {
        items.push(("--acts", "output activations"));
    }
    if training {
        items.push(("--saved", "saved for backward (training)"));
    }
    legend(out, &items);
    if rows.is_empty() || max == 0 {
        out.push_str("<p class=\"unknown\">no layer has a known size</p>\n</section>\n");
        return;
    }
    let (w, h, left, top, bottom) = (1160.0, 300.0, 72.0, 10.0, 24.0);
    let plot_w = w - left - 10.0;
    let plot_h = h - top - bottom;
    let _ = write!(
        out,
        "<svg id=\"layer-chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"memory per layer\">"
    );
    y_axis(out, max, left, top, plot_w, plot_h);
    // beyond MAX_BARS layers, a bar stands for `per_bar` consecutive layers and draws the largest
    let per_bar = rows.len().div_ceil(MAX_BARS);
    let bars = rows.len().div_ceil(per_bar);
    let slot = plot_w / bars as f64;
    let bar = if slot > 3.0 { slot * 0.8 } else { slot };
    let base = top + plot_h;
    let scale = |b: u64| plot_h * b as f64 / max as f64;
    for (i, group) in rows.chunks(per_bar).enumerate() {
        let l = group
            .iter()
            .copied()
            .reduce(|a, b| if stack(&b) > stack(&a) { b } else { a })
            .expect("chunks are not empty");
        let any_unknown = group.iter().any(|l| known(l.activation_bytes).is_none());
        let x = left + slot * i as f64 + (slot - bar) / 2.0;
        let acts = match (&l.activation_bytes, graph) {
            (Some(d), _) if d.as_u64().is_some() => dim_bytes(d),
            (Some(d), _) => format!("unknown ({}: bind the dimensions)", dim_bytes(d)),
            (None, false) => "n/a (no graph)".to_string(),
            (None, true) => "unknown".into(),
        };
        let mut tip = String::new();
        if group.len() > 1 {
            let first = i * per_bar + 1;
            let _ = writeln!(
                tip,
                "layers {first} to {} of {}, the largest shown:",
                first + group.len() - 1,
                rows.len()
            );
        }
        let _ = write!(
            tip,
            "{} ({})\nparameters: {} ({} bytes)\nactivations: {acts}",
            l.name,
            l.op,
            count(l.params + l.buffers),
            bytes(l.param_bytes + l.buffer_bytes)
        );
        if let Some(s) = l.saved_bytes {
            let _ = write!(tip, "\nsaved for backward: {}", bytes(s));
        }
        if let Some(m) = &l.macs {
            let _ = write!(tip, "\nMACs: {}", dim_count(m));
        }
        let _ = write!(out, "<g><title>{}</title>", escape(&tip));
        let mut y = base;
        let mut seg = |out: &mut String, b: u64, var: &str| {
            if b == 0 {
                return;
            }
            let hh = scale(b).max(0.5);
            y -= hh;
            let _ = write!(
                out,
                "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{bar:.2}\" height=\"{hh:.2}\" fill=\"var({var})\"/>"
            );
        };
        seg(out, l.param_bytes + l.buffer_bytes, "--params");
        if let Some(a) = known(l.activation_bytes) {
            seg(out, a, "--acts");
        }
        if any_unknown && graph {
            // unknown, not zero: a grey mark under the axis
            let _ = write!(
                out,
                "<rect class=\"unknown-size\" x=\"{x:.2}\" y=\"{:.2}\" width=\"{bar:.2}\" height=\"5\" fill=\"var(--over)\"/>",
                base + 2.0
            );
        }
        if let Some(s) = l.saved_bytes {
            seg(out, s, "--saved");
        }
        // the whole column answers to the pointer, not only the thin bars
        let _ = write!(
            out,
            "<rect x=\"{:.2}\" y=\"{top:.2}\" width=\"{slot:.2}\" height=\"{plot_h:.2}\" fill=\"transparent\"/></g>",
            left + slot * i as f64
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"{:.1}\">first layer</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">last layer ({} layers, graph order)</text></svg>",
        h - 4.0,
        left + plot_w,
        h - 4.0,
        rows.len()
    );
    if per_bar > 1 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} layers: each bar stands for {per_bar} consecutive layers and draws the largest of them (its tooltip says which), so that the chart stays within {} bars.</p>",
            rows.len(),
            MAX_BARS
        );
    }
    let symbolic = rows
        .iter()
        .filter(|l| {
            graph
                && l.activation_bytes
                    .as_ref()
                    .is_some_and(|d| d.as_u64().is_none())
        })
        .count();
    let unknown = rows
        .iter()
        .filter(|l| graph && l.activation_bytes.is_none())
        .count();
    for (n, what) in [
        (
            symbolic,
            "whose output sizes depend on unbound dimensions (bind them with --dim NAME=V)",
        ),
        (unknown, "with outputs of unknown size"),
    ] {
        if n > 0 {
            let _ = writeln!(
                out,
                "<p class=\"note\">{n} layer{} {what}: grey marks under the axis, not drawn as 0.</p>",
                if n == 1 { "" } else { "s" }
            );
        }
    }
    // the largest layers, readable without hovering
    let mut top_rows = rows.clone();
    top_rows.sort_by_key(|l| std::cmp::Reverse(stack(l)));
    top_rows.truncate(10);
    out.push_str("<table id=\"largest-layers\"><caption class=\"note\">largest layers</caption><tr><th>layer</th><th>op</th><th class=\"num\">params</th><th class=\"num\">param bytes</th><th class=\"num\">activations</th>");
    if training {
        out.push_str("<th class=\"num\">saved</th>");
    }
    out.push_str("<th class=\"num\">MACs</th></tr>\n");
    for l in top_rows {
        let acts = match (&l.activation_bytes, graph) {
            (Some(d), _) => dim_bytes(d),
            (None, false) => "n/a".to_string(),
            (None, true) => "unknown".into(),
        };
        let _ = write!(
            out,
            "<tr><td class=\"name\" title=\"{name}\">{name}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
            escape(l.op),
            // as `mem` counts them: parameters only (the chart stacks the buffers on them)
            dash(l.params, count),
            dash(l.param_bytes, bytes),
            escape(&acts),
            name = escape(l.name),
        );
        if training {
            let _ = write!(
                out,
                "<td class=\"num\">{}</td>",
                l.saved_bytes.map_or("unknown".into(), |b| dash(b, bytes))
            );
        }
        let _ = writeln!(
            out,
            "<td class=\"num\">{}</td></tr>",
            escape(&match (&l.macs, graph) {
                (Some(m), _) if m.as_u64() == Some(0) => "-".into(),
                (Some(m), _) => dim_count(m),
                (None, false) => "n/a".into(),
                (None, true) => "unknown".into(),
            })
        );
    }
    out.push_str("</table>\n");
    if saved_in_total_only {
        out.push_str("<p class=\"note\">saved for backward: a checkpoint's step is counted in total (the training section), not per layer, so no layer shows it.</p>\n");
    }
    out.push_str("</section>\n");
}

/// The inference liveness curve over the topological order, with the peak marked.
fn liveness(out: &mut String, r: &MemReport) {
    out.push_str("<section id=\"liveness\">\n<h2>Inference liveness</h2>\n");
    let curve = match (&r.peak, &r.peak_missing, r.format) {
        (_, _, Format::Safetensors) => {
            out.push_str("<p class=\"unknown\">unknown: a weights file has no graph, so no activations (pass the model exported to ONNX)</p>\n</section>\n");
            return;
        }
        (Some(p), _, _) if !p.curve.is_empty() => &p.curve,
        (_, Some(why), _) => {
            let _ = writeln!(
                out,
                "<p class=\"unknown\">peak unknown: {}</p>\n</section>",
                escape(why)
            );
            return;
        }
        _ => {
            out.push_str("<p class=\"unknown\">no nodes to schedule</p>\n</section>\n");
            return;
        }
    };
    let peak = r.totals.inference_peak_bytes.unwrap_or(0);
    let lower = r.totals.lower.activations();
    let at = r.peak.as_ref().and_then(|p| p.node.clone());
    let _ = writeln!(
        out,
        "<p>Bytes of activations live while each node runs, in topological order (weights excluded; each tensor freed after its last use). Peak: <b>{}{}</b>{}.</p>",
        if lower { "≥ " } else { "" },
        bytes(peak),
        at.as_ref()
            .map_or(" (the graph inputs)".to_string(), |n| format!(
                " at <code>{}</code>",
                escape(n)
            ))
    );
    let max = curve
        .bytes()
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(peak)
        .max(1);
    let (w, h, left, top, bottom) = (1160.0, 260.0, 72.0, 16.0, 24.0);
    let plot_w = w - left - 10.0;
    let plot_h = h - top - bottom;
    let base = top + plot_h;
    let n = curve.len();
    // beyond `Curve::POINTS` steps, a point stands for `per_point` consecutive steps and draws the
    // most live among them (the envelope: the peak stays on the curve)
    let per_point = curve.per_point();
    let points: Vec<(usize, &str, u64)> = curve.points().collect();
    let step = plot_w / points.len() as f64;
    let xy = |i: usize, b: u64| {
        (
            left + step * (i as f64 + 0.5),
            base - plot_h * b as f64 / max as f64,
        )
    };
    let _ = write!(
        out,
        "<svg id=\"liveness-chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"inference liveness curve\">"
    );
    y_axis(out, max, left, top, plot_w, plot_h);
    let mut path = format!("M{:.2},{base:.2}", left + step * 0.5);
    for (i, &(_, _, b)) in points.iter().enumerate() {
        let (x, y) = xy(i, b);
        let _ = write!(path, " L{x:.2},{y:.2}");
    }
    let _ = write!(
        path,
        " L{:.2},{base:.2} Z",
        left + step * (points.len() as f64 - 0.5)
    );
    let _ = write!(
        out,
        "<path d=\"{path}\" fill=\"var(--acts)\" fill-opacity=\"0.25\" stroke=\"var(--acts)\" stroke-width=\"1.5\"/>"
    );
    for (i, &(k, name, b)) in points.iter().enumerate() {
        let steps = if per_point > 1 {
            let first = i * per_point + 1;
            format!(
                "steps {first} to {}, the most at step {}",
                (first + per_point - 1).min(n),
                k + 1
            )
        } else {
            format!("step {}", k + 1)
        };
        let _ = write!(
            out,
            "<rect x=\"{:.2}\" y=\"{top}\" width=\"{step:.2}\" height=\"{plot_h:.2}\" fill=\"transparent\"><title>{steps}: {}\n{} live</title></rect>",
            left + step * i as f64,
            escape(name),
            bytes(b)
        );
    }
    // the steps at the peak keep their names
    if let Some(i) = (0..n)
        .position(|k| curve.bytes()[k] == peak && curve.name(k) == at.as_deref())
        .map(|i| i / per_point)
    {
        let (x, y) = xy(i, peak);
        let anchor = if x > left + plot_w * 0.6 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -8.0 } else { 8.0 };
        let _ = write!(
            out,
            "<g id=\"peak-marker\"><line x1=\"{x:.2}\" y1=\"{y:.2}\" x2=\"{x:.2}\" y2=\"{base:.2}\" stroke=\"var(--bad)\" stroke-dasharray=\"3 3\"/>\
             <circle cx=\"{x:.2}\" cy=\"{y:.2}\" r=\"4.5\" fill=\"var(--bad)\"/>\
             <text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"{anchor}\" style=\"fill:var(--bad);font-weight:600\">peak {}</text></g>",
            x + dx,
            (y + 4.0).max(top + 10.0),
            escape(&bytes(peak))
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"{:.1}\">first node</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">last node ({n} steps)</text></svg>",
        h - 4.0,
        left + plot_w,
        h - 4.0
    );
    if per_point > 1 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} steps: each point stands for {per_point} consecutive steps and draws the most live among them, so that the curve stays within {} points.</p>",
            n,
            Curve::POINTS
        );
    }
    if lower {
        let _ = writeln!(
            out,
            "<p class=\"note\">a lower bound: {} layers of unknown size are left out of the curve.</p>",
            r.totals.lower.layers_without_size
        );
    }
    if let Some(p) = &r.peak {
        if !p.live.is_empty() {
            out.push_str("<table id=\"peak-tensors\"><caption class=\"note\">tensors live at the peak</caption><tr><th>tensor</th><th class=\"num\">bytes</th></tr>\n");
            for (name, b) in &p.live {
                let _ = writeln!(
                    out,
                    "<tr><td class=\"name\" title=\"{n}\">{n}</td><td class=\"num\">{}</td></tr>",
                    bytes(*b),
                    n = escape(name)
                );
            }
            out.push_str("</table>\n");
        }
    }
    out.push_str("</section>\n");
}

/// The training step's memory at its peak, as one stacked bar, and the lines that explain it.
fn training(out: &mut String, r: &MemReport, missing: Option<&str>) {
    out.push_str("<section id=\"training\">\n<h2>Training step</h2>\n");
    let Some(t) = &r.training else {
        let _ = writeln!(
            out,
            "<p class=\"unknown\">not estimated: {}</p>\n</section>",
            escape(missing.unwrap_or("run with --train"))
        );
        return;
    };
    if let Some(h) = training_heading(r) {
        let _ = writeln!(out, "<p>{}</p>", escape(&h));
    }
    let p = &t.peak;
    let parts = [
        ("--params", "weights", p.weights_bytes),
        ("--grads", "gradients", p.gradient_bytes),
        ("--opt", "optimizer state", p.optimizer_bytes),
        ("--saved", "saved activations", p.saved_activation_bytes),
        ("--trans", "transient", p.transient_bytes),
        ("--par", "parallel buffers", p.parallel_bytes),
        ("--over", "overhead", p.overhead_bytes),
    ];
    let shown: Vec<(&str, &str, u64)> = parts.into_iter().filter(|x| x.2 > 0).collect();
    let labels: Vec<(&str, String)> = shown
        .iter()
        .map(|(var, label, b)| (*var, format!("{label} {}", bytes(*b))))
        .collect();
    let items: Vec<(&str, &str)> = labels.iter().map(|(v, l)| (*v, l.as_str())).collect();
    legend(out, &items);
    let at_least = if t.lower_bound { "≥ " } else { "" };
    stacked_bar(
        out,
        "training-bar",
        &shown,
        &format!(
            "{at_least}{} per GPU, during the {}",
            bytes(t.total_bytes),
            p.phase
        ),
    );
    // the fixed overhead can dwarf a small model: the model's own memory, on its own scale
    let model: Vec<(&str, &str, u64)> = shown.iter().copied().filter(|x| x.0 != "--over").collect();
    if p.overhead_bytes > 0 && !model.is_empty() {
        let sum: u64 = model.iter().map(|x| x.2).sum();
        stacked_bar(
            out,
            "training-bar-model",
            &model,
            &format!(
                "{at_least}{} without the overhead (the model's own memory, on its own scale)",
                bytes(sum)
            ),
        );
    }
    out.push_str("<table id=\"training-lines\">");
    for (label, value, detail) in training_lines(r) {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&label),
            escape(&value),
            escape(&detail)
        );
    }
    out.push_str("</table>\n");
    for n in t.notes.iter().chain(&t.unknown) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
    }
    out.push_str("</section>\n");
}

/// One horizontal bar of `(colour variable, label, bytes)` parts, with a caption under it.
fn stacked_bar(out: &mut String, id: &str, parts: &[(&str, &str, u64)], caption: &str) {
    let total: u64 = parts.iter().map(|x| x.2).sum::<u64>().max(1);
    let (w, h) = (1160.0, 56.0);
    let _ = write!(
        out,
        "<svg id=\"{id}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        escape(caption)
    );
    let mut x = 0.0;
    for (var, label, b) in parts {
        let bw = w * *b as f64 / total as f64;
        let _ = write!(
            out,
            "<g><title>{}: {} ({:.1}%)</title><rect x=\"{x:.2}\" y=\"4\" width=\"{bw:.2}\" height=\"30\" fill=\"var({var})\"/>",
            escape(label),
            bytes(*b),
            100.0 * *b as f64 / total as f64
        );
        if bw > 70.0 {
            let _ = write!(
                out,
                "<text x=\"{:.2}\" y=\"24\" style=\"fill:#fff;font-weight:600\">{}</text>",
                x + 6.0,
                escape(&bytes(*b))
            );
        }
        out.push_str("</g>");
        x += bw;
    }
    let _ = writeln!(
        out,
        "<text x=\"0\" y=\"50\">0</text><text x=\"{w}\" y=\"50\" text-anchor=\"end\">{}</text></svg>",
        escape(caption)
    );
}

/// The `fit` plans, each peak drawn against the card's memory.
fn fit_section(out: &mut String, fit: Result<&FitReport, &String>) {
    out.push_str("<section id=\"fit\">\n<h2>What fits the GPU</h2>\n");
    let f = match fit {
        Ok(f) => f,
        Err(why) => {
            let _ = writeln!(
                out,
                "<p class=\"unknown\">not computed: {}</p>\n</section>",
                escape(why)
            );
            return;
        }
    };
    let _ = writeln!(
        out,
        "<p>{}{} ({}), {}{}{}; the bar is each plan's peak per GPU against the card's memory (the line); a row's tooltip says what the plan costs.</p>",
        if f.gpus > 1 && f.seq.is_some() {
            format!("{} x ", f.gpus)
        } else {
            String::new()
        },
        escape(f.gpu.name),
        bytes(f.gpu.bytes),
        f.seq
            .map_or(String::new(), |s| format!("sequences of {s} tokens, ")),
        escape(f.mode),
        if f.mode == "training" {
            format!(", effective batch {}", f.effective_batch)
        } else {
            String::new()
        }
    );
    let seqs = f.plans.iter().any(|p| p.max_seq_at_batch_1.is_some());
    // one GPU sends nothing: the column is left out
    let comm = f.plans.iter().any(|p| p.communication_bytes > 0);
    let _ = writeln!(
        out,
        "<table id=\"fit-plans\"><tr><th class=\"num\">rank</th><th style=\"min-width:16em\">plan</th><th class=\"num\">max micro-batch</th><th class=\"num\">micro x steps x GPUs</th><th class=\"num\">peak/GPU</th><th style=\"min-width:200px\">against the card</th>{}<th class=\"num\">recompute</th>{}</tr>",
        if seqs {
            "<th class=\"num\">max seq at batch 1</th><th class=\"num\">trains</th>"
        } else {
            ""
        },
        if comm {
            "<th class=\"num\">communication</th>"
        } else {
            ""
        }
    );
    let card = f.gpu.bytes.max(1) as f64;
    for p in &f.plans {
        let c = super::fit::cells(p);
        let bar = match p.peak_bytes {
            Some(b) => {
                let share = b as f64 / card;
                // 150% of the card spans 150 px: the line (100%) is at 100
                let (bw, colour) = (
                    ((share / 1.5).min(1.0) * 150.0).max(1.5),
                    if p.fits { "var(--good)" } else { "var(--bad)" },
                );
                format!(
                    "<svg viewBox=\"0 0 200 16\" width=\"200\" height=\"16\"><title>{} of {} ({:.0}%)</title><rect x=\"0\" y=\"3\" width=\"{bw:.1}\" height=\"10\" fill=\"{colour}\"/><line x1=\"100\" y1=\"0\" x2=\"100\" y2=\"16\" stroke=\"var(--ink)\"/><text x=\"{:.1}\" y=\"12\">{:.0}%</text></svg>",
                    escape(&c.peak),
                    bytes(f.gpu.bytes),
                    share * 100.0,
                    bw + 4.0,
                    share * 100.0
                )
            }
            None => "<span class=\"unknown\">unknown</span>".into(),
        };
        let seq_cells = if seqs {
            format!(
                "<td class=\"num\">{}</td><td class=\"num\">{}</td>",
                escape(&c.max_seq),
                p.trainable_params.map_or("-".into(), count)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "<tr class=\"{}\" title=\"{}\"><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{bar}</td>{seq_cells}<td class=\"num\">{}</td>{}</tr>",
            if p.fits { "fits" } else { "nofit" },
            escape(&p.cost),
            if p.fits { p.rank.to_string() } else { "-".into() },
            escape(&p.name),
            escape(&c.max_batch),
            escape(&c.schedule),
            escape(&c.peak),
            super::fit::recompute_text(p),
            if comm {
                format!(
                    "<td class=\"num\">{}</td>",
                    super::fit::communication_text(p)
                )
            } else {
                String::new()
            },
        );
    }
    out.push_str("</table>\n");
    for s in &f.suggestions {
        let _ = writeln!(out, "<p>what would fit: {}</p>", escape(s));
    }
    for n in &f.notes {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
    }
    out.push_str("</section>\n");
}

/// The lint findings, each with its fix and what the fix saves.
fn lint_section(out: &mut String, lint: Result<&LintRun, &String>) {
    out.push_str("<section id=\"lint\">\n<h2>Lint findings</h2>\n");
    let run = match lint {
        Ok(run) => run,
        Err(why) => {
            let _ = writeln!(
                out,
                "<p class=\"unknown\">not run: {}</p>\n</section>",
                escape(why)
            );
            return;
        }
    };
    use crate::rules::Severity;
    let _ = writeln!(
        out,
        "<p>{} error{}, {} warning{}, {} info.</p>",
        run.count(Severity::Error),
        if run.count(Severity::Error) == 1 {
            ""
        } else {
            "s"
        },
        run.count(Severity::Warning),
        if run.count(Severity::Warning) == 1 {
            ""
        } else {
            "s"
        },
        run.count(Severity::Info)
    );
    let findings: Vec<_> = run.files.iter().flat_map(|f| &f.findings).collect();
    if !findings.is_empty() {
        out.push_str("<table id=\"findings\"><tr><th>severity</th><th>rule</th><th>node</th><th>finding</th><th>fix</th><th>saves</th></tr>\n");
        for f in findings {
            let fix = match &f.rewrite {
                Some(r) => format!("{} [nnlint rewrite: {}, {}]", f.fix, r.kind, r.safety),
                None => f.fix.clone(),
            };
            let saves = saving_text(f);
            let _ = writeln!(
                out,
                "<tr><td class=\"sev-{sev}\">{sev}</td><td class=\"rule\">{}<small>{}</small></td><td class=\"name\" title=\"{node}\">{node}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(f.code),
                escape(f.name),
                escape(&f.message),
                escape(&fix),
                if saves.is_empty() {
                    "-".into()
                } else {
                    escape(saves.trim_start_matches("saves "))
                },
                sev = f.severity,
                node = escape(&f.node),
            );
        }
        out.push_str("</table>\n");
    }
    for e in run.files.iter().filter_map(|f| f.error.as_ref()) {
        let _ = writeln!(out, "<p class=\"nofit\">error: {}</p>", escape(e));
    }
    for w in &run.warnings {
        let _ = writeln!(out, "<p class=\"note\">warning: {}</p>", escape(w));
    }
    out.push_str("</section>\n");
}

/// A line of the before/after table: label, before, after, and how to write the numbers.
type Line = (&'static str, Option<u64>, Option<u64>, fn(u64) -> String);

/// A rewritten model against its original: the totals before and after, as numbers and bars.
fn rewrite_section(out: &mut String, before: &MemReport, c: &Comparison) {
    out.push_str("<section id=\"rewrite\">\n<h2>Rewrite: before and after</h2>\n");
    let after = &c.after;
    let _ = writeln!(
        out,
        "<p><code>{}</code> against <code>{}</code>.</p>",
        escape(&after.model),
        escape(&before.model)
    );
    let train = |r: &MemReport| r.training.as_ref().map(|t| t.total_bytes);
    let rows: [Line; 6] = [
        (
            "parameters",
            Some(before.totals.params),
            Some(after.totals.params),
            count,
        ),
        (
            "weight bytes",
            Some(before.totals.param_bytes),
            Some(after.totals.param_bytes),
            bytes,
        ),
        (
            "MACs",
            known(before.totals.macs.as_ref()),
            known(after.totals.macs.as_ref()),
            count,
        ),
        (
            "activations",
            known(before.totals.activation_bytes.as_ref()),
            known(after.totals.activation_bytes.as_ref()),
            bytes,
        ),
        (
            "inference peak",
            before.totals.inference_peak_bytes,
            after.totals.inference_peak_bytes,
            bytes,
        ),
        ("training peak", train(before), train(after), bytes),
    ];
    out.push_str("<table id=\"rewrite-totals\"><tr><th></th><th class=\"num\">before</th><th class=\"num\">after</th><th class=\"num\">change</th><th style=\"width:320px\"></th></tr>\n");
    for (label, b, a, fmt) in rows {
        let text = |v: Option<u64>| v.map_or("unknown".to_string(), fmt);
        let (change, bars) = match (b, a) {
            (Some(b), Some(a)) if b > 0 => {
                let wb = 300.0;
                let wa = 300.0 * a as f64 / b.max(a) as f64;
                let wb = wb * b as f64 / b.max(a) as f64;
                (
                    format!("{:+.1}%", 100.0 * (a as f64 - b as f64) / b as f64),
                    format!(
                        "<svg viewBox=\"0 0 310 22\" width=\"310\" height=\"22\"><rect x=\"0\" y=\"1\" width=\"{wb:.1}\" height=\"9\" fill=\"var(--over)\"><title>before</title></rect><rect x=\"0\" y=\"12\" width=\"{wa:.1}\" height=\"9\" fill=\"var(--params)\"><title>after</title></rect></svg>"
                    ),
                )
            }
            _ => ("-".into(), String::new()),
        };
        let _ = writeln!(
            out,
            "<tr><td>{label}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{change}</td><td>{bars}</td></tr>",
            text(b),
            text(a)
        );
    }
    out.push_str("</table>\n");
    legend(out, &[("--over", "before"), ("--params", "after")]);
    if c.applied.is_empty() {
        out.push_str("<p class=\"note\">the rewritten model records no nnlint rewrites in its metadata</p>\n");
    } else {
        out.push_str("<table id=\"rewrites-applied\"><tr><th>node</th><th>rule</th><th>rewrite</th><th class=\"num\">rank</th><th>safety</th></tr>\n");
        for a in &c.applied {
            let _ = writeln!(
                out,
                "<tr><td class=\"name\" title=\"{n}\">{n}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&a.rule),
                a.kind,
                a.rank.map_or("-".into(), |r| r.to_string()),
                a.safety,
                n = escape(&a.node)
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

/// Unknown ops, layers of unknown size, notes and warnings.
fn notes(out: &mut String, r: &MemReport) {
    let view = MemView::new(r, ViewOptions::default());
    let mut tail = String::new();
    trailer(&view, &mut tail, "");
    let lines: Vec<&str> = tail
        .lines()
        // the page shows every layer: what the table hides is not hidden here
        .filter(|l| !l.contains("not shown"))
        .collect();
    if lines.is_empty() {
        return;
    }
    out.push_str("<section id=\"notes\">\n<h2>Notes</h2>\n<ul>\n");
    for l in lines {
        let _ = writeln!(out, "<li>{}</li>", escape(l));
    }
    out.push_str("</ul>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }
}
