//! A report's layer rows ([`Layers`]): held as [`Layer`]s, or, for the nodes of a graph, kept
//! compact and made one at a time as a report reads them.
//!
//! A graph of 100,000 nodes held 100,000 `Layer`s of 176 bytes, each with its name copied out of
//! the graph: ~20 MiB, the peak of `mem` (issue 23). Its compact rows take 64 bytes each and
//! read their names from the graph's own names buffer; a report reads a row through a
//! [`Cursor`], which makes it in one `Layer` reused from row to row.

use std::borrow::Cow;
use std::sync::Arc;

use super::Layer;
use crate::ir::{Dim, Name, Sym};

/// The rows of a report, in order.
#[derive(Clone, Debug, Default)]
pub struct Layers(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Held(Vec<Layer>),
    Graph(GraphRows),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Held(Vec::new())
    }
}

impl From<Vec<Layer>> for Layers {
    fn from(rows: Vec<Layer>) -> Self {
        Layers(Repr::Held(rows))
    }
}

impl From<GraphRows> for Layers {
    fn from(rows: GraphRows) -> Self {
        Layers(Repr::Graph(rows))
    }
}

/// What orders, shares and totals read of a row, without making it.
#[derive(Clone, Copy, Debug)]
pub struct RowKey<'a> {
    pub params: u64,
    pub activation_bytes: Option<&'a Dim>,
    pub macs: Option<&'a Dim>,
    pub depth: u32,
    pub folded: bool,
    pub skipped: bool,
}

impl Layers {
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Held(v) => v.len(),
            Repr::Graph(g) => g.rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s sizes, depth and flags (`i < len()`).
    pub fn key(&self, i: usize) -> RowKey<'_> {
        match &self.0 {
            Repr::Held(v) => {
                let l = &v[i];
                RowKey {
                    params: l.params,
                    activation_bytes: l.activation_bytes.as_ref(),
                    macs: l.macs.as_ref(),
                    depth: l.depth,
                    folded: l.folded,
                    skipped: l.skipped,
                }
            }
            Repr::Graph(g) => {
                let r = &g.rows[i];
                RowKey {
                    params: g.stored(r)[0],
                    activation_bytes: r.activation_bytes.as_ref(),
                    macs: r.macs.as_ref(),
                    depth: 0,
                    folded: r.folded,
                    skipped: false,
                }
            }
        }
    }

    /// Row `i`'s name (`i < len()`).
    pub fn name(&self, i: usize) -> &str {
        match &self.0 {
            Repr::Held(v) => &v[i].name,
            Repr::Graph(g) => g.rows[i].name.read(&g.names),
        }
    }

    /// Reads rows by index, each made in one `Layer` reused from row to row.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor {
            layers: self,
            scratch: Layer::of_tensors(String::new(), String::new(), Vec::new()),
        }
    }

    /// Every row, in order: borrowed when held, made one by one otherwise.
    pub fn iter(&self) -> impl Iterator<Item = Cow<'_, Layer>> + '_ {
        (0..self.len()).map(move |i| match &self.0 {
            Repr::Held(v) => Cow::Borrowed(&v[i]),
            Repr::Graph(g) => {
                let mut l = Layer::of_tensors(String::new(), String::new(), Vec::new());
                g.fill(i, &mut l);
                Cow::Owned(l)
            }
        })
    }

    /// Every row, made.
    pub fn to_vec(&self) -> Vec<Layer> {
        self.iter().map(Cow::into_owned).collect()
    }

    /// Gives the rows of nodes their output shapes: `rows[n]` is node `n`'s row, if it has one
    /// (in node order), and `shapes(n, out)` appends node `n`'s outputs' shapes to `out`.
    pub(super) fn set_shapes(
        &mut self,
        rows: &[Option<usize>],
        mut shapes: impl FnMut(usize, &mut Vec<Option<Vec<Dim>>>),
    ) {
        match &mut self.0 {
            Repr::Held(v) => {
                for (n, &i) in rows.iter().enumerate() {
                    let Some(l) = i.and_then(|i| v.get_mut(i)) else {
                        continue;
                    };
                    let mut out = Vec::new();
                    shapes(n, &mut out);
                    l.output_shapes = out;
                }
            }
            Repr::Graph(g) => {
                g.shapes.clear();
                for (n, &i) in rows.iter().enumerate() {
                    let Some(i) = i else { continue };
                    shapes(n, &mut g.shapes);
                    g.rows[i].shapes_end = g.shapes_end();
                }
            }
        }
    }
}

