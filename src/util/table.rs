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
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Option<Vec<String>>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
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

impl Table {
    /// A table with a header line and a rule under it.
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        let (headers, align): (Vec<String>, Vec<Align>) =
            columns.into_iter().map(|(h, a)| (h.into(), a)).unzip();
        Table {
            headers: Some(headers),
            align,
            ..Table::default()
        }
    }

    /// A table without headers (aligned summary lines).
    pub fn plain(align: &[Align]) -> Table {
        Table {
            align: align.to_vec(),
            ..Table::default()
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
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

    fn widths(&self) -> Vec<usize> {
        let n = self.align.len();
        let mut w = vec![0usize; n];
        for row in self.headers.iter().chain(&self.rows) {
            for (i, c) in row.iter().enumerate().take(n) {
                let len = if c.is_ascii() {
                    c.len()
                } else {
                    c.chars().count()
                };
                w[i] = w[i].max(len);
            }
        }
        w
    }

    /// Appends one aligned line to `out`: cells padded to `width` (truncated with `…` when
    /// longer), trailing blanks trimmed. Writes in place: a table of 100k rows allocates nothing
    /// per cell.
    fn line(&self, out: &mut String, cells: &[String], width: &[Option<usize>]) {
        let start = out.len();
        let mut first = true;
        for (i, c) in cells.iter().enumerate().take(width.len()) {
            // a column left out to fit the width
            let Some(w) = width[i] else {
                continue;
            };
            if !first {
                out.push_str("  ");
            }
            first = false;
            // ASCII (the common case): bytes are chars
            let len = if c.is_ascii() {
                c.len()
            } else {
                c.chars().count()
            };
            let (shown, shown_len) = if len > w {
                let cut = c
                    .char_indices()
                    .nth(w.saturating_sub(1))
                    .map_or(c.len(), |(i, _)| i);
                (&c[..cut], w.saturating_sub(1) + 1)
            } else {
                (c.as_str(), len)
            };
            let truncated = len > w;
            let pad = w.saturating_sub(shown_len);
            let pad_with = |out: &mut String| {
                const SPACES: &str =
                    "                                                                ";
                let mut left = pad;
                while left > 0 {
                    let n = left.min(SPACES.len());
                    out.push_str(&SPACES[..n]);
                    left -= n;
                }
            };
            if self.align[i] == Align::Right {
                pad_with(out);
            }
            out.push_str(shown);
            if truncated {
                out.push('…');
            }
            if self.align[i] == Align::Left {
                pad_with(out);
            }
        }
        let trimmed = out[start..].trim_end().len();
        out.truncate(start + trimmed);
        out.push('\n');
    }

    /// Aligned text.
    pub fn render(&self) -> String {
        self.render_with(self.widths().into_iter().map(Some).collect())
    }

    /// Aligned text no wider than `max` characters where it can be: the squeezed column gives way
    /// down to a readable width, then the optional columns are left out in their order (a last
    /// line names them; a wider terminal, `COLUMNS` or a pipe shows them), then the squeezed
    /// column goes down to 8 characters. The other columns, the numbers, are never cut.
    pub fn render_within(&self, max: usize) -> String {
        let natural = self.widths();
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
        let mut out = self.render_with(w);
        if !left_out.is_empty() {
            let names: Vec<&str> = left_out
                .iter()
                .filter_map(|&c| self.headers.as_ref().and_then(|h| h.get(c)))
                .map(String::as_str)
                .collect();
            out.push_str(&format!(
                "(left out at {max} columns: {})\n",
                names.join(", ")
            ));
        }
        out
    }

    /// [`Table::render_within`] a width when there is one (a terminal), else [`Table::render`].
    pub fn render_fitting(&self, width: Option<usize>) -> String {
        match width {
            Some(w) => self.render_within(w),
            None => self.render(),
        }
    }

    fn render_with(&self, w: Vec<Option<usize>>) -> String {
        let mut out = String::new();
        if let Some(h) = &self.headers {
            self.line(&mut out, h, &w);
            let rule: Vec<String> = w.iter().map(|n| "-".repeat(n.unwrap_or(0))).collect();
            self.line(&mut out, &rule, &w);
        }
        for row in &self.rows {
            self.line(&mut out, row, &w);
        }
        out
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
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
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
    fn markdown_marks_alignment() {
        let mut t = Table::new([("a", Align::Left), ("b", Align::Right)]);
        t.push(vec!["x".into(), "1".into()]);
        assert_eq!(t.render_markdown(), "| a | b |\n|---|---:|\n| x | 1 |\n");
    }
}
