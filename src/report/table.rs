//! The memory table as aligned text, Markdown and CSV.

use super::units::{
    bytes, count, dim_bytes, dim_count, write_bytes, write_count, write_dim_bytes, write_dim_count,
    write_percent,
};
use super::{write_shapes, MemView};
use crate::analysis::{Format, LayerRef, MemReport};
use crate::util::table::{Align, Cells, Rows, Table};

const HEADERS: [&str; 7] = [
    "layer",
    "op",
    "output shape",
    "params",
    "param bytes",
    "activations",
    "MACs",
];

fn headers(view: &MemView) -> Vec<String> {
    let mut h: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    // a graph's rows show what each layer outputs; weights alone and checkpoints, the shape of
    // the row's weight
    if view.report.format != Format::Onnx {
        h[2] = "weight shape".into();
    }
    if per_layer_training(view.report) {
        h.push("saved".into());
        h.push("grads".into());
    }
    h.push(view.share_header());
    h
}

/// Whether rows carry saved and gradient bytes: graphs do; a checkpoint's estimate is per model.
fn per_layer_training(r: &MemReport) -> bool {
    r.training.is_some() && !matches!(r.format, Format::Checkpoint | Format::Gguf)
}

/// The layer rows' cells, formatted for people, written into `t` in place.
fn fill(view: &MemView, t: &mut impl Cells) {
    LayerRows::new(view).fill(0..view.rows.len(), t);
}

/// The layer table's rows by their index in the view, as [`Rows`] for tables made on demand.
struct LayerRows<'v, 'a> {
    view: &'v MemView<'a>,
    training: bool,
    width: usize,
}

impl<'v, 'a> LayerRows<'v, 'a> {
    fn new(view: &'v MemView<'a>) -> Self {
        LayerRows {
            view,
            training: per_layer_training(view.report),
            width: headers(view).len(),
        }
    }
}

impl Rows for LayerRows<'_, '_> {
    fn count(&self) -> usize {
        self.view.rows.len()
    }

    fn fill<C: Cells>(&self, range: std::ops::Range<usize>, t: &mut C) {
        let view = self.view;
        let layers = &view.report.layers;
        // a subgraph's rows: a label line, then the nodes indented under their control-flow node
        // (the row before the range says whether its first row starts a subgraph)
        let mut last_branch: Option<&str> = range
            .start
            .checked_sub(1)
            .and_then(|p| view.rows.get(p))
            .and_then(|&(i, _)| layers.get(i).branch);
        for &(i, share) in view.rows.get(range).unwrap_or_default() {
            let l = layers.get(i);
            if l.branch != last_branch {
                if let Some(b) = l.branch {
                    t.start_row();
                    t.cell(&format!("{}↳ {b}", "  ".repeat(l.depth as usize - 1)));
                    for _ in 1..self.width {
                        t.cell("");
                    }
                }
                last_branch = l.branch;
            }
            cell_row(t, l, share, view, self.training);
        }
    }
}

fn cell_row(t: &mut impl Cells, l: LayerRef<'_>, share: f64, view: &MemView, training: bool) {
    let dash_or = |n: u64, write: fn(&mut String, u64)| {
        move |s: &mut String| {
            if n > 0 {
                write(s, n);
            } else {
                s.push('-');
            }
        }
    };
    t.start_row();
    t.cell_with(|s| {
        for _ in 0..l.depth {
            s.push_str("  ");
        }
        s.push_str(l.name);
    });
    t.cell(l.op);
    t.cell_with(|s| write_shapes(s, l.output_shapes));
    t.cell_with(dash_or(l.params, write_count));
    t.cell_with(dash_or(l.param_bytes, write_bytes));
    t.cell_with(|s| match (l.activation_bytes, view.report.format) {
        (_, Format::Safetensors) => s.push_str("n/a"),
        (Some(b), _) => write_dim_bytes(s, b),
        (None, _) => s.push('?'),
    });
    t.cell_with(|s| match (l.macs, view.report.format) {
        (_, Format::Safetensors) => s.push_str("n/a"),
        (Some(m), _) if m.as_i64() == Some(0) => s.push('-'),
        (Some(m), _) => write_dim_count(s, m),
        (None, _) => s.push('-'),
    });
    if training {
        t.cell_with(dash_or(l.saved_bytes.unwrap_or(0), write_bytes));
        t.cell_with(dash_or(l.gradient_bytes.unwrap_or(0), write_bytes));
    }
    t.cell_with(|s| write_percent(s, share, 1.0));
}