/// Reads a report's rows: [`Layers::cursor`].
pub struct Cursor<'a> {
    layers: &'a Layers,
    scratch: Layer,
}

impl Cursor<'_> {
    /// Row `i` (`i < len()`).
    pub fn get(&mut self, i: usize) -> &Layer {
        match &self.layers.0 {
            Repr::Held(v) => &v[i],
            Repr::Graph(g) => {
                g.fill(i, &mut self.scratch);
                &self.scratch
            }
        }
    }
}

/// The main graph's rows while a report is built: compact, or held when the graph is too large
/// for compact rows' 32-bit indices.
pub(super) enum Rows {
    Compact(GraphRows),
    Held(Vec<Layer>),
}

impl Rows {
    /// Row `i`'s activation bytes, to change.
    pub(super) fn activation_mut(&mut self, i: usize) -> Option<&mut Option<Dim>> {
        match self {
            Rows::Compact(g) => g.rows.get_mut(i).map(|r| &mut r.activation_bytes),
            Rows::Held(v) => v.get_mut(i).map(|l| &mut l.activation_bytes),
        }
    }

    /// Row `i`'s parameters, their bytes, buffers and their bytes, to add to.
    pub(super) fn stored_mut(&mut self, i: usize) -> Option<StoredMut<'_>> {
        match self {
            Rows::Compact(g) => {
                let r = g.rows.get_mut(i)?;
                if r.stored == 0 {
                    g.stored.push(NO_STORED);
                    // at most one entry per row, and `GraphRows::new` checked that the rows fit
                    r.stored = u32::try_from(g.stored.len()).unwrap_or(u32::MAX);
                }
                let [a, b, c, d] = g.stored.get_mut(r.stored as usize - 1)?;
                Some([a, b, c, d])
            }
            Rows::Held(v) => {
                let l = v.get_mut(i)?;
                Some([
                    &mut l.params,
                    &mut l.param_bytes,
                    &mut l.buffers,
                    &mut l.buffer_bytes,
                ])
            }
        }
    }

    /// Each row's saved and gradient bytes (`per_node`, by node; `row_of`, each node's row).
    pub(super) fn set_train(&mut self, row_of: &[Option<usize>], per_node: &[(u64, u64)]) {
        match self {
            Rows::Compact(g) => {
                g.train = vec![(0, 0); g.rows.len()];
                for (&i, &t) in row_of.iter().zip(per_node) {
                    if let Some(slot) = i.and_then(|i| g.train.get_mut(i)) {
                        *slot = t;
                    }
                }
            }
            Rows::Held(v) => {
                for (&i, &(saved, grads)) in row_of.iter().zip(per_node) {
                    if let Some(l) = i.and_then(|i| v.get_mut(i)) {
                        l.saved_bytes = Some(saved);
                        l.gradient_bytes = Some(grads);
                    }
                }
            }
        }
    }
}

/// A row's parameters, their bytes, buffers and their bytes.
pub(super) type StoredMut<'a> = [&'a mut u64; 4];

/// The rows of a graph's nodes (the main graph's, depth 0), compact: names read from the
/// graph's names, output shapes one after the other, stored-tensor sizes only for the rows that
/// have some.
#[derive(Clone, Debug, Default)]
pub(super) struct GraphRows {
    names: Arc<String>,
    rows: Vec<Row>,
    /// Every row's outputs' shapes, row after row (each row's end is its `shapes_end`).
    shapes: Vec<Option<Vec<Dim>>>,
    /// Parameters, their bytes, buffers and their bytes, of the rows that have stored tensors.
    stored: Vec<[u64; 4]>,
    /// With `--train`: each row's saved and gradient bytes.
    train: Vec<(u64, u64)>,
}

