//! Stage 7, reports: the memory table in every output format. The formats share one view of the rows
//! ([`MemView`]): the same sort, the same `--top` cut and the same shares, so that a table and its
//! JSON never disagree.

pub mod fit;
pub mod html;
pub mod json;
pub mod lint;
pub mod rewrite;
pub mod sarif;
pub mod table;
pub mod units;

use crate::analysis::{LayerRef, MemReport, OutputShapes};
use crate::ir::Dim;

crate::named_enum! {
    /// Output formats of `nnlint mem`.
    pub enum MemFormat {
        /// Aligned text.
        Table = "table",
        /// The JSON contract (docs/mem.schema.json).
        Json = "json",
        /// One row per layer, raw numbers.
        Csv = "csv",
        /// A Markdown table and summary.
        Markdown = "markdown",
        /// A self-contained HTML page with the charts (`nnlint report` adds lint and fit).
        Html = "html",
    }
}

crate::named_enum! {
    /// Output formats of `nnlint fit`.
    pub enum FitFormat {
        /// Aligned text.
        Table = "table",
        /// JSON.
        Json = "json",
    }
}

/// Renders a fit report; `source` is the Hub ID's cache snapshot the model was read from.
pub fn render_fit(
    r: &crate::analysis::fit::FitReport,
    kind: &str,
    format: FitFormat,
    width: Option<usize>,
    source: Option<&crate::load::hub::Snapshot>,
) -> String {
    match format {
        FitFormat::Table => fit::render(r, width),
        FitFormat::Json => fit_json(kind, r, source),
    }
}

/// The version of `fit`'s JSON (docs/fit.schema.json).
pub const FIT_SCHEMA_VERSION: u32 = 2;

/// `fit --format json` for either kind of model, in one documented envelope: `schema_version`,
/// `kind` (`graph`: an ONNX model's micro-batch plans; `language_model`: a checkpoint's serving
/// and fine-tuning plans at a sequence length), then the report's own fields, and `source` for a
/// model read from a Hub ID's cache snapshot.
pub fn fit_json<T: serde::Serialize>(
    kind: &str,
    report: &T,
    source: Option<&crate::load::hub::Snapshot>,
) -> String {
    #[derive(serde::Serialize)]
    struct Doc<'a, T> {
        schema_version: u32,
        kind: &'a str,
        #[serde(flatten)]
        report: &'a T,
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<json::Source<'a>>,
    }
    let mut s = serde_json::to_string_pretty(&Doc {
        schema_version: FIT_SCHEMA_VERSION,
        kind,
        report,
        source: source.map(json::Source::of),
    })
    .expect("the report serialises");
    s.push('\n');
    s
}

crate::named_enum! {
    /// What to sort layers by.
    pub enum SortKey {
        /// Parameters.
        Params = "params",
        /// Output bytes.
        Activations = "activations",
        /// Multiply-accumulates.
        Macs = "macs",
    }
}

impl SortKey {
    fn label(self) -> &'static str {
        match self {
            SortKey::Params => "params",
            SortKey::Activations => "activations",
            SortKey::Macs => "MACs",
        }
    }
}

/// How to present the rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct ViewOptions {
    pub sort: Option<SortKey>,
    pub top: Option<usize>,
    /// Show shape-computation rows whose outputs are folded constants (hidden by default in tables).
    pub all: bool,
    /// The width to fit the table in (a terminal's): the layer names are shortened, never the
    /// numbers. `None`: as wide as the cells.
    pub width: Option<usize>,
}

/// A value for ordering and shares: known values as they are, symbolic ones with every symbol at 1.
fn magnitude(d: Option<&Dim>) -> f64 {
    let Some(d) = d else { return 0.0 };
    if let Some(v) = d.as_i64() {
        return v as f64;
    }
    let ones = d.symbols().iter().map(|s| (s.to_string(), 1)).collect();
    d.substitute(&ones)
        .and_then(|x| x.as_i64())
        .map_or(0.0, |v| v as f64)
}

fn metric(l: LayerRef<'_>, key: SortKey) -> f64 {
    match key {
        SortKey::Params => l.params as f64,
        SortKey::Activations => magnitude(l.activation_bytes),
        SortKey::Macs => magnitude(l.macs),
    }
}