/// `(label, value, detail)` lines of the training step, which add up to the total.
pub fn training_lines(r: &MemReport) -> Vec<(String, String, String)> {
    let Some(t) = &r.training else {
        return Vec::new();
    };
    let c = &t.config;
    let p = &t.peak;
    let state = match c.precision {
        crate::analysis::saved::Precision::Bf16 => "bf16",
        _ => "fp32",
    };
    let cpu = c.device == crate::analysis::saved::Device::Cpu;
    let per = if cpu { "" } else { " per GPU" };
    let mut out = vec![
        (
            "weights".to_string(),
            bytes(p.weights_bytes),
            format!("parameters and buffers as held{per} ({state})"),
        ),
        (
            "gradients".into(),
            bytes(p.gradient_bytes),
            if p.gradient_bytes == t.gradient_bytes {
                "all parameter gradients".into()
            } else {
                format!("allocated at the peak, of {}", bytes(t.gradient_bytes))
            },
        ),
        (
            "optimizer state".into(),
            bytes(p.optimizer_bytes),
            format!(
                "{}, {} state tensor(s) per parameter",
                c.optimizer,
                c.optimizer.states()
            ),
        ),
        (
            "saved activations".into(),
            at_least(t.lower_bound, bytes(p.saved_activation_bytes)),
            {
                let mut d = if p.saved_activation_bytes + t.saved_buffer_bytes
                    >= t.saved_activation_bytes
                {
                    "held for backward".to_string()
                } else {
                    format!(
                        "still held at the peak, of {}",
                        bytes(t.saved_activation_bytes)
                    )
                };
                if t.saved_buffer_bytes > 0 {
                    d.push_str(&format!(
                        "; {} more are BatchNorm statistics, counted with the weights",
                        bytes(t.saved_buffer_bytes)
                    ));
                }
                if t.autocast_weight_copy_bytes > 0 {
                    d.push_str(&format!(
                        "; includes {} of autocast weight copies",
                        bytes(t.autocast_weight_copy_bytes)
                    ));
                }
                if t.saved_activation_bytes != t.saved_activation_bytes_full {
                    d.push_str(&format!(
                        "; {} without checkpointing",
                        bytes(t.saved_activation_bytes_full)
                    ));
                }
                d
            },
        ),
        (
            "transient".into(),
            bytes(p.transient_bytes),
            if p.phase == "backward" {
                "gradients of the activations being differentiated".into()
            } else {
                "optimizer temporaries".into()
            },
        ),
    ];
    if p.parallel_bytes > 0 {
        out.push((
            "data parallel".into(),
            bytes(p.parallel_bytes),
            format!("{} buffers", c.shard),
        ));
    }
    out.push((
        "overhead".into(),
        bytes(t.overhead_bytes),
        if cpu && t.overhead_bytes == 0 {
            "none on CPU (no CUDA context, workspace or caching allocator; --overhead-context and --fragmentation add them)".to_string()
        } else {
            format!(
                "{} {} + workspace {} + {:.0}% allocator slack (not model memory)",
                if cpu { "context" } else { "CUDA context" },
                bytes(c.overhead.cuda_context),
                bytes(c.overhead.workspace),
                c.overhead.fragmentation * 100.0
            )
        },
    ));
    out.push((
        format!("peak{per}"),
        at_least(t.lower_bound, bytes(t.total_bytes)),
        format!("during the {}; the lines above add up to it", p.phase),
    ));
    if t.lower_bound {
        out.push((
            "not counted".into(),
            "?".into(),
            format!("a lower bound: {}", t.unknown.join("; ")),
        ));
    }
    if t.recompute_macs > 0 {
        out.push((
            "recompute".into(),
            count(t.recompute_macs),
            format!(
                "MACs re-run by checkpointing (+{:.0}% step compute)",
                t.recompute_fraction * 100.0
            ),
        ));
    }
    if t.communication_bytes > 0 {
        out.push((
            "communication".into(),
            bytes(t.communication_bytes),
            "sent per GPU per optimizer step".into(),
        ));
    }
    out.push((
        "host memory".into(),
        bytes(t.host_bytes),
        format!(
            "input pipeline: {} workers x {} batches{}",
            c.host.workers,
            c.host.prefetch,
            if c.host.pinned { ", pinned copies" } else { "" }
        ),
    ));
    out
}