/// One node's row. 64 bytes.
#[derive(Clone, Debug)]
struct Row {
    name: Name,
    op: Sym,
    activation_bytes: Option<Dim>,
    macs: Option<Dim>,
    /// Where its shapes end in [`GraphRows::shapes`] (they start where the row before ends).
    shapes_end: u32,
    /// 1 + its index in [`GraphRows::stored`]; 0: none.
    stored: u32,
    folded: bool,
}

/// What a row of a node holds besides its name and shapes ([`GraphRows::push`]).
pub(super) struct RowParts {
    pub op: Sym,
    pub activation_bytes: Option<Dim>,
    pub macs: Option<Dim>,
    pub folded: bool,
}

const NO_STORED: [u64; 4] = [0; 4];

impl GraphRows {
    /// Room for `rows` rows of a graph whose names are `names`; `None` when a graph this large
    /// (more than 2^32 - 1 rows or outputs) is to be held as `Layer`s.
    pub(super) fn new(names: Arc<String>, rows: usize, outputs: usize) -> Option<GraphRows> {
        u32::try_from(rows.max(outputs)).ok()?;
        let rows = Vec::with_capacity(rows);
        crate::util::pages::advise_huge(&rows);
        Some(GraphRows {
            names,
            rows,
            ..GraphRows::default()
        })
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Adds a row; `shapes`: its outputs' shapes now, or later ([`Layers::set_shapes`]).
    pub(super) fn push(
        &mut self,
        name: Name,
        parts: RowParts,
        shapes: impl Iterator<Item = Option<Vec<Dim>>>,
    ) {
        self.shapes.extend(shapes);
        let shapes_end = self.shapes_end();
        self.rows.push(Row {
            name,
            op: parts.op,
            activation_bytes: parts.activation_bytes,
            macs: parts.macs,
            shapes_end,
            stored: 0,
            folded: parts.folded,
        });
    }

    fn shapes_end(&self) -> u32 {
        // `new` checked that the outputs fit
        u32::try_from(self.shapes.len()).unwrap_or(u32::MAX)
    }

    fn stored(&self, r: &Row) -> &[u64; 4] {
        match r.stored {
            0 => &NO_STORED,
            k => self.stored.get(k as usize - 1).unwrap_or(&NO_STORED),
        }
    }

    /// Makes row `i` in `l`, reusing what `l` holds.
    fn fill(&self, i: usize, l: &mut Layer) {
        let r = &self.rows[i];
        l.name.clear();
        l.name.push_str(r.name.read(&self.names));
        l.op.clone_from(&r.op);
        let start = i
            .checked_sub(1)
            .map_or(0, |p| self.rows[p].shapes_end as usize);
        let shapes = self
            .shapes
            .get(start..r.shapes_end as usize)
            .unwrap_or_default();
        // the shapes' vectors are reused too: a row of known dimensions allocates nothing
        l.output_shapes.truncate(shapes.len());
        for (k, s) in shapes.iter().enumerate() {
            match (l.output_shapes.get_mut(k), s) {
                (Some(Some(dst)), Some(s)) => dst.clone_from(s),
                (Some(dst), s) => *dst = s.clone(),
                (None, s) => l.output_shapes.push(s.clone()),
            }
        }
        let [params, param_bytes, buffers, buffer_bytes] = *self.stored(r);
        l.params = params;
        l.param_bytes = param_bytes;
        l.buffers = buffers;
        l.buffer_bytes = buffer_bytes;
        l.activation_bytes.clone_from(&r.activation_bytes);
        l.macs.clone_from(&r.macs);
        l.folded = r.folded;
        (l.saved_bytes, l.gradient_bytes) = match self.train.get(i) {
            Some(&(s, g)) => (Some(s), Some(g)),
            None => (None, None),
        };
        l.depth = 0;
        l.branch = None;
        l.skipped = false;
    }

    /// The rows as `Layer`s.
    pub(super) fn into_layers(self) -> Vec<Layer> {
        let mut out = Vec::with_capacity(self.rows.len());
        for i in 0..self.rows.len() {
            let mut l = Layer::of_tensors(String::new(), String::new(), Vec::new());
            self.fill(i, &mut l);
            out.push(l);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_64_bytes() {
        assert!(
            std::mem::size_of::<Row>() <= 64,
            "{}",
            std::mem::size_of::<Row>()
        );
    }
}
