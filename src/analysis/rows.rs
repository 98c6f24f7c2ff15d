//! A report's layer rows ([`Layers`]): held as [`Layer`]s, or, for the nodes of a graph, kept
//! compact; either way a report reads a row as a [`LayerRef`], borrowed from where it is kept.
//!
//! A graph of 100,000 nodes held 100,000 `Layer`s of 176 bytes, each with its name copied out of
//! the graph: ~20 MiB, the peak of `mem` (issue 23). Its compact rows take 40 bytes each and
//! read their names from the graph's own names buffer.

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

/// One row, borrowed from where it is kept: a held [`Layer`] ([`Layer::view`]) or a graph's
/// compact row. Reading a row copies nothing.
#[derive(Clone, Copy, Debug)]
pub struct LayerRef<'a> {
    pub name: &'a str,
    pub op: &'a Sym,
    pub output_shapes: OutputShapes<'a>,
    pub params: u64,
    pub param_bytes: u64,
    pub buffers: u64,
    pub buffer_bytes: u64,
    pub activation_bytes: Option<&'a Dim>,
    pub macs: Option<&'a Dim>,
    pub folded: bool,
    pub saved_bytes: Option<u64>,
    pub gradient_bytes: Option<u64>,
    pub depth: u32,
    pub branch: Option<&'a str>,
    pub skipped: bool,
}

impl LayerRef<'_> {
    /// The row as an owned `Layer`.
    pub fn to_layer(&self) -> Layer {
        Layer {
            name: self.name.to_string(),
            op: self.op.clone(),
            output_shapes: self.output_shapes.to_vec(),
            params: self.params,
            param_bytes: self.param_bytes,
            buffers: self.buffers,
            buffer_bytes: self.buffer_bytes,
            activation_bytes: self.activation_bytes.cloned(),
            macs: self.macs.cloned(),
            folded: self.folded,
            saved_bytes: self.saved_bytes,
            gradient_bytes: self.gradient_bytes,
            depth: self.depth,
            branch: self.branch.map(Into::into),
            skipped: self.skipped,
        }
    }
}

impl Layer {
    /// The row, borrowed.
    #[inline]
    pub fn view(&self) -> LayerRef<'_> {
        LayerRef {
            name: &self.name,
            op: &self.op,
            output_shapes: OutputShapes::listed(&self.output_shapes),
            params: self.params,
            param_bytes: self.param_bytes,
            buffers: self.buffers,
            buffer_bytes: self.buffer_bytes,
            activation_bytes: self.activation_bytes.as_ref(),
            macs: self.macs.as_ref(),
            folded: self.folded,
            saved_bytes: self.saved_bytes,
            gradient_bytes: self.gradient_bytes,
            depth: self.depth,
            branch: self.branch.as_deref(),
            skipped: self.skipped,
        }
    }
}

/// A row's outputs' shapes (one per output its node names; `None` where not even the rank is
/// known), borrowed: from a list of them, or by value id from the inference's own shapes (a
/// graph's compact rows, which take them over instead of copying: [`Layers::take_shapes`]).
#[derive(Clone, Copy)]
pub struct OutputShapes<'a> {
    /// The row's outputs' value ids, each an index into `shapes`; `None`: `shapes` is the row's.
    slots: Option<&'a [u32]>,
    shapes: &'a [Option<Box<[Dim]>>],
}

impl<'a> OutputShapes<'a> {
    /// The shapes of a list, in order.
    pub fn listed(shapes: &'a [Option<Box<[Dim]>>]) -> OutputShapes<'a> {
        OutputShapes {
            slots: None,
            shapes,
        }
    }

    pub fn len(self) -> usize {
        self.slots.map_or(self.shapes.len(), <[u32]>::len)
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Output `k`'s shape: `None` past the last output, `Some(None)` for an unknown rank.
    #[inline]
    pub fn get(self, k: usize) -> Option<Option<&'a [Dim]>> {
        let slot = match self.slots {
            None => k,
            Some(slots) => *slots.get(k)? as usize,
        };
        self.shapes.get(slot).map(Option::as_deref)
    }

    /// In output order.
    pub fn iter(self) -> impl ExactSizeIterator<Item = Option<&'a [Dim]>> + Clone + 'a {
        (0..self.len()).map(move |k| self.get(k).flatten())
    }

    /// As an owned list.
    pub fn to_vec(self) -> Vec<Option<Box<[Dim]>>> {
        self.iter().map(|s| s.map(Box::from)).collect()
    }
}

impl std::fmt::Debug for OutputShapes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
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

