//! `nnlint.toml`: found by walking up from the working directory, or given with `--config`. A
//! `pyproject.toml` with a `[tool.nnlint]` table is read the same way (as ruff reads
//! `[tool.ruff]`); where a directory holds both, `nnlint.toml` wins.
//!
//! ```toml
//! batch = 8
//! precision = "amp-bf16"
//! budget = "16GiB"
//! select = ["NL1", "hygiene"]
//! ignore = ["fixed-batch-input"]
//! fail-on = "warning"
//! ignore-nodes = ["/aux_head/*"]
//!
//! [dims]
//! seq = 512
//!
//! [rules.heavy-standard-conv]
//! severity = "error"
//! min-saving = 0.6
//! ignore-nodes = ["/features/features.0/*"]
//! ```
//!
//! Unknown keys are errors that name the file, the line and the key, with the closest valid key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::analysis::saved::Precision;
use crate::analysis::training::Optimizer;
use crate::error::{Error, Result};
use crate::rules::{self, RuleSettings, Severity};
use crate::util::suggest::{suggest, unknown_key};

pub const FILE_NAME: &str = "nnlint.toml";

/// The Python project file whose `[tool.nnlint]` table is a configuration.
pub const PYPROJECT: &str = "pyproject.toml";

crate::named_enum! {
    /// When a lint run fails (exit code 1).
    pub enum FailOn {
        /// A finding of severity error.
        Error = "error",
        /// A warning or an error.
        Warning = "warning",
        /// Any finding.
        Info = "info",
        /// Never: report only.
        Never = "never",
    }
}

impl FailOn {
    pub fn fails(self, s: Severity) -> bool {
        match self {
            FailOn::Never => false,
            FailOn::Error => s >= Severity::Error,
            FailOn::Warning => s >= Severity::Warning,
            FailOn::Info => true,
        }
    }
}

/// A size given as a number of bytes or a string such as `"16GiB"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

/// The file's top level.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
struct RawConfig {
    /// Batch size the rules analyse at.
    batch: Option<u64>,
    /// Other symbolic dimensions.
    dims: BTreeMap<String, i64>,
    /// Training precision for the memory rules.
    precision: Option<Precision>,
    /// Optimizer for the memory rules.
    optimizer: Option<Optimizer>,
    /// Memory budget for `memory-budget`.
    budget: Option<Size>,
    /// Rules to run (codes, code prefixes, names, categories); all by default.
    select: Option<Vec<String>>,
    /// Rules not to run.
    ignore: Vec<String>,
    /// Lowest severity that fails the run.
    fail_on: Option<FailOn>,
    /// Node-name globs no rule reports.
    ignore_nodes: Vec<String>,
    /// Per-rule settings, by rule name or code.
    rules: BTreeMap<String, toml::Table>,
}

/// The resolved configuration.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub path: Option<PathBuf>,
    pub batch: Option<u64>,
    pub dims: BTreeMap<String, i64>,
    pub precision: Option<Precision>,
    pub optimizer: Option<Optimizer>,
    pub budget: Option<u64>,
    pub select: Option<Vec<String>>,
    pub ignore: Vec<String>,
    pub fail_on: Option<FailOn>,
    pub ignore_nodes: Vec<String>,
    /// By rule name.
    pub rules: BTreeMap<String, RuleSettings>,
}

/// Finds `nnlint.toml`, or a `pyproject.toml` with a `[tool.nnlint]` table, in `start` or the
/// nearest directory above it (`nnlint.toml` first in each directory).
pub fn discover(start: &Path) -> Option<PathBuf> {
    let mut dir = Some(start);
    while let Some(d) = dir {
        let candidate = d.join(FILE_NAME);
        if candidate.is_file() {
            return Some(candidate);
        }
        let py = d.join(PYPROJECT);
        if py.is_file() && std::fs::read_to_string(&py).is_ok_and(|t| has_nnlint_table(&t)) {
            return Some(py);
        }
        dir = d.parent();
    }
    None
}

/// The `[tool]` table of a `pyproject.toml`, keeping only `nnlint` (other tools' tables are
/// theirs: unknown keys there are not errors).
#[derive(Deserialize)]
struct PyProject {
    #[serde(default)]
    tool: PyTools,
}

#[derive(Default, Deserialize)]
struct PyTools {
    nnlint: Option<RawConfig>,
}

/// Whether a `pyproject.toml` configures nnlint (a broken one that names nnlint does, so that
/// its error is reported rather than the file skipped).
fn has_nnlint_table(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        tool: toml::Table,
    }
    match toml::from_str::<Probe>(text) {
        Ok(p) => p.tool.contains_key("nnlint"),
        Err(_) => text.contains("tool.nnlint"),
    }
}