pub fn training_heading(r: &MemReport) -> Option<String> {
    let t = r.training.as_ref()?;
    let c = &t.config;
    Some(format!(
        "training step: {}, {}, micro-batch {}{}, {}{}, checkpoint {}, {} semantics",
        c.optimizer,
        c.precision,
        t.micro_batch.map_or("?".into(), |b| b.to_string()),
        match t.effective_batch {
            Some(e) if Some(e) != t.micro_batch => format!(" (effective {e})"),
            _ => String::new(),
        },
        if c.device == crate::analysis::saved::Device::Cpu {
            "CPU".to_string()
        } else {
            format!("{} GPU{}", c.gpus, if c.gpus == 1 { "" } else { "s" })
        },
        if c.shard == crate::analysis::training::Shard::None {
            String::new()
        } else {
            format!(" {}", c.shard)
        },
        c.checkpoint,
        c.device,
    ))
}

/// `≥ text` for a lower bound; `?` for a lower bound of nothing, which says nothing.
fn at_least(lower: bool, text: String) -> String {
    if !lower {
        text
    } else if text == "0" || text == "0 B" {
        "?".to_string()
    } else {
        format!("≥ {text}")
    }
}

/// `(label, value, detail)` lines summarising the model.
pub fn totals_lines(r: &MemReport) -> Vec<(String, String, String)> {
    let t = &r.totals;
    let mut out = vec![
        (
            "parameters".into(),
            at_least(t.lower.params(), count(t.params)),
            if t.lower.params() {
                format!(
                    "{}; {} stored tensors of unknown size left out",
                    bytes(t.param_bytes),
                    t.lower.tensors_without_size
                )
            } else {
                bytes(t.param_bytes)
            },
        ),
        (
            "buffers".into(),
            count(t.buffers),
            format!(
                "{} (BatchNorm running statistics and other state)",
                bytes(t.buffer_bytes)
            ),
        ),
        (
            "constants".into(),
            count(t.constants),
            bytes(t.constant_bytes),
        ),
    ];
    if r.format == Format::Safetensors {
        return out;
    }
    let unsized_note = |what: &str, n: usize| {
        if n == 0 {
            String::new()
        } else {
            format!(
                "; a lower bound: {n} layer{} of unknown {what} left out",
                if n == 1 { "" } else { "s" }
            )
        }
    };
    out.push((
        "activations".into(),
        at_least(
            t.lower.activations(),
            t.activation_bytes.as_ref().map_or("?".into(), dim_bytes),
        ),
        format!(
            "sum of every layer's outputs{}",
            unsized_note("size", t.lower.layers_without_size)
        ),
    ));
    let peak_detail = match (&r.peak, &r.peak_missing) {
        (Some(p), _) => {
            let live: Vec<String> = p
                .live
                .iter()
                .take(3)
                // quoted: exporters name tensors `411`, which ran into their sizes
                .map(|(n, b)| format!("'{n}' {}", bytes(*b)))
                .collect();
            format!(
                "{}live tensors, weights excluded{}",
                p.node
                    .as_ref()
                    .map_or(String::new(), |n| format!("at '{n}'; ")),
                if live.is_empty() {
                    String::new()
                } else {
                    format!(": {}", live.join(", "))
                }
            )
        }
        (None, Some(why)) => why.clone(),
        (None, None) => String::new(),
    };
    out.push((
        "inference peak".into(),
        at_least(
            t.lower.activations(),
            t.inference_peak_bytes.map_or("?".into(), bytes),
        ),
        peak_detail,
    ));
    let macs = t.macs.as_ref();
    let flops = macs
        .and_then(|m| m.checked_mul(&crate::ir::Dim::known(2)))
        .map_or(String::new(), |f| {
            format!(
                "FLOPs = 2 x MACs = {}",
                at_least(t.lower.macs(), dim_count(&f))
            )
        });
    out.push((
        "MACs".into(),
        at_least(t.lower.macs(), macs.map_or("?".into(), dim_count)),
        format!(
            "{flops}{}",
            unsized_note("cost", t.lower.layers_without_macs)
        )
        .trim_start_matches("; ")
        .to_string(),
    ));
    if let Some(inf) = r.llm.as_ref().and_then(|l| l.inference.as_ref()) {
        out.extend(serving_lines(inf));
    }
    if t.lower.undecided_branches > 0 {
        out.push((
            "branches".into(),
            t.lower.undecided_branches.to_string(),
            "If nodes whose condition depends on input values: each counts its larger branch"
                .into(),
        ));
    }
    if t.lower.unknown_trip_counts > 0 {
        out.push((
            "loops".into(),
            t.lower.unknown_trip_counts.to_string(),
            "Loop and Scan nodes whose trip count is unknown: each body counted once (a lower bound)"
                .into(),
        ));
    }
    out
}