    /// Row `i` (`i < len()`).
    #[inline]
    pub fn get(&self, i: usize) -> LayerRef<'_> {
        match &self.0 {
            Repr::Held(v) => v[i].view(),
            Repr::Graph(g) => g.get(i),
        }
    }

    /// Every row, in order.
    pub fn iter(&self) -> impl Iterator<Item = LayerRef<'_>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Every row, as owned `Layer`s.
    pub fn to_vec(&self) -> Vec<Layer> {
        self.iter().map(|l| l.to_layer()).collect()
    }

    /// The rows as `Layer`s, made where they are compact.
    pub(super) fn into_held(self) -> Vec<Layer> {
        match self.0 {
            Repr::Held(v) => v,
            Repr::Graph(_) => self.to_vec(),
        }
    }

    /// Gives the rows of nodes their output shapes: `shapes[v]` is value `v`'s shape (the
    /// inference's facts turned into their shapes in place), `rows[n]` node `n`'s row, if it has
    /// one (in node order), and `outputs(n)` node `n`'s outputs. A graph's compact rows keep the
    /// shapes as they are given and read them by value id, one 32-bit id per output: no shape is
    /// moved or copied, and no list of them is made beside the facts (1.6 MB on a graph of
    /// 100,000 nodes, at the peak of `mem`). Held rows take their outputs' shapes out of them (a
    /// value a node lists twice is taken once, then copied).
    pub(super) fn take_shapes<'g>(
        &mut self,
        rows: &RowOf,
        outputs: impl Fn(usize) -> crate::ir::Ports<'g>,
        mut shapes: Vec<Option<Box<[Dim]>>>,
    ) {
        match &mut self.0 {
            Repr::Held(v) => {
                for (n, i) in rows.iter().enumerate() {
                    let Some(l) = i.and_then(|i| v.get_mut(i)) else {
                        continue;
                    };
                    let outputs = outputs(n);
                    let mut out = Vec::with_capacity(outputs.len());
                    for (k, o) in outputs.values().enumerate() {
                        let shape = match outputs.values().take(k).position(|w| w == o) {
                            Some(j) => out.get(j).cloned().flatten(),
                            None => shapes.get_mut(o).and_then(Option::take),
                        };
                        out.push(shape);
                    }
                    l.output_shapes = out;
                }
            }
            Repr::Graph(g) => {
                let count = (rows.iter().enumerate())
                    .filter(|(_, i)| i.is_some())
                    .map(|(n, _)| outputs(n).len())
                    .fold(0usize, usize::saturating_add);
                let mut slots = Vec::with_capacity(count);
                for (n, i) in rows.iter().enumerate() {
                    let Some(row) = i.and_then(|i| g.rows.get_mut(i)) else {
                        continue;
                    };
                    // a port's value id fits 32 bits (`crate::ir::Ports`)
                    slots.extend(outputs(n).values().map(|v| v as u32));
                    row.shapes_end = u32::try_from(slots.len()).unwrap_or(u32::MAX);
                }
                g.slots = Some(slots);
                g.shapes = shapes;
            }
        }
    }
}

/// Each node's row among the layers (`None`: the node has none), 4 bytes a node: an
/// `Option<usize>` took 16, 1.6 MB of a graph of 100,000 nodes held to the analysis's end.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct RowOf(Vec<u32>);

/// [`RowOf`]'s mark for a node without a row.
const NO_ROW: u32 = u32::MAX;

impl RowOf {
    pub(super) fn with_capacity(nodes: usize) -> RowOf {
        RowOf(Vec::with_capacity(nodes))
    }

    /// The next node's row (a row index is below 2^32 - 1: a row takes over 100 bytes, so 4 G of
    /// them are not held).
    pub(super) fn push(&mut self, row: Option<usize>) {
        self.0.push(row.map_or(NO_ROW, Self::index));
    }

