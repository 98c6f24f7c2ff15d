//! The one text-table renderer behind every table nnlint prints (`mem`, `fit`, `rewrite`, `rules`)
//! and the label/value/detail summaries under them: columns two spaces apart, each left- or
//! right-aligned, widths counted in characters, no trailing spaces; and the same cells as a
//! Markdown table.

/// How a column aligns its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table: optional headers, one alignment per column, rows of text cells.
///
/// The cells are held in one string (`util::lists::Texts`), and the columns' widths
/// are kept as rows come: a table of 100,000 rows is three allocations, not 800,000 strings, and
/// is written line by line ([`Table::write_fitting`]) without becoming a second whole text.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Option<Vec<String>>,
    align: Vec<Align>,
    /// Every cell's text, one after another.
    cells: super::lists::Texts,
    /// Where each row's cells start in `cells`.
    rows: Vec<usize>,
    /// Each column's width in characters: the widest of its header and cells so far.
    widths: Vec<usize>,
    /// The column to shorten (from its end, with `…`) when the table must fit a width.
    squeeze: Option<usize>,
    /// Columns that may be left out to fit a width, the first given up first.
    optional: Vec<usize>,
}

/// What the squeezed column keeps while other columns can still be left out: a layer name cut
/// shorter than this no longer says which layer it is.
const COMFORTABLE: usize = 28;

/// What it keeps at the least.
const NARROWEST: usize = 8;

/// Where the rows of a table go as they are made: kept ([`Table`]), measured ([`Measure`]) or
/// written out ([`Stream`]). Code that makes rows writes them to any of these, so that a table of
/// 100,000 rows can be measured, then written, without being held.
pub trait Cells {
    /// Starts a row; its cells follow.
    fn start_row(&mut self);
    /// Appends a cell that `write` writes in place.
    fn cell_with(&mut self, write: impl FnOnce(&mut String));
    /// Appends a cell.
    fn cell(&mut self, text: &str) {
        self.cell_with(|s| s.push_str(text));
    }
}

impl Cells for Table {
    fn start_row(&mut self) {
        Table::start_row(self);
    }
    fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        Table::cell_with(self, write);
    }
}

/// A table's columns measured from rows that are not kept ([`Table::measure`]).
pub struct Measure<'t> {
    widths: &'t mut Vec<usize>,
    column: usize,
    scratch: String,
}

impl Cells for Measure<'_> {
    fn start_row(&mut self) {
        self.column = 0;
    }
    fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        self.scratch.clear();
        write(&mut self.scratch);
        if let Some(w) = self.widths.get_mut(self.column) {
            *w = (*w).max(chars(&self.scratch));
        }
        self.column += 1;
    }
}

/// Rows made on demand by their index ([`Table::fill_rows`], [`Table::measure_rows`],
/// [`Table::stream_rows`]): a large table is filled, or measured then written, from them on two
/// threads.
pub trait Rows: Sync {
    /// How many rows there are.
    fn count(&self) -> usize;
    /// Gives rows `range` to `t`, in order: the same rows whatever the ranges they are asked in.
    fn fill<C: Cells>(&self, range: std::ops::Range<usize>, t: &mut C);
}

/// From this many rows a table's rows are measured and written on two threads (a thread costs
/// ~50 µs to start; a row ~1.4 µs to format).
const PARALLEL_ROWS: usize = 4096;

/// The rows a second thread formats at a time, ahead of the lines written: ~0.5 MiB of text.
const CHUNK_ROWS: usize = 4096;

/// Lines made from rows as they come, in given widths, into a buffer.
struct Lines<'t> {
    table: &'t Table,
    widths: Vec<Option<usize>>,
    /// The row being made; made into a line when the next one starts, or at the end.
    row: super::lists::Texts,
    started: bool,
    buf: String,
}