/// The serving memory of a language model, lines that add up to its total.
fn serving_lines(i: &crate::analysis::llm::LlmInference) -> Vec<(String, String, String)> {
    use crate::analysis::llm::layers::CacheKind;
    // what the fixed part is made of, in words
    let mut fixed_of: Vec<&str> = Vec::new();
    for g in i.cache.iter().filter(|g| g.fixed_bytes > g.layers * 8) {
        let w = match g.kind {
            CacheKind::Sliding => "sliding windows",
            CacheKind::Chunked => "chunked windows",
            CacheKind::LinearAttention | CacheKind::Ssm | CacheKind::Conv | CacheKind::Hybrid => {
                "recurrent states"
            }
            // only a runtime's blocks or cells leave attention layers a fixed part
            CacheKind::Attention | CacheKind::Latent => "allocation rounding",
        };
        if !fixed_of.contains(&w) {
            fixed_of.push(w);
        }
    }
    if fixed_of.is_empty() {
        fixed_of.push("sliding windows");
    }
    let mut out = vec![(
        "KV cache".into(),
        bytes(i.kv_cache_bytes),
        format!(
            "{} sequences x {} tokens, {}{}, {} per token{}; {} in steady decoding",
            i.batch,
            i.seq,
            i.kv_dtype,
            match i.cache_layout {
                crate::analysis::llm::layers::CacheLayout::Hf => String::new(),
                l => format!(", as {l} allocates it"),
            },
            bytes(i.kv_bytes_per_token),
            if i.kv_fixed_bytes > 0 {
                format!(
                    " + {} fixed ({})",
                    bytes(i.kv_fixed_bytes),
                    fixed_of.join(", ")
                )
            } else {
                String::new()
            },
            bytes(i.kv_cache_decode_bytes)
        ),
    )];
    // a breakdown where the layers hold different things
    if i.cache.len() > 1 {
        for g in &i.cache {
            let grows = matches!(
                g.kind,
                CacheKind::Attention
                    | CacheKind::Latent
                    | CacheKind::Sliding
                    | CacheKind::Chunked
                    | CacheKind::Hybrid
            );
            let per = if grows {
                format!(
                    "{} per token{}",
                    bytes(g.bytes_per_token),
                    if g.fixed_bytes > g.layers * 8 {
                        format!(" + {} fixed", bytes(g.fixed_bytes))
                    } else {
                        String::new()
                    }
                )
            } else {
                format!("{} per sequence", bytes(g.fixed_bytes / i.batch.max(1)))
            };
            out.push((
                format!("  {}", g.kind),
                bytes(g.bytes),
                format!(
                    "{} layer{}, {per}; {} in steady decoding",
                    g.layers,
                    if g.layers == 1 { "" } else { "s" },
                    bytes(g.decode_bytes)
                ),
            ));
        }
    }
    out.extend(vec![
        (
            "logits".into(),
            bytes(i.logits_bytes),
            if i.all_logits {
                "every prefilled position (forward() without logits_to_keep)".into()
            } else {
                "the last position of each sequence and its fp32 copy for sampling, as generate and vLLM keep them (--all-logits: every position)".into()
            },
        ),
        (
            "workspace".into(),
            bytes(i.activation_workspace_bytes),
            "intermediate tensors of the largest layer in the prefill".into(),
        ),
    ]);
    if let Some(img) = &i.images {
        out.push((
            "images".into(),
            bytes(img.encoder_workspace_bytes),
            format!(
                "{} per sequence of {}x{}, {} tokens each; the vision encoder's largest stage (an estimate), before the language model's prefill",
                img.per_sequence,
                img.processed_size[0],
                img.processed_size[1],
                img.text_tokens
            ),
        ));
    }
    out.extend(vec![
        (
            "serving peak".into(),
            bytes(i.total_bytes),
            format!(
                "weights {} + {}KV cache + the larger of logits and workspace{} + overhead {}; {} MACs per decoded token",
                bytes(i.weights_bytes),
                if i.images.is_some() { "the larger of the images' encoder and (" } else { "" },
                if i.images.is_some() { ")" } else { "" },
                bytes(i.overhead_bytes),
                count(i.macs_per_token)
            ),
        ),
    ]);
    out
}