    fn index(row: usize) -> u32 {
        u32::try_from(row)
            .ok()
            .filter(|&r| r != NO_ROW)
            .expect("a row index below 2^32 - 1")
    }

    /// Node `n`'s row.
    pub(super) fn get(&self, n: usize) -> Option<usize> {
        self.0.get(n).filter(|&&r| r != NO_ROW).map(|&r| r as usize)
    }

    /// Moves node `n`'s row (a node that has one, or none).
    pub(super) fn set(&mut self, n: usize, row: usize) {
        if let Some(r) = self.0.get_mut(n) {
            *r = Self::index(row);
        }
    }

    /// Each node's row, in node order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Option<usize>> + '_ {
        self.0.iter().map(|&r| (r != NO_ROW).then_some(r as usize))
    }
}

/// What a report's builder changes in its rows.
impl Layers {
    /// Row `i`'s activation bytes, to change.
    pub(super) fn activation_mut(&mut self, i: usize) -> Option<&mut Option<Dim>> {
        match &mut self.0 {
            Repr::Graph(g) => g.rows.get_mut(i).map(|r| &mut r.activation_bytes),
            Repr::Held(v) => v.get_mut(i).map(|l| &mut l.activation_bytes),
        }
    }

    /// Room for `rows` rows' stored-tensor sizes ([`Layers::stored_mut`]), made once: the list grew
    /// by doubling, and with the copies it left behind it took 2.9 MB on a graph of 100,000 nodes
    /// (1.5 MB of sizes).
    pub(super) fn reserve_stored(&mut self, rows: usize) {
        if let Repr::Graph(g) = &mut self.0 {
            let rows = rows.min(g.rows.len()).saturating_sub(g.stored.len());
            g.stored.reserve_exact(rows);
        }
    }