impl Lines<'_> {
    /// Makes the row made so far into a line.
    fn end_row(&mut self) {
        if self.started {
            self.table.line(
                &mut self.buf,
                (0..self.row.len()).map(|i| self.row.get(i)),
                &self.widths,
            );
        }
        self.row.clear();
        self.started = false;
    }
}

impl Cells for Lines<'_> {
    fn start_row(&mut self) {
        self.end_row();
        self.started = true;
    }
    fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        self.row.push_with(write);
    }
}

/// A table written line by line as its rows come ([`Table::stream`]), in the widths measured
/// before. The first error writing stops the writing; [`Stream::finish`] returns it.
pub struct Stream<'t, 'o> {
    lines: Lines<'t>,
    left_out: Vec<usize>,
    max: Option<usize>,
    out: &'o mut dyn std::io::Write,
    error: Option<std::io::Error>,
}

impl Stream<'_, '_> {
    /// Writes the row made so far, and the buffer when it is full (or `last`).
    fn flush_row(&mut self, last: bool) {
        // after a failed write the row is dropped, not made into a line
        if self.error.is_some() {
            self.lines.started = false;
        }
        self.lines.end_row();
        self.write_buf(last);
    }

    /// Writes the buffer when it is full (or `last`).
    fn write_buf(&mut self, last: bool) {
        let buf = &mut self.lines.buf;
        if self.error.is_none() && (last || buf.len() >= 1 << 16) {
            if let Err(e) = self.out.write_all(buf.as_bytes()) {
                self.error = Some(e);
            }
            buf.clear();
        }
    }

    /// Appends lines made elsewhere (in these widths), after the rows given so far.
    fn put_lines(&mut self, text: &str) {
        self.flush_row(false);
        if self.error.is_none() {
            self.lines.buf.push_str(text);
            self.write_buf(false);
        }
    }

    /// Writes the last row and what follows the table.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.flush_row(false);
        self.lines
            .table
            .left_out_note(&mut self.lines.buf, self.max, &self.left_out);
        self.flush_row(true);
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Cells for Stream<'_, '_> {
    fn start_row(&mut self) {
        self.flush_row(false);
        self.lines.started = true;
    }
    fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        // after a failed write (a closed pipe) the rest is not formatted
        if self.error.is_none() {
            self.lines.row.push_with(write);
        }
    }
}

/// Runs `here` on rows `0..n / 2` on this thread and `there` on the rest on a second; `false`, with
/// neither run, below [`PARALLEL_ROWS`] rows or when a second thread cannot start.
fn halves(
    n: usize,
    here: impl FnOnce(std::ops::Range<usize>),
    there: impl FnOnce(std::ops::Range<usize>) + Send,
) -> bool {
    if n < PARALLEL_ROWS {
        return false;
    }
    let mid = n / 2;
    std::thread::scope(|scope| {
        let Ok(second) = std::thread::Builder::new().spawn_scoped(scope, move || there(mid..n))
        else {
            return false;
        };
        here(0..mid);
        join(second);
        true
    })
}

/// Writes the lines of rows `0..n` through `s` in chunks: every other chunk made on a second thread
/// by `make` (into a buffer of lines, ahead of the writing), the others made and written by `write`
/// on this one, all in order. `false`, with nothing written, when the second thread cannot start.
fn alternate<'t>(
    s: &mut Stream<'t, '_>,
    n: usize,
    make: impl Fn(std::ops::Range<usize>, &mut Lines<'t>) + Sync,
    mut write: impl FnMut(std::ops::Range<usize>, &mut Stream<'t, '_>),
) -> bool {
    let chunks = n.div_ceil(CHUNK_ROWS);
    let chunk = |k: usize| k * CHUNK_ROWS..((k + 1) * CHUNK_ROWS).min(n);
    let mut lines = Lines {
        table: s.lines.table,
        widths: s.lines.widths.clone(),
        row: super::lists::Texts::default(),
        started: false,
        buf: String::new(),
    };
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(1);
        let make = &make;
        let second = std::thread::Builder::new().spawn_scoped(scope, move || {
            for k in (1..chunks).step_by(2) {
                make(chunk(k), &mut lines);
                // the writer stopped (a failed write): nothing more is wanted
                if tx.send(std::mem::take(&mut lines.buf)).is_err() {
                    break;
                }
            }
        });
        let Ok(second) = second else {
            return false;
        };
        for k in 0..chunks {
            if s.error.is_some() {
                break;
            }
            if k % 2 == 0 {
                write(chunk(k), s);
            } else {
                match rx.recv() {
                    Ok(text) => s.put_lines(&text),
                    // the second thread ended early: it panicked (raised by the join)
                    Err(_) => break,
                }
            }
        }
        drop(rx);
        join(second);
        true
    })
}