fn heading(r: &MemReport) -> String {
    let mut s = r.model.clone();
    if let Some(b) = r.batch {
        s.push_str(&format!(" · batch {b}"));
    }
    let others: Vec<String> = r
        .dims
        .iter()
        .filter(|(_, v)| Some(**v as u64) != r.batch)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !others.is_empty() {
        s.push_str(&format!(" · {}", others.join(" ")));
    }
    s
}

pub fn trailer(view: &MemView, out: &mut String, bullet: &str) {
    let r = view.report;
    if view.hidden > 0 {
        out.push_str(&format!(
            "{bullet}{} more layers not shown (--top)\n",
            view.hidden
        ));
    }
    if view.folded_hidden > 0 {
        out.push_str(&format!(
            "{bullet}{} shape-computation nodes folded to constants, not shown (--all shows them)\n",
            view.folded_hidden
        ));
    }
    if !r.unknown_ops.is_empty() {
        let ops: Vec<String> = r
            .unknown_ops
            .iter()
            .map(|u| {
                let op = if u.domain.is_empty() {
                    u.op.clone()
                } else {
                    format!("{}.{}", u.domain, u.op)
                };
                format!(
                    "{op} ({} node{})",
                    u.nodes.len(),
                    if u.nodes.len() == 1 { "" } else { "s" }
                )
            })
            .collect();
        out.push_str(&format!(
            "{bullet}unknown ops, not accounted for: {}\n",
            ops.join(", ")
        ));
    }
    if !r.unaccounted.is_empty() {
        let first: Vec<&str> = r.unaccounted.iter().take(5).map(String::as_str).collect();
        out.push_str(&format!(
            "{bullet}{} layers with outputs of unknown size: {}{}\n",
            r.unaccounted.len(),
            first.join(", "),
            if r.unaccounted.len() > 5 { ", ..." } else { "" }
        ));
    }
    for b in &r.branches {
        out.push_str(&format!(
            "{bullet}If {}: counts its {}{}: {}\n",
            b.node,
            b.counted,
            if b.decided { "" } else { " (undecided)" },
            b.why
        ));
    }
    for n in &r.notes {
        out.push_str(&format!("{bullet}note: {n}\n"));
    }
    for w in &r.warnings {
        out.push_str(&format!("{bullet}warning: {w}\n"));
    }
}

/// The layer table's columns, without rows: name, op and shape left-aligned, the numbers
/// right-aligned. On a narrow terminal the share, the parameter bytes, the gradients, the shape and
/// the op are left out, in that order, before the layer names are cut short.
fn layer_columns(view: &MemView, headers: Vec<String>) -> Table {
    let n = headers.len();
    let mut optional = vec![n - 1, 4];
    if per_layer_training(view.report) {
        optional.push(n - 2);
    }
    optional.extend([2, 1]);
    Table::new(
        headers
            .into_iter()
            .enumerate()
            .map(|(i, h)| (h, if i < 3 { Align::Left } else { Align::Right })),
    )
    .squeeze_column(0)
    .optional_columns(&optional)
}

/// Above this many bytes of cells the layer table is not held: its rows are made twice, measured
/// then written (the cells of a graph of 100,000 nodes were 14 MiB at the end of `mem`, its peak).
/// Below it, holding them costs less than formatting every cell twice (6% more instructions for
/// `mem` of a graph of 10,000 nodes).
const HELD_CELLS: usize = 4 << 20;

/// Writes the layer table, held or streamed (see [`HELD_CELLS`]): the same lines either way.
fn write_layers(
    view: &MemView,
    held_cells: usize,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let headers = headers(view);
    // the number columns alone can pass the bound: then the rows are not read for it
    let floor = view.rows.len().saturating_mul(12 * headers.len());
    let text = if floor > held_cells {
        floor
    } else {
        cells_text(view, headers.len())
    };
    let mut t = layer_columns(view, headers);
    if text > held_cells {
        let rows = LayerRows::new(view);
        t.measure_rows(&rows);
        t.stream_rows(view.width, out, &rows)
    } else {
        t.reserve(view.rows.len(), text);
        t.fill_rows(&LayerRows::new(view));
        t.write_fitting(view.width, out)
    }
}