/// The rows to show, in order, with the share of the total each holds.
pub struct MemView<'a> {
    pub report: &'a MemReport,
    /// Each row's index in the report's layers, and its share.
    pub rows: Vec<(usize, f64)>,
    /// What the share column is a share of.
    pub share_of: SortKey,
    /// Rows left out by `--top` or as folded shape computations.
    pub hidden: usize,
    pub folded_hidden: usize,
    /// The width the table must fit in, if any.
    pub width: Option<usize>,
    /// Where a Hub ID's model was read from (the JSON's `source`).
    pub source: Option<&'a crate::load::hub::Snapshot>,
}

impl<'a> MemView<'a> {
    pub fn new(report: &'a MemReport, opts: ViewOptions) -> Self {
        // `--top K` alone keeps the K largest by parameters, as its help says
        let opts = ViewOptions {
            sort: opts.sort.or(opts.top.map(|_| SortKey::Params)),
            ..opts
        };
        let share_of = opts.sort.unwrap_or(SortKey::Params);
        // subgraph rows are in their control-flow node's row already
        let layers = &report.layers;
        // one pass: each row's share metric, the total of the main graph's rows, the rows shown
        let mut total = 0.0;
        let mut rows: Vec<(usize, f64)> = Vec::with_capacity(layers.len());
        for (i, l) in layers.iter().enumerate() {
            let m = metric(l, share_of);
            if l.depth == 0 {
                total += m;
            }
            // a sorted view ranks the main graph's layers
            if (opts.all || !l.folded) && (opts.sort.is_none() || l.depth == 0) {
                rows.push((i, m));
            }
        }
        let folded_hidden = layers.len() - rows.len();
        // a sorted view's shares are of what it sorts by
        if opts.sort.is_some() {
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        }
        let before = rows.len();
        if let Some(k) = opts.top {
            rows.truncate(k);
        }
        let hidden = before - rows.len();
        for (_, m) in &mut rows {
            *m = if total > 0.0 { *m / total } else { 0.0 };
        }
        MemView {
            report,
            rows,
            share_of,
            hidden,
            folded_hidden,
            width: opts.width,
            source: None,
        }
    }

    /// Each row to show and its share, in order.
    pub fn each(&self) -> impl Iterator<Item = (LayerRef<'a>, f64)> + '_ {
        self.rows
            .iter()
            .map(|&(i, share)| (self.report.layers.get(i), share))
    }

    pub fn share_header(&self) -> String {
        format!("%{}", self.share_of.label())
    }
}

/// Renders output shapes as `[1,64,112,112]`, several separated by spaces, `?` when unknown.
pub fn shapes_text(shapes: OutputShapes<'_>) -> String {
    let mut out = String::with_capacity(24 * shapes.len().max(1));
    write_shapes(&mut out, shapes);
    out
}

/// [`shapes_text`], appended to `out`.
pub fn write_shapes(out: &mut String, shapes: OutputShapes<'_>) {
    if shapes.is_empty() {
        out.push('-');
        return;
    }
    for (i, s) in shapes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match s {
            Some(s) => crate::ir::write_shape(out, s),
            None => out.push('?'),
        }
    }
}

/// Renders a report in the chosen format.
pub fn render_mem(report: &MemReport, format: MemFormat, opts: ViewOptions) -> String {
    render_mem_from(report, format, opts, None)
}

/// [`render_mem`] for a model read from a Hub ID's cache snapshot: the JSON says where
/// (`source`); the other formats show the ID as the model's name.
pub fn render_mem_from(
    report: &MemReport,
    format: MemFormat,
    opts: ViewOptions,
    source: Option<&crate::load::hub::Snapshot>,
) -> String {
    crate::util::written(|out| write_mem(report, format, opts, source, out))
}

/// [`render_mem_from`], written to `out` as it is rendered: the rows of a table, CSV or JSON
/// document go out one by one, and the whole document is never held as one text.
pub fn write_mem(
    report: &MemReport,
    format: MemFormat,
    opts: ViewOptions,
    source: Option<&crate::load::hub::Snapshot>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    match format {
        MemFormat::Table => table::write(&MemView::new(report, opts), out),
        MemFormat::Markdown => {
            out.write_all(table::render_markdown(&MemView::new(report, opts)).as_bytes())
        }
        MemFormat::Csv => table::write_csv(
            &MemView::new(report, ViewOptions { all: true, ..opts }),
            out,
        ),
        MemFormat::Json => json::write(
            &MemView {
                source,
                ..MemView::new(report, ViewOptions { all: true, ..opts })
            },
            out,
        ),
        MemFormat::Html => out.write_all(
            html::render(&html::Page {
                mem: report,
                training_missing: Some("add --train for the memory of a training step".into()),
                fit: None,
                lint: None,
                rewrite: None,
            })
            .as_bytes(),
        ),
    }
}