const TOP_KEYS: &[&str] = &[
    "batch",
    "dims",
    "precision",
    "optimizer",
    "budget",
    "select",
    "ignore",
    "fail-on",
    "ignore-nodes",
    "rules",
];

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(r) => format!(
            "line {}: ",
            text[..r.start.min(text.len())].matches('\n').count() + 1
        ),
        None => String::new(),
    }
}

/// The 1-based line of `option = ...` inside the table `[section]` (`rules.RULE`), if it can be
/// found.
fn option_line(text: &str, section: &str, option: &str) -> Option<usize> {
    if option.is_empty() {
        return None;
    }
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t.trim_matches(['[', ']']).trim() == section;
            continue;
        }
        if inside
            && t.strip_prefix(option)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
            return Some(i + 1);
        }
    }
    None
}

/// Loads and validates a configuration file: `nnlint.toml`, or the `[tool.nnlint]` table of a
/// `pyproject.toml`.
pub fn load(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    if path.file_name().is_some_and(|n| n == PYPROJECT) {
        return parse_pyproject(path, &text)?.ok_or_else(|| {
            Error::Usage(format!(
                "{}: has no [tool.nnlint] table to configure nnlint with",
                path.display()
            ))
        });
    }
    parse(path, &text)
}

/// Parses and validates configuration text (errors name `path`).
pub fn parse(path: &Path, text: &str) -> Result<Config> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
    resolve(path, text, raw, "")
}

/// The `[tool.nnlint]` table of a `pyproject.toml` (`None` without one); errors name the file and
/// the line, as for `nnlint.toml`.
pub fn parse_pyproject(path: &Path, text: &str) -> Result<Option<Config>> {
    let p: PyProject = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
    p.tool
        .nnlint
        .map(|raw| resolve(path, text, raw, "tool.nnlint."))
        .transpose()
}

fn toml_error(path: &Path, text: &str, e: toml::de::Error) -> Error {
    let msg = e.message().to_string();
    let at = line_of(text, e.span());
    let text = match unknown_key(&msg) {
        Some(key) => format!(
            "{at}{}",
            suggest(&format!("unknown key '{key}'"), &key, TOP_KEYS)
        ),
        None => format!("{at}{}", msg.trim()),
    };
    Error::Usage(format!("{}: {text}", path.display()))
}

/// Checks a parsed file's values; `prefix` is where its tables sit (`tool.nnlint.` in a
/// `pyproject.toml`), for finding lines.
fn resolve(path: &Path, text: &str, raw: RawConfig, prefix: &str) -> Result<Config> {
    let bad = |msg: String| Error::Usage(format!("{}: {msg}", path.display()));
    let budget = match raw.budget {
        None => None,
        Some(Size::Bytes(b)) => Some(b),
        Some(Size::Text(s)) => {
            Some(crate::util::units::parse_size(&s).map_err(|e| bad(format!("budget: {e}")))?)
        }
    };
    for sel in raw.select.iter().flatten().chain(&raw.ignore) {
        check_selector(sel).map_err(bad)?;
    }
    let mut rules_out = BTreeMap::new();
    for (key, table) in raw.rules {
        let rule = rules::find(&key).ok_or_else(|| {
            let names: Vec<&str> = rules::all_meta().iter().map(|m| m.name.as_str()).collect();
            bad(suggest(
                &format!("[rules.{key}]: unknown rule '{key}'"),
                &key,
                &names,
            ))
        })?;
        let name = rule.meta().name.clone();
        let mut s = RuleSettings::default();
        for (k, v) in table {
            let ctx = |m: &str| bad(format!("[rules.{key}] {k}: {m}"));
            match k.as_str() {
                "enabled" => {
                    s.enabled = Some(v.as_bool().ok_or_else(|| ctx("expected true or false"))?)
                }
                "severity" => {
                    s.severity = Some(
                        Severity::deserialize(v.clone())
                            .map_err(|_| ctx("expected \"error\", \"warning\" or \"info\""))?,
                    )
                }
                "ignore-nodes" => {
                    s.ignore_nodes = Vec::<String>::deserialize(v.clone())
                        .map_err(|_| ctx("expected a list of node-name globs"))?
                }
                _ => {
                    s.options.insert(k, v);
                }
            }
        }
        rule.validate(&s.options).map_err(|e| {
            // serde names the option last (`... in `min-macs``): find its line in the section
            let option = e
                .split("option '")
                .nth(1)
                .and_then(|r| r.split('\'').next())
                .or_else(|| e.rsplit('`').nth(1))
                .unwrap_or_default();
            let at = option_line(text, &format!("{prefix}rules.{key}"), option)
                .map_or(String::new(), |l| format!("line {l}: "));
            bad(format!("{at}[rules.{key}]: {}", e.replace('\n', " ")))
        })?;
        rules_out.insert(name, s);
    }
    Ok(Config {
        path: Some(path.to_path_buf()),
        batch: raw.batch,
        dims: raw.dims,
        precision: raw.precision,
        optimizer: raw.optimizer,
        budget,
        select: raw.select,
        ignore: raw.ignore,
        fail_on: raw.fail_on,
        ignore_nodes: raw.ignore_nodes,
        rules: rules_out,
    })
}