/// About the bytes of the layer table's cells, on the generous side (untouched room costs no
/// memory): the names, ops and shapes as long as they are, each number column 12 bytes.
fn cells_text(view: &MemView, columns: usize) -> usize {
    view.each()
        .map(|(l, _)| {
            let shapes: usize = l
                .output_shapes
                .iter()
                .map(|s| s.as_ref().map_or(2, |s| 2 + 8 * s.len()))
                .sum();
            2 * l.depth as usize + l.name.len() + l.op.len() + shapes + 12 * columns
        })
        .fold(0usize, usize::saturating_add)
}

/// Aligned text for a terminal.
pub fn render(view: &MemView) -> String {
    crate::util::written(|out| write(view, out))
}

/// [`render`], written to `out`: the layer table line by line.
pub fn write(view: &MemView, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "{}\n", heading(view.report))?;
    // `--top 0`: the totals only
    if !view.rows.is_empty() || view.hidden == 0 {
        write_layers(view, HELD_CELLS, out)?;
        out.write_all(b"\n")?;
    }
    let mut rest = aligned(&totals_lines(view.report));
    if let Some(h) = training_heading(view.report) {
        rest.push_str(&format!("\n{h}\n"));
        rest.push_str(&aligned(&training_lines(view.report)));
    }
    let mut tail = String::new();
    trailer(view, &mut tail, "");
    if let Some(t) = &view.report.training {
        for n in &t.notes {
            tail.push_str(&format!("note: {n}\n"));
        }
    }
    if !tail.is_empty() {
        rest.push('\n');
        rest.push_str(&tail);
    }
    out.write_all(rest.as_bytes())
}