/// Waits for a scoped thread; its panic is this thread's.
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match h.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A cell's width in characters (ASCII, the common case: its bytes).
fn chars(c: &str) -> usize {
    if c.is_ascii() {
        c.len()
    } else {
        c.chars().count()
    }
}

impl Table {
    /// A table with a header line and a rule under it.
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        let (headers, align): (Vec<String>, Vec<Align>) =
            columns.into_iter().map(|(h, a)| (h.into(), a)).unzip();
        Table {
            widths: headers.iter().map(|h| chars(h)).collect(),
            headers: Some(headers),
            align,
            ..Table::default()
        }
    }

    /// A table without headers (aligned summary lines).
    pub fn plain(align: &[Align]) -> Table {
        Table {
            align: align.to_vec(),
            widths: vec![0; align.len()],
            ..Table::default()
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.start_row();
        for c in &row {
            self.cell(c);
        }
    }

    /// Room for `rows` more rows of `text` more bytes of cells in all: a table that grows by
    /// doubling copies its cells ~20 times on the way to 100,000 rows, into fresh memory each
    /// time. An estimate; more rows or text still fit.
    pub fn reserve(&mut self, rows: usize, text: usize) {
        self.rows.reserve(rows);
        self.cells
            .reserve(rows.saturating_mul(self.align.len()), text);
    }

    /// Starts a row; its cells follow ([`Table::cell`], [`Table::cell_with`]).
    pub fn start_row(&mut self) {
        self.rows.push(self.cells.len());
    }

    /// Appends a cell to the row being written.
    pub fn cell(&mut self, text: &str) {
        self.cell_with(|s| s.push_str(text));
    }

    /// Appends a cell that `write` writes in place (no string of its own).
    pub fn cell_with(&mut self, write: impl FnOnce(&mut String)) {
        let column = self.cells.len() - self.rows.last().copied().unwrap_or(0);
        let width = chars(self.cells.push_with(write));
        if let Some(w) = self.widths.get_mut(column) {
            *w = (*w).max(width);
        }
    }

    /// The cells of row `r`.
    fn row(&self, r: usize) -> impl Iterator<Item = &str> + '_ {
        let first = self.rows[r];
        let last = self.rows.get(r + 1).copied().unwrap_or(self.cells.len());
        (first..last).map(move |i| self.cells.get(i))
    }

    /// Which column gives up width first when [`Table::render_within`] must shorten the table.
    pub fn squeeze_column(mut self, column: usize) -> Table {
        self.squeeze = Some(column);
        self
    }

    /// Columns [`Table::render_within`] may leave out, in the order they are given up, before the
    /// squeezed column is cut below a readable width.
    pub fn optional_columns(mut self, columns: &[usize]) -> Table {
        self.optional = columns.to_vec();
        self
    }

    /// Appends one aligned line to `out`: cells padded to `width` (truncated with `…` when
    /// longer), trailing blanks trimmed. Writes in place: a table of 100k rows allocates nothing
    /// per cell.
    fn line<'c>(
        &self,
        out: &mut String,
        cells: impl Iterator<Item = &'c str>,
        width: &[Option<usize>],
    ) {
        const SPACES: &str = "                                                                ";
        let spaces = |out: &mut String, mut n: usize| {
            while n > 0 {
                let k = n.min(SPACES.len());
                out.push_str(&SPACES[..k]);
                n -= k;
            }
        };
        let start = out.len();
        let mut first = true;
        // the blanks owed before the next cell: the gap between columns, and a left-aligned
        // cell's padding (written with the next cell's, in one copy; after the last, never)
        let mut owed = 0;
        for (i, c) in cells.enumerate().take(width.len()) {
            // a column left out to fit the width
            let Some(w) = width[i] else {
                continue;
            };
            if !first {
                owed += 2;
            }
            first = false;
            let len = chars(c);
            let (shown, shown_len) = if len > w {
                let cut = c
                    .char_indices()
                    .nth(w.saturating_sub(1))
                    .map_or(c.len(), |(i, _)| i);
                (&c[..cut], w.saturating_sub(1) + 1)
            } else {
                (c, len)
            };
            let truncated = len > w;
            let pad = w.saturating_sub(shown_len);
            let left = self.align[i] == Align::Left;
            if !left {
                owed += pad;
            }
            spaces(out, owed);
            out.push_str(shown);
            if truncated {
                out.push('…');
            }
            owed = if left { pad } else { 0 };
        }
        let trimmed = out[start..].trim_end().len();
        out.truncate(start + trimmed);
        out.push('\n');
    }

    /// Aligned text.
    pub fn render(&self) -> String {
        self.render_fitting(None)
    }

    /// Aligned text no wider than `max` characters where it can be: the squeezed column gives way
    /// down to a readable width, then the optional columns are left out in their order (a last
    /// line names them; a wider terminal, `COLUMNS` or a pipe shows them), then the squeezed
    /// column goes down to 8 characters. The other columns, the numbers, are never cut.
    pub fn render_within(&self, max: usize) -> String {
        self.render_fitting(Some(max))
    }

    /// [`Table::render_within`] a width when there is one (a terminal), else [`Table::render`].
    pub fn render_fitting(&self, width: Option<usize>) -> String {
        super::written(|out| self.write_fitting(width, out))
    }

    /// [`Table::render_fitting`], written to `out` line by line.
    pub fn write_fitting(
        &self,
        width: Option<usize>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let mut s = self.stream(width, out);
        // the held rows' cells go to the lines as they are, not through the stream's row
        let write = |range, s: &mut Stream| self.write_held(range, s);
        let n = self.rows.len();
        let parallel = n >= PARALLEL_ROWS
            && alternate(
                &mut s,
                n,
                |range, lines| {
                    for r in range {
                        self.line(&mut lines.buf, self.row(r), &lines.widths);
                    }
                },
                write,
            );
        if !parallel {
            write(0..n, &mut s);
        }
        s.finish()
    }

    /// Measures rows given after the ones this table holds (a [`Table::stream`] of them follows):
    /// they widen its columns, and are not kept.
    pub fn measure(&mut self) -> Measure<'_> {
        Measure {
            widths: &mut self.widths,
            column: 0,
            scratch: String::new(),
        }
    }

    /// Writes the table to `out` as [`Table::write_fitting`] does: its headers and rows now, then
    /// the rows given to the stream as they come, in the columns' widths as they are (the rows to
    /// come measured first, [`Table::measure`]), then [`Stream::finish`] the note on columns left
    /// out.
    pub fn stream<'t, 'o>(
        &'t self,
        width: Option<usize>,
        out: &'o mut dyn std::io::Write,
    ) -> Stream<'t, 'o> {
        let (widths, left_out) = match width {
            Some(max) => self.fit(max),
            None => (self.widths.iter().copied().map(Some).collect(), Vec::new()),
        };
        // lines go out through one buffer, flushed every 64 KiB
        let mut buf = String::with_capacity(1 << 16);
        if let Some(h) = &self.headers {
            self.line(&mut buf, h.iter().map(String::as_str), &widths);
            let rule: Vec<String> = widths.iter().map(|n| "-".repeat(n.unwrap_or(0))).collect();
            self.line(&mut buf, rule.iter().map(String::as_str), &widths);
        }
        Stream {
            lines: Lines {
                table: self,
                widths,
                row: super::lists::Texts::default(),
                started: false,
                buf,
            },
            left_out,
            max: width,
            out,
            error: None,
        }
    }

    /// Appends `rows` as they are given to it; a large table's in two halves, on two threads.
    pub fn fill_rows(&mut self, rows: &impl Rows) {
        let n = rows.count();
        let mut second = Table {
            align: self.align.clone(),
            widths: vec![0; self.widths.len()],
            ..Table::default()
        };
        // half the room this one was given (the rest of its rows, grown by doubling, were copied
        // ~10 times)
        if n >= PARALLEL_ROWS {
            let (cells, text) = self.cells.spare();
            second.rows.reserve(n - n / 2);
            second.cells.reserve(cells / 2, text / 2);
        }
        if halves(n, |r| rows.fill(r, self), |r| rows.fill(r, &mut second)) {
            let base = self.cells.len();
            self.rows.extend(second.rows.iter().map(|&r| base + r));
            self.cells.append(&second.cells);
            self.widen(&second.widths);
        } else {
            rows.fill(0..n, self);
        }
    }

    /// Measures `rows` as [`Table::measure`] does; a large table's in two halves, on two threads.
    pub fn measure_rows(&mut self, rows: &impl Rows) {
        let n = rows.count();
        let mut widths = self.widths.clone();
        let mut second = Measure {
            widths: &mut widths,
            column: 0,
            scratch: String::new(),
        };
        if halves(
            n,
            |r| rows.fill(r, &mut self.measure()),
            |r| rows.fill(r, &mut second),
        ) {
            self.widen(&widths);
        } else {
            rows.fill(0..n, &mut self.measure());
        }
    }

    /// Each column as wide as it is or as `widths` says, the wider.
    fn widen(&mut self, widths: &[usize]) {
        for (w, &o) in self.widths.iter_mut().zip(widths) {
            *w = (*w).max(o);
        }
    }

    /// Writes the lines of held rows `range` through `s`, until a write fails.
    fn write_held(&self, range: std::ops::Range<usize>, s: &mut Stream) {
        for r in range {
            if s.error.is_some() {
                break;
            }
            self.line(&mut s.lines.buf, self.row(r), &s.lines.widths);
            s.write_buf(false);
        }
    }

    /// Writes the table as [`Table::stream`] does, then `rows` (measured before,
    /// [`Table::measure_rows`]): a large table's every other chunk of rows formatted on a second
    /// thread while this one formats and writes the others, the lines in order.
    pub fn stream_rows(
        &self,
        width: Option<usize>,
        out: &mut dyn std::io::Write,
        rows: &impl Rows,
    ) -> std::io::Result<()> {
        let mut s = self.stream(width, out);
        self.write_held(0..self.rows.len(), &mut s);
        let n = rows.count();
        let parallel = n >= PARALLEL_ROWS
            && alternate(
                &mut s,
                n,
                |range, lines| {
                    rows.fill(range, lines);
                    lines.end_row();
                },
                |range, s| rows.fill(range, s),
            );
        if !parallel {
            rows.fill(0..n, &mut s);
        }
        s.finish()
    }

    /// The last line of a table that left columns out to fit `max` characters: which.
    fn left_out_note(&self, buf: &mut String, max: Option<usize>, left_out: &[usize]) {
        if let Some(max) = max.filter(|_| !left_out.is_empty()) {
            let names: Vec<&str> = left_out
                .iter()
                .filter_map(|&c| self.headers.as_ref().and_then(|h| h.get(c)))
                .map(String::as_str)
                .collect();
            buf.push_str(&format!(
                "(left out at {max} columns: {})\n",
                names.join(", ")
            ));
        }
    }

    /// The widths that fit `max` characters (see [`Table::render_within`]), `None` for a column
    /// left out, and the columns left out in their order.
    fn fit(&self, max: usize) -> (Vec<Option<usize>>, Vec<usize>) {
        let natural = &self.widths;
        let mut w: Vec<Option<usize>> = natural.iter().copied().map(Some).collect();
        let total = |w: &[Option<usize>]| {
            let shown: Vec<usize> = w.iter().flatten().copied().collect();
            shown.iter().sum::<usize>() + 2 * shown.len().saturating_sub(1)
        };
        let squeeze = self.squeeze.filter(|&c| c < w.len());
        // the squeezed column down to `floor`, as far as the excess asks
        let cut = |w: &mut Vec<Option<usize>>, floor: usize| {
            if let Some(col) = squeeze {
                let excess = total(w).saturating_sub(max);
                let now = w[col].unwrap_or(0);
                w[col] = Some(now.saturating_sub(excess).max(floor.min(natural[col])));
            }
        };
        cut(&mut w, COMFORTABLE);
        let mut left_out = Vec::new();
        let n = w.len();
        for &col in self.optional.iter().filter(|&&c| c < n) {
            if total(&w) <= max {
                break;
            }
            w[col] = None;
            left_out.push(col);
            // what the column gave back goes to the squeezed one first
            if let Some(s) = squeeze {
                w[s] = Some(natural[s]);
            }
            cut(&mut w, COMFORTABLE);
        }
        cut(&mut w, NARROWEST);
        (w, left_out)
    }

    /// A Markdown table (cells as given: the caller escapes and quotes them).
    pub fn render_markdown(&self) -> String {
        let mut out = String::new();
        let headers = self
            .headers
            .clone()
            .unwrap_or_else(|| vec![String::new(); self.align.len()]);
        out.push_str(&format!("| {} |\n", headers.join(" | ")));
        let marks: Vec<&str> = self
            .align
            .iter()
            .map(|a| match a {
                Align::Left => "---",
                Align::Right => "---:",
            })
            .collect();
        out.push_str(&format!("|{}|\n", marks.join("|")));
        for r in 0..self.rows.len() {
            let row: Vec<&str> = self.row(r).collect();
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }

    /// A copy with every cell passed through `map` (the Markdown table quotes and escapes).
    pub fn map_cells(&self, map: impl Fn(usize, &str) -> String) -> Table {
        let mut t = Table {
            headers: self.headers.clone(),
            align: self.align.clone(),
            widths: self.headers.as_ref().map_or_else(
                || vec![0; self.align.len()],
                |h| h.iter().map(|h| chars(h)).collect(),
            ),
            squeeze: self.squeeze,
            optional: self.optional.clone(),
            ..Table::default()
        };
        for r in 0..self.rows.len() {
            t.start_row();
            for (i, c) in self.row(r).enumerate() {
                t.cell(&map(i, c));
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_counts_characters_and_trims() {
        let mut t = Table::new([("name", Align::Left), ("bytes", Align::Right)]);
        t.push(vec!["a·b".into(), "1 KiB".into()]);
        t.push(vec!["longer".into(), "2".into()]);
        assert_eq!(
            t.render(),
            "name    bytes\n------  -----\na·b     1 KiB\nlonger      2\n"
        );
    }

    #[test]
    fn plain_tables_have_no_header() {
        let mut t = Table::plain(&[Align::Left, Align::Right, Align::Left]);
        t.push(vec!["params".into(), "11.7M".into(), "44.6 MiB".into()]);
        t.push(vec!["MACs".into(), "1.8G".into(), String::new()]);
        assert_eq!(t.render(), "params  11.7M  44.6 MiB\nMACs     1.8G\n");
    }

    #[test]
    fn squeezing_cuts_one_column_only() {
        let mut t = Table::new([("layer", Align::Left), ("MACs", Align::Right)]).squeeze_column(0);
        t.push(vec!["/a/very/long/layer/name/Conv".into(), "118M".into()]);
        let s = t.render_within(20);
        assert!(s.lines().all(|l| l.chars().count() <= 20), "{s}");
        assert!(s.contains("118M") && s.contains('…'), "{s}");
    }

    #[test]
    fn squeezing_cuts_at_characters_not_bytes() {
        let mut t = Table::new([("layer", Align::Left), ("n", Align::Right)]).squeeze_column(0);
        t.push(vec!["αβγδεζηθικλμνξοπ".into(), "1".into()]);
        let s = t.render_within(11);
        assert_eq!(s.lines().nth(2), Some("αβγδεζη…  1"), "{s}");
    }

    #[test]
    fn optional_columns_go_before_names_are_cut_short() {
        let mut t = Table::new([
            ("layer", Align::Left),
            ("op", Align::Left),
            ("params", Align::Right),
            ("%params", Align::Right),
        ])
        .squeeze_column(0)
        .optional_columns(&[3, 1]);
        let name = "/features/features.12/block/conv/Conv";
        t.push(vec![
            name.into(),
            "Conv".into(),
            "2.36M".into(),
            "17.1%".into(),
        ]);
        // room for the whole table
        assert!(t.render_within(80).contains(name));
        // the name at a readable width, then %params left out, said in a last line
        let s = t.render_within(45);
        assert!(
            s.lines()
                .all(|l| l.chars().count() <= 45 || l.starts_with("(left")),
            "{s}"
        );
        assert!(
            !s.contains("17.1%") && s.contains("Conv  ") && s.contains("2.36M"),
            "{s}"
        );
        assert!(s.contains("/features/features.12/block/co…"), "{s}");
        assert!(s.ends_with("(left out at 45 columns: %params)\n"), "{s}");
        // narrower: op goes too, and only then is the name cut below 28
        let s = t.render_within(25);
        assert!(!s.contains("Conv  ") && s.contains("2.36M"), "{s}");
        assert!(s.contains("%params, op"), "{s}");
    }

    #[test]
    fn cells_written_in_place_read_as_pushed_ones_and_stream_the_same_lines() {
        let mut pushed =
            Table::new([("layer", Align::Left), ("n", Align::Right)]).squeeze_column(0);
        let mut written = pushed.clone();
        for (name, n) in [("a", 1u64), ("a·very·long·name", 22), ("short", 333)] {
            pushed.push(vec![name.into(), n.to_string()]);
            written.start_row();
            written.cell(name);
            written.cell_with(|s| s.push_str(&n.to_string()));
        }
        // a row shorter than the columns, and one cell past them (left out)
        pushed.push(vec!["x".into()]);
        written.start_row();
        written.cell("x");
        written.start_row();
        written.cell("y");
        written.cell("4");
        written.cell("beyond the columns");
        pushed.push(vec!["y".into(), "4".into()]);
        for width in [None, Some(12), Some(80)] {
            let text = pushed.render_fitting(width);
            assert_eq!(written.render_fitting(width), text, "{width:?}");
            let mut streamed = Vec::new();
            written.write_fitting(width, &mut streamed).unwrap();
            assert_eq!(String::from_utf8(streamed).unwrap(), text, "{width:?}");
            // the same rows measured, then streamed, never held
            let mut columns =
                Table::new([("layer", Align::Left), ("n", Align::Right)]).squeeze_column(0);
            let rows = |c: &mut dyn FnMut(&[&str])| {
                c(&["a", "1"]);
                c(&["a·very·long·name", "22"]);
                c(&["short", "333"]);
                c(&["x"]);
                c(&["y", "4", "beyond the columns"]);
            };
            fn give(t: &mut impl Cells, row: &[&str]) {
                t.start_row();
                for c in row {
                    t.cell(c);
                }
            }
            let mut m = columns.measure();
            rows(&mut |r| give(&mut m, r));
            let mut out = Vec::new();
            let mut s = columns.stream(width, &mut out);
            rows(&mut |r| give(&mut s, r));
            s.finish().unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                text,
                "streamed at {width:?}"
            );
        }
        assert_eq!(
            pushed.render(),
            "layer               n\n----------------  ---\na                   1\na·very·long·name   22\nshort             333\nx\ny                   4\n"
        );
        let quoted = pushed.map_cells(|i, c| if i == 0 { format!("`{c}`") } else { c.into() });
        assert!(quoted.render_markdown().contains("| `short` | 333 |"));
    }

    /// Rows made on demand, more than one thread formats: `fill(range)` gives the rows of the range,
    /// whatever the ranges asked.
    struct Made(usize);

    impl Rows for Made {
        fn count(&self) -> usize {
            self.0
        }
        fn fill<C: Cells>(&self, range: std::ops::Range<usize>, t: &mut C) {
            for i in range {
                t.start_row();
                // names of varied widths, some not ASCII, a short row now and then
                t.cell_with(|s| {
                    s.push_str(&"é".repeat(i % 7));
                    s.push_str(&format!("layer/{i}"));
                });
                if i % 97 == 0 {
                    continue;
                }
                t.cell_with(|s| s.push_str(&(i * i % 100_003).to_string()));
                t.cell(if i % 3 == 0 { "Conv" } else { "-" });
            }
        }
    }

    fn made_columns() -> Table {
        Table::new([
            ("layer", Align::Left),
            ("n", Align::Right),
            ("op", Align::Left),
        ])
        .squeeze_column(0)
        .optional_columns(&[2])
    }

    /// Filled, measured and streamed on two threads (every other chunk made on the second): the
    /// lines of the same rows given one by one on one thread, at every width.
    #[test]
    fn rows_made_on_two_threads_are_the_lines_of_one() {
        for n in [0, 5, PARALLEL_ROWS - 1, PARALLEL_ROWS, 3 * CHUNK_ROWS + 17] {
            let rows = Made(n);
            let mut one = made_columns();
            rows.fill(0..n, &mut one);
            let mut two = made_columns();
            two.fill_rows(&rows);
            let mut measured = made_columns();
            measured.measure_rows(&rows);
            for width in [None, Some(30), Some(80)] {
                let want = one.render_fitting(width);
                assert_eq!(two.render_fitting(width), want, "{n} rows at {width:?}");
                let mut streamed = Vec::new();
                measured.stream_rows(width, &mut streamed, &rows).unwrap();
                assert_eq!(
                    String::from_utf8(streamed).unwrap(),
                    want,
                    "{n} rows streamed at {width:?}"
                );
            }
        }
    }

    /// A write that fails (a closed pipe) ends the table with its error, and the rows after it
    /// are not formatted.
    #[test]
    fn a_failed_write_ends_the_table() {
        struct Closed;
        impl std::io::Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let cell = "a cell of twenty-six bytes";
        let mut held = Table::new([("cells", Align::Left)]);
        for _ in 0..20_000 {
            held.start_row();
            held.cell(cell);
        }
        let e = held.write_fitting(None, &mut Closed).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        let mut formatted = 0;
        let mut closed = Closed;
        let mut s = held.stream(None, &mut closed);
        for _ in 0..20_000 {
            s.start_row();
            s.cell_with(|c| {
                formatted += 1;
                c.push_str(cell);
            });
        }
        let e = s.finish().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        // the first 64 KiB of lines, then nothing
        assert!((2_000..3_000).contains(&formatted), "{formatted}");
        // rows on two threads: the error ends both
        let rows = Made(20 * CHUNK_ROWS);
        let mut columns = made_columns();
        columns.measure_rows(&rows);
        let e = columns.stream_rows(None, &mut Closed, &rows).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        let e = held.write_fitting(None, &mut Closed).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn markdown_marks_alignment() {
        let mut t = Table::new([("a", Align::Left), ("b", Align::Right)]);
        t.push(vec!["x".into(), "1".into()]);
        assert_eq!(t.render_markdown(), "| a | b |\n|---|---:|\n| x | 1 |\n");
    }
}