/// A selector must pick at least one rule.
pub fn check_selector(sel: &str) -> std::result::Result<(), String> {
    if rules::all_meta().iter().any(|m| rules::selects(sel, m)) {
        return Ok(());
    }
    let names: Vec<&str> = rules::all_meta().iter().map(|m| m.name.as_str()).collect();
    Err(suggest(&format!("'{sel}' selects no rule"), sel, &names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("nnlint.toml"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_full_config_parses() {
        let c = parse(
            Path::new("nnlint.toml"),
            r#"
batch = 8
precision = "amp-bf16"
budget = "16GiB"
select = ["NL1", "hygiene"]
ignore = ["fixed-batch-input"]
fail-on = "warning"
ignore-nodes = ["/aux/*"]
[dims]
seq = 128
[rules.heavy-standard-conv]
severity = "error"
min-saving = 0.6
ignore-nodes = ["/features/*"]
[rules.NL304]
enabled = false
"#,
        )
        .unwrap();
        assert_eq!(c.budget, Some(16 << 30));
        assert_eq!(
            c.rules["heavy-standard-conv"].severity,
            Some(Severity::Error)
        );
        assert_eq!(c.rules["duplicate-initializer"].enabled, Some(false));
        assert_eq!(
            c.rules["heavy-standard-conv"].options["min-saving"].as_float(),
            Some(0.6)
        );
    }

    #[test]
    fn unknown_keys_name_file_line_and_suggest() {
        let e = err("batch = 8\nbugdet = \"1GiB\"\n");
        assert!(
            e.starts_with("nnlint.toml: line 2: unknown key 'bugdet': did you mean 'budget'?"),
            "{e}"
        );
        let e = err("[rules.heavy-standard-conv]\nmin-savng = 0.5\n");
        assert!(
            e.contains("unknown option 'min-savng': did you mean 'min-saving'?"),
            "{e}"
        );
        let e = err("[rules.heavy-conv]\n");
        assert!(
            e.contains("unknown rule 'heavy-conv'")
                && e.contains("did you mean 'heavy-standard-conv'?"),
            "{e}"
        );
        let e = err("select = [\"NL9\"]\n");
        assert!(e.contains("'NL9' selects no rule"), "{e}");
        let e = err("[rules.dead-node]\nthreshold = 3\n");
        assert!(e.contains("dead-node has no options"), "{e}");
    }

    #[test]
    fn pyproject_tool_nnlint_is_read_and_nnlint_toml_wins() {
        let dir = tempfile::tempdir().unwrap();
        let py = dir.path().join(PYPROJECT);
        std::fs::write(
            &py,
            "[project]\nname = \"x\"\n[tool.ruff]\nline-length = 100\n[tool.nnlint]\nbatch = 4\nfail-on = \"warning\"\n[tool.nnlint.rules.heavy-standard-conv]\nmin-saving = 0.6\n",
        )
        .unwrap();
        assert_eq!(discover(dir.path()), Some(py.clone()));
        let c = load(&py).unwrap();
        assert_eq!(c.batch, Some(4));
        assert_eq!(c.fail_on, Some(FailOn::Warning));
        assert!(c.rules.contains_key("heavy-standard-conv"));
        std::fs::write(dir.path().join(FILE_NAME), "batch = 8\n").unwrap();
        assert_eq!(discover(dir.path()), Some(dir.path().join(FILE_NAME)));
    }

    #[test]
    fn a_pyproject_without_tool_nnlint_is_not_a_config() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("pkg");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(PYPROJECT), "[tool.ruff]\nline-length = 100\n").unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&sub), Some(dir.path().join(FILE_NAME)));
        let e = load(&sub.join(PYPROJECT)).unwrap_err().to_string();
        assert!(e.contains("has no [tool.nnlint]"), "{e}");
    }

    #[test]
    fn pyproject_errors_name_the_file_the_line_and_the_key() {
        let p = Path::new("pyproject.toml");
        let text = "[project]\nname = \"x\"\n\n[tool.nnlint]\nbacth = 4\n";
        let e = parse_pyproject(p, text).unwrap_err().to_string();
        assert!(
            e.starts_with("pyproject.toml: line 5: unknown key 'bacth'"),
            "{e}"
        );
        assert!(e.contains("batch"), "{e}");
        let text = "[tool.nnlint.rules.heavy-standard-conv]\nmin-saving = \"much\"\n";
        let e = parse_pyproject(p, text).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("heavy-standard-conv"),
            "{e}"
        );
    }

    #[test]
    fn discovery_walks_up() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "").unwrap();
        assert_eq!(discover(&sub), Some(dir.path().join(FILE_NAME)));
    }
}