    /// Row `i`'s parameters, their bytes, buffers and their bytes, to add to.
    pub(super) fn stored_mut(&mut self, i: usize) -> Option<StoredMut<'_>> {
        match &mut self.0 {
            Repr::Graph(g) => {
                let r = g.rows.get_mut(i)?;
                if r.stored().is_none() {
                    // at most one entry per row, and `GraphRows::new` checked that the rows fit
                    r.flags |= u32::try_from(g.stored.len()).ok()? + 1;
                    g.stored.push(NO_STORED);
                }
                let [a, b, c, d] = g.stored.get_mut(r.stored()?)?;
                Some([a, b, c, d])
            }
            Repr::Held(v) => {
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
    pub(super) fn set_train(&mut self, row_of: &RowOf, per_node: &[(u64, u64)]) {
        match &mut self.0 {
            Repr::Graph(g) => {
                g.train = vec![(0, 0); g.rows.len()];
                for (i, &t) in row_of.iter().zip(per_node) {
                    if let Some(slot) = i.and_then(|i| g.train.get_mut(i)) {
                        *slot = t;
                    }
                }
            }
            Repr::Held(v) => {
                for (i, &(saved, grads)) in row_of.iter().zip(per_node) {
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
    /// Every row's outputs' shapes, row after row (each row's end is its `shapes_end`); or, with
    /// `slots`, the shapes by value id.
    shapes: Vec<Option<Box<[Dim]>>>,
    /// Every row's outputs' value ids, row after row (each row's end is its `shapes_end`), when
    /// the rows took the inference's shapes over ([`Layers::take_shapes`]).
    slots: Option<Vec<u32>>,
    /// Parameters, their bytes, buffers and their bytes, of the rows that have stored tensors.
    stored: Vec<[u64; 4]>,
    /// With `--train`: each row's saved and gradient bytes.
    train: Vec<(u64, u64)>,
}

/// One node's row. 40 bytes (a `Dim` is one word).
#[derive(Clone, Debug)]
struct Row {
    name: Name,
    op: Sym,
    activation_bytes: Option<Dim>,
    macs: Option<Dim>,
    /// Where its shapes end in [`GraphRows::shapes`], or in [`GraphRows::slots`] when there are
    /// some (they start where the row before ends).
    shapes_end: u32,
    /// Whether it is folded (the top bit), and 1 + its index in [`GraphRows::stored`] (0: none).
    flags: u32,
}

/// [`Row::flags`]' bit for a folded row.
const FOLDED: u32 = 1 << 31;

impl Row {
    fn folded(&self) -> bool {
        self.flags & FOLDED != 0
    }

    /// Its index in [`GraphRows::stored`].
    fn stored(&self) -> Option<usize> {
        (self.flags & !FOLDED).checked_sub(1).map(|k| k as usize)
    }
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
    /// Room for `rows` rows of a graph whose names are `names`, and for their `outputs` outputs'
    /// shapes when they come with the rows (`shapes_now`; not when the rows take the inference's
    /// later: [`Layers::take_shapes`]); `None` when a graph this large (2^31 rows, or 2^32
    /// outputs, or more) is to be held as `Layer`s.
    pub(super) fn new(
        names: Arc<String>,
        rows: usize,
        outputs: usize,
        shapes_now: bool,
    ) -> Option<GraphRows> {
        // an index below `FOLDED` per row, and a `u32` end per row's shapes
        if rows >= FOLDED as usize || u32::try_from(outputs).is_err() {
            return None;
        }
        let rows = Vec::with_capacity(rows);
        crate::util::pages::advise_huge(&rows);
        // a slot per output, made once: grown by doubling, the list of a graph of 100,000 nodes
        // (2.4 MB) was copied ~17 times, the copies left as dirty pages at the peak of `mem`
        let shapes = Vec::with_capacity(if shapes_now { outputs } else { 0 });
        crate::util::pages::advise_huge(&shapes);
        Some(GraphRows {
            names,
            rows,
            shapes,
            ..GraphRows::default()
        })
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Adds a row; `shapes`: its outputs' shapes now, or later ([`Layers::take_shapes`]).
    pub(super) fn push(
        &mut self,
        name: Name,
        parts: RowParts,
        shapes: impl Iterator<Item = Option<Box<[Dim]>>>,
    ) {
        self.shapes.extend(shapes);
        let shapes_end = self.shapes_end();
        self.rows.push(Row {
            name,
            op: parts.op,
            activation_bytes: parts.activation_bytes,
            macs: parts.macs,
            shapes_end,
            flags: if parts.folded { FOLDED } else { 0 },
        });
    }

    fn shapes_end(&self) -> u32 {
        // `new` checked that the outputs fit
        u32::try_from(self.shapes.len()).unwrap_or(u32::MAX)
    }

    #[inline]
    fn stored(&self, r: &Row) -> &[u64; 4] {
        r.stored()
            .and_then(|k| self.stored.get(k))
            .unwrap_or(&NO_STORED)
    }

    /// Row `i`'s output shapes.
    #[inline]
    fn shapes_of(&self, i: usize) -> OutputShapes<'_> {
        let start = i
            .checked_sub(1)
            .map_or(0, |p| self.rows[p].shapes_end as usize);
        let span = start..self.rows[i].shapes_end as usize;
        match &self.slots {
            None => OutputShapes::listed(self.shapes.get(span).unwrap_or_default()),
            Some(slots) => OutputShapes {
                slots: Some(slots.get(span).unwrap_or_default()),
                shapes: &self.shapes,
            },
        }
    }

    /// Row `i`, borrowed.
    #[inline]
    fn get(&self, i: usize) -> LayerRef<'_> {
        let r = &self.rows[i];
        let [params, param_bytes, buffers, buffer_bytes] = *self.stored(r);
        let (saved_bytes, gradient_bytes) = match self.train.get(i) {
            Some(&(s, g)) => (Some(s), Some(g)),
            None => (None, None),
        };
        LayerRef {
            name: r.name.read(&self.names),
            op: &r.op,
            output_shapes: self.shapes_of(i),
            params,
            param_bytes,
            buffers,
            buffer_bytes,
            activation_bytes: r.activation_bytes.as_ref(),
            macs: r.macs.as_ref(),
            folded: r.folded(),
            saved_bytes,
            gradient_bytes,
            depth: 0,
            branch: None,
            skipped: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_40_bytes() {
        assert!(
            std::mem::size_of::<Row>() <= 40,
            "{}",
            std::mem::size_of::<Row>()
        );
    }
}
