//! Lint reports: human diagnostics, JSON, GitHub workflow annotations, Markdown, and SARIF
//! (in sarif.rs).

use std::io::IsTerminal;

use serde::Serialize;

use super::units::{bytes, count};
use crate::rules::{Finding, Severity};

crate::named_enum! {
    /// Output formats of `nnlint lint`.
    pub enum LintFormat {
        /// Diagnostics for a terminal.
        Human = "human",
        /// JSON findings.
        Json = "json",
        /// SARIF 2.1.0, for code scanning.
        Sarif = "sarif",
        /// GitHub Actions workflow annotations.
        Github = "github",
        /// A Markdown summary.
        Markdown = "markdown",
    }
}

/// The result of linting one model.
#[derive(Debug, Serialize)]
pub struct FileResult {
    pub model: String,
    pub findings: Vec<Finding>,
    /// A tool error (the file could not be read or analysed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Findings left out because the baseline holds them.
    pub baselined: usize,
}

/// Everything a lint run reports.
#[derive(Debug)]
pub struct LintRun {
    pub files: Vec<FileResult>,
    pub warnings: Vec<String>,
}

impl LintRun {
    pub fn count(&self, s: Severity) -> usize {
        self.files
            .iter()
            .flat_map(|f| &f.findings)
            .filter(|f| f.severity == s)
            .count()
    }

    /// Files that could not be linted (a tool error).
    pub fn failed(&self) -> usize {
        self.files.iter().filter(|f| f.error.is_some()).count()
    }
}

/// `saves 3.95K params, 15.4 KiB, 32.4M MACs; costs 450 KiB more training memory` (empty if nothing).
pub fn saving_text(f: &Finding) -> String {
    let s = &f.saving;
    let mut parts = Vec::new();
    let mut cost = None;
    if let Some(p) = s.params {
        parts.push(format!("{} params", count(p)));
    }
    if let Some(b) = s.bytes {
        parts.push(bytes(b));
    }
    if let Some(m) = s.macs {
        parts.push(format!("{} MACs", count(m)));
    }
    if let Some(t) = s.training_bytes {
        if t >= 0 {
            parts.push(format!("{} of training memory", bytes(t as u64)));
        } else {
            cost = Some(format!(
                "costs {} more training memory",
                bytes(t.unsigned_abs())
            ));
        }
    }
    let saves = if parts.is_empty() {
        String::new()
    } else {
        format!("saves {}", parts.join(", "))
    };
    match (saves.is_empty(), cost) {
        (_, None) => saves,
        (true, Some(c)) => c,
        (false, Some(c)) => format!("{saves}; {c}"),
    }
}

/// ` (nnlint rewrite: depthwise-separable, approximate)` for a fixable finding, else nothing.
fn rewrite_note(f: &Finding) -> String {
    match &f.rewrite {
        Some(r) => format!(" (nnlint rewrite: {}, {})", r.kind, r.safety),
        None => String::new(),
    }
}