/// `label  value  detail` lines with labels left- and values right-aligned.
fn aligned(lines: &[(String, String, String)]) -> String {
    // a symbolic value (`39 KiB·floor((W - 1)/8) + ...`) runs on past the column instead of
    // widening it for every line: numbers stay right-aligned in the width of the short ones
    const WIDE: usize = 40;
    let width = |s: &str| s.chars().count();
    let label_width = lines.iter().map(|(l, _, _)| width(l)).max().unwrap_or(0);
    let long = |v: &str| width(v) > WIDE;
    let mut t = Table::plain(&[Align::Left, Align::Right, Align::Left]);
    for (label, value, detail) in lines.iter().filter(|(_, v, _)| !long(v)) {
        let pad = " ".repeat(label_width - width(label));
        t.push(vec![format!("{label}{pad}"), value.clone(), detail.clone()]);
    }
    let rendered = t.render();
    let mut short_rows = rendered.lines();
    let mut out = String::new();
    for (label, value, detail) in lines {
        if long(value) {
            out.push_str(label);
            out.push_str(&" ".repeat(label_width - width(label) + 2));
            out.push_str(value);
            if !detail.is_empty() {
                out.push_str("  ");
                out.push_str(detail);
            }
        } else if let Some(r) = short_rows.next() {
            out.push_str(r);
        }
        out.push('\n');
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A Markdown table and summary (pull-request comments, `$GITHUB_STEP_SUMMARY`).
pub fn render_markdown(view: &MemView) -> String {
    let mut out = format!("### nnlint mem: `{}`\n\n", md_escape(&heading(view.report)));
    let headers: Vec<(String, Align)> = headers(view)
        .iter()
        .enumerate()
        .map(|(i, h)| (md_escape(h), if i < 3 { Align::Left } else { Align::Right }))
        .collect();
    let mut t = Table::new(headers);
    fill(view, &mut t);
    let t = t.map_cells(|i, c| {
        if i < 3 {
            format!("`{}`", md_escape(c))
        } else {
            md_escape(c)
        }
    });
    out.push_str(&t.render_markdown());
    out.push_str("\n| total | | |\n|---|---:|---|\n");
    for (label, value, detail) in totals_lines(view.report) {
        out.push_str(&format!(
            "| {label} | {} | {} |\n",
            md_escape(&value),
            md_escape(&detail)
        ));
    }
    if let Some(h) = training_heading(view.report) {
        out.push_str(&format!("\n| {} | | |\n|---|---:|---|\n", md_escape(&h)));
        for (label, value, detail) in training_lines(view.report) {
            out.push_str(&format!(
                "| {label} | {} | {} |\n",
                md_escape(&value),
                md_escape(&detail)
            ));
        }
    }
    let mut tail = String::new();
    trailer(view, &mut tail, "- ");
    if let Some(t) = &view.report.training {
        for n in &t.notes {
            tail.push_str(&format!("- note: {n}\n"));
        }
    }
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(&tail);
    }
    out
}

fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// CSV with raw numbers (bytes, counts); symbolic values as expressions. With `--train`, two
/// more columns per layer (bytes saved for backward, gradient bytes) and, after an empty line, the
/// training step as `item,bytes` rows (the peak's parts, which add up to `total_bytes`). The last
/// two columns, `folded` and `depth`, say which rows the totals add (`false`, `0`).
pub fn render_csv(view: &MemView) -> String {
    crate::util::written(|out| write_csv(view, out))
}

/// [`render_csv`], written to `out` row by row.
pub fn write_csv(view: &MemView, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use std::fmt::Write;
    let training = view.report.training.as_ref();
    let mut buf = String::from(
        "name,op,output_shapes,params,param_bytes,buffers,buffer_bytes,activation_bytes,macs,share",
    );
    if training.is_some() {
        buf.push_str(",saved_bytes,gradient_bytes");
    }
    // the rows the table hides (folded shape computations) and the nodes of control-flow
    // subgraphs, whose costs are in their node's row: the totals add `folded=false, depth=0`
    buf.push_str(",folded,depth");
    buf.push('\n');
    let opt = |b: Option<u64>| b.map_or(String::new(), |b| b.to_string());
    let mut shapes = String::new();
    for (l, share) in view.each() {
        shapes.clear();
        write_shapes(&mut shapes, l.output_shapes);
        buf.push_str(&csv_field(l.name));
        buf.push(',');
        buf.push_str(&csv_field(l.op));
        buf.push(',');
        buf.push_str(&csv_field(&shapes));
        let _ = write!(
            buf,
            ",{},{},{},{},",
            l.params, l.param_bytes, l.buffers, l.buffer_bytes
        );
        if let Some(d) = &l.activation_bytes {
            buf.push_str(&csv_field(&d.to_string()));
        }
        buf.push(',');
        if let Some(d) = &l.macs {
            buf.push_str(&csv_field(&d.to_string()));
        }
        let _ = write!(buf, ",{share:.6}");
        if training.is_some() {
            let _ = write!(buf, ",{},{}", opt(l.saved_bytes), opt(l.gradient_bytes));
        }
        let _ = writeln!(buf, ",{},{}", l.folded, l.depth);
        if buf.len() >= 1 << 16 {
            out.write_all(buf.as_bytes())?;
            buf.clear();
        }
    }
    if let Some(t) = training {
        let p = &t.peak;
        buf.push_str("\nitem,bytes\n");
        for (item, v) in [
            ("weights_bytes", p.weights_bytes),
            ("gradient_bytes", p.gradient_bytes),
            ("optimizer_bytes", p.optimizer_bytes),
            ("saved_activation_bytes", p.saved_activation_bytes),
            ("transient_bytes", p.transient_bytes),
            ("parallel_bytes", p.parallel_bytes),
            ("overhead_bytes", p.overhead_bytes),
            ("total_bytes", t.total_bytes),
            ("host_bytes", t.host_bytes),
        ] {
            let _ = writeln!(buf, "{item},{v}");
        }
        let _ = writeln!(buf, "lower_bound,{}", t.lower_bound);
    }
    out.write_all(buf.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer table streamed (made twice, never held) reads as the held one, at any width:
    /// subgraph rows and their labels included.
    #[test]
    fn a_streamed_layer_table_is_the_held_one() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models");
        for model in ["torch/resnet18.onnx", "branches/if_sample_rate.onnx"] {
            let report = crate::analysis::analyze_path(
                &dir.join(model),
                &crate::analysis::Bindings::default(),
                None,
            )
            .unwrap();
            for width in [None, Some(50), Some(90), Some(200)] {
                let view = MemView::new(
                    &report,
                    super::super::ViewOptions {
                        width,
                        ..Default::default()
                    },
                );
                let table = |held| {
                    let mut out = Vec::new();
                    write_layers(&view, held, &mut out).unwrap();
                    String::from_utf8(out).unwrap()
                };
                let held = table(usize::MAX);
                assert!(held.lines().count() > 5, "{model}");
                assert_eq!(table(0), held, "{model} at {width:?}");
            }
        }
    }
}
