//! The terminal, when standard output is one: its width, so that wide tables fit it. Pipes, files
//! and tests get whole tables (no terminal, no width), so their output does not depend on where
//! it is read.

use std::io::IsTerminal;

/// The width tables must fit: `COLUMNS` when set (as `ls` reads it), else the terminal's own;
/// `None` when standard output is not a terminal.
pub fn width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    width_from(
        std::env::var("COLUMNS").ok().as_deref(),
        terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)),
    )
}

/// Below this, shortening names helps nobody: the table is printed whole and the terminal wraps.
const NARROWEST: usize = 40;

fn width_from(columns: Option<&str>, measured: Option<usize>) -> Option<usize> {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .or(measured)
        .filter(|&w| w >= NARROWEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_wins_over_the_measured_width_and_tiny_widths_are_ignored() {
        assert_eq!(width_from(Some("100"), Some(80)), Some(100));
        assert_eq!(width_from(None, Some(80)), Some(80));
        assert_eq!(width_from(Some("wide"), Some(80)), Some(80));
        assert_eq!(width_from(Some("10"), Some(80)), None);
        assert_eq!(width_from(None, None), None);
    }
}