/// Whether to colour: a terminal, and `NO_COLOR` unset.
pub fn use_colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn paint(text: &str, style: anstyle::Style, colour: bool) -> String {
    if colour {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// Compact diagnostics for a terminal.
pub fn human(run: &LintRun, colour: bool) -> String {
    use anstyle::{AnsiColor, Style};
    let bold = Style::new().bold();
    let dim = Style::new().dimmed();
    let mut out = String::new();
    for file in &run.files {
        if file.error.is_some() {
            continue; // on standard error, and counted below
        }
        for f in &file.findings {
            let sev = match f.severity {
                Severity::Error => Style::new().fg_color(Some(AnsiColor::Red.into())).bold(),
                Severity::Warning => Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold(),
                Severity::Info => Style::new().fg_color(Some(AnsiColor::Cyan.into())),
            };
            out.push_str(&format!(
                "{}: {} {} [{}] {} ({}): {}\n",
                file.model,
                paint(f.severity.as_str(), sev, colour),
                paint(f.code, bold, colour),
                f.name,
                f.node,
                f.op,
                f.message
            ));
            let saving = saving_text(f);
            let label = match &f.rewrite {
                Some(r) => format!("fix [rewrite: {}, {}]:", r.kind, r.safety),
                None => "fix:".to_string(),
            };
            out.push_str(&format!(
                "  {} {}{}\n",
                paint(&label, dim, colour),
                f.fix,
                if saving.is_empty() {
                    String::new()
                } else {
                    format!(" ({saving})")
                }
            ));
        }
    }
    for w in &run.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    let (e, w, i) = (
        run.count(Severity::Error),
        run.count(Severity::Warning),
        run.count(Severity::Info),
    );
    let baselined: usize = run.files.iter().map(|f| f.baselined).sum();
    let fixable = run
        .files
        .iter()
        .flat_map(|f| &f.findings)
        .filter(|f| f.rewrite.is_some())
        .count();
    // a file that could not be linted is not a file without findings
    let linted = run.files.len() - run.failed();
    out.push_str(&format!(
        "{} in {} file{}{}: {e} error{}, {w} warning{}, {i} info{}{}\n",
        if e + w + i == 0 {
            "no findings"
        } else {
            "findings"
        },
        linted,
        if linted == 1 { "" } else { "s" },
        if linted < run.files.len() {
            format!(" linted of {}", run.files.len())
        } else {
            String::new()
        },
        if e == 1 { "" } else { "s" },
        if w == 1 { "" } else { "s" },
        if baselined > 0 {
            format!(" ({baselined} in the baseline, not shown)")
        } else {
            String::new()
        },
        if fixable > 0 {
            format!("; {fixable} fixable with `nnlint rewrite`")
        } else {
            String::new()
        },
    ));
    let failed = run.failed();
    if failed > 0 {
        out.push_str(&format!(
            "{failed} file{} could not be linted (the error{} above, on standard error)\n",
            if failed == 1 { "" } else { "s" },
            if failed == 1 { " is" } else { "s are" },
        ));
    }
    out
}

/// The JSON's schema version (docs/lint.schema.json): 2 since one file is reported as several are.
pub const SCHEMA_VERSION: u32 = 2;

/// JSON, one shape for one file or many (docs/lint.schema.json): `{"schema_version", "files":
/// [{"model", "findings", "error"?, "baselined"}], "warnings"}`. Version 1 gave a single file as
/// `{"model", "findings", ...}` and several as `files`: a reader had to know which.
pub fn json(run: &LintRun) -> String {
    #[derive(Serialize)]
    struct Doc<'a> {
        schema_version: u32,
        files: &'a [FileResult],
        warnings: &'a [String],
    }
    let mut s = serde_json::to_string_pretty(&Doc {
        schema_version: SCHEMA_VERSION,
        files: &run.files,
        warnings: &run.warnings,
    })
    .expect("findings serialise");
    s.push('\n');
    s
}

/// Escapes a workflow-command value (GitHub's rules: `%`, CR, LF; and `:` `,` in properties).
fn gh_escape(s: &str, property: bool) -> String {
    let mut out = s
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A");
    if property {
        out = out.replace(':', "%3A").replace(',', "%2C");
    }
    out
}

/// GitHub Actions workflow annotations (`::error file=...,title=...::message`).
pub fn github(run: &LintRun) -> String {
    let mut out = String::new();
    for file in &run.files {
        if let Some(e) = &file.error {
            out.push_str(&format!(
                "::error file={}::{}\n",
                gh_escape(&file.model, true),
                gh_escape(e, false)
            ));
            continue;
        }
        for f in &file.findings {
            let level = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "notice",
            };
            let title = format!("{} {} ({})", f.code, f.name, f.node);
            let saving = saving_text(f);
            let body = format!(
                "{}\nfix: {}{}{}",
                f.message,
                f.fix,
                rewrite_note(f),
                if saving.is_empty() {
                    String::new()
                } else {
                    format!(" ({saving})")
                }
            );
            out.push_str(&format!(
                "::{level} file={},title={}::{}\n",
                gh_escape(&file.model, true),
                gh_escape(&title, true),
                gh_escape(&body, false)
            ));
        }
    }
    out
}

fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A Markdown summary for a pull-request comment or `$GITHUB_STEP_SUMMARY`.
pub fn markdown(run: &LintRun) -> String {
    let (e, w, i) = (
        run.count(Severity::Error),
        run.count(Severity::Warning),
        run.count(Severity::Info),
    );
    let failed = run.failed();
    let mut out = format!(
        "### nnlint: {e} error(s), {w} warning(s), {i} info{}\n\n",
        if failed > 0 {
            format!(", {failed} file(s) not linted")
        } else {
            String::new()
        }
    );
    for file in &run.files {
        out.push_str(&format!("#### `{}`\n\n", md(&file.model)));
        if let Some(err) = &file.error {
            out.push_str(&format!("error: {}\n\n", md(err)));
            continue;
        }
        if file.findings.is_empty() {
            out.push_str("No findings.\n\n");
            continue;
        }
        out.push_str(
            "| severity | rule | node | finding | fix | saves |\n|---|---|---|---|---|---|\n",
        );
        for f in &file.findings {
            out.push_str(&format!(
                "| {} | `{}` {} | `{}` | {} | {} | {} |\n",
                f.severity.as_str(),
                f.code,
                f.name,
                md(&f.node),
                md(&f.message),
                md(&format!("{}{}", f.fix, rewrite_note(f))),
                md(&saving_text(f))
            ));
        }
        out.push('\n');
    }
    out
}
