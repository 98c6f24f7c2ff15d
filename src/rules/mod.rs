//! Stage 4, lint rules: the `Rule` trait, the static registry, and what a finding carries.
//!
//! Each rule lives in one file here; its metadata, documentation and default thresholds live in a
//! data file under `rules/` (embedded in the binary), so `nnlint rules`, `nnlint explain`, SARIF rule
//! help and docs/rules.md come from one source.

mod activation_hotspot;
mod context;
mod dead_node;
mod duplicate_initializer;
mod fixed_batch_input;
mod fp32_weights;
mod heavy_conv;
mod large_fc_head;
mod memory_budget;
mod oversized_linear;
mod unused_initializer;

use std::sync::OnceLock;

pub use context::{LintContext, Settings};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// How serious a finding is.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A rule's metadata and documentation, from its file under `rules/`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuleMeta {
    pub code: String,
    pub name: String,
    pub category: String,
    pub severity: Severity,
    pub summary: String,
    /// The rewrite that implements the proposed fix, if any.
    #[serde(default)]
    pub rewrite: Option<String>,
    /// Exact, approximate or lossy: how the proposed fix changes the function.
    #[serde(default)]
    pub safety: Option<String>,
    /// Default options (thresholds).
    #[serde(default)]
    pub options: toml::Table,
    pub docs: RuleDocs,
}

/// Rule documentation in the fixed form: what, why, example, instead, rewrite safety, references.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuleDocs {
    pub what: String,
    pub why: String,
    pub example: String,
    pub instead: String,
    pub rewrite_safety: String,
    pub references: Vec<String>,
}

/// What a proposed fix saves (absent parts are unknown or not applicable).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Saving {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macs: Option<u64>,
    /// Training memory per step (negative: the fix costs memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training_bytes: Option<i64>,
}

/// One finding: a rule's verdict on a node (or the whole model).
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub name: &'static str,
    pub severity: Severity,
    /// The node the finding is about; the graph's name for model-wide findings.
    pub node: String,
    pub op: String,
    /// Lowercase, no trailing period.
    pub message: String,
    /// The measured value and the limit it was compared with, in `unit`.
    pub measured: f64,
    pub limit: f64,
    pub unit: &'static str,
    pub fix: String,
    pub saving: Saving,
}

/// A lint rule. `check` inspects the model and returns findings; it never changes anything.
pub trait Rule: Sync {
    /// The rule's name (kebab-case), which finds its metadata.
    fn name(&self) -> &'static str;
    /// Checks that user options parse into this rule's typed options.
    fn validate(&self, options: &toml::Table) -> Result<(), String>;
    fn check(&self, cx: &LintContext, options: &toml::Table) -> Result<Vec<Finding>, String>;

    fn meta(&self) -> &'static RuleMeta {
        meta_by_name(self.name()).expect("every registered rule has a data file")
    }
}

/// Every rule, in code order. Registering a rule is one line here.
pub static RULES: &[&dyn Rule] = &[
    &heavy_conv::HeavyConv,
    &large_fc_head::LargeFcHead,
    &oversized_linear::OversizedLinear,
    &memory_budget::MemoryBudget,
    &fp32_weights::Fp32Weights,
    &activation_hotspot::ActivationHotspot,
    &unused_initializer::UnusedInitializer,
    &dead_node::DeadNode,
    &fixed_batch_input::FixedBatchInput,
    &duplicate_initializer::DuplicateInitializer,
];

/// The rule data files, embedded.
const DATA: &[(&str, &str)] = &[
    (
        "NL101-heavy-standard-conv.toml",
        include_str!("../../rules/NL101-heavy-standard-conv.toml"),
    ),
    (
        "NL102-large-fc-head.toml",
        include_str!("../../rules/NL102-large-fc-head.toml"),
    ),
    (
        "NL103-oversized-linear.toml",
        include_str!("../../rules/NL103-oversized-linear.toml"),
    ),
    (
        "NL201-memory-budget.toml",
        include_str!("../../rules/NL201-memory-budget.toml"),
    ),
    (
        "NL202-fp32-weights.toml",
        include_str!("../../rules/NL202-fp32-weights.toml"),
    ),
    (
        "NL203-activation-hotspot.toml",
        include_str!("../../rules/NL203-activation-hotspot.toml"),
    ),
    (
        "NL301-unused-initializer.toml",
        include_str!("../../rules/NL301-unused-initializer.toml"),
    ),
    (
        "NL302-dead-node.toml",
        include_str!("../../rules/NL302-dead-node.toml"),
    ),
    (
        "NL303-fixed-batch-input.toml",
        include_str!("../../rules/NL303-fixed-batch-input.toml"),
    ),
    (
        "NL304-duplicate-initializer.toml",
        include_str!("../../rules/NL304-duplicate-initializer.toml"),
    ),
];

/// Every rule's metadata, parsed once. A malformed data file is a build defect, caught by tests.
pub fn all_meta() -> &'static [RuleMeta] {
    static META: OnceLock<Vec<RuleMeta>> = OnceLock::new();
    META.get_or_init(|| {
        DATA.iter()
            .map(|(file, text)| {
                toml::from_str::<RuleMeta>(text)
                    .unwrap_or_else(|e| panic!("rules/{file} is malformed: {e}"))
            })
            .collect()
    })
}

pub fn meta_by_name(name: &str) -> Option<&'static RuleMeta> {
    all_meta().iter().find(|m| m.name == name)
}

/// A rule by code (`NL101`) or name (`heavy-standard-conv`), case-insensitive.
pub fn find(key: &str) -> Option<&'static dyn Rule> {
    RULES.iter().copied().find(|r| {
        let m = r.meta();
        m.code.eq_ignore_ascii_case(key) || m.name.eq_ignore_ascii_case(key)
    })
}

/// Whether a selector (`NL1`, `NL101`, `heavy-standard-conv`, a category, `ALL`) picks a rule.
pub fn selects(selector: &str, meta: &RuleMeta) -> bool {
    let s = selector.trim();
    s.eq_ignore_ascii_case("all")
        || s.eq_ignore_ascii_case(&meta.name)
        || s.eq_ignore_ascii_case(&meta.category)
        || (s.len() >= 2
            && meta
                .code
                .to_ascii_uppercase()
                .starts_with(&s.to_ascii_uppercase()))
}

/// Default options of a rule overlaid with the user's, parsed into the rule's typed options.
pub fn options<T: DeserializeOwned>(meta: &RuleMeta, user: &toml::Table) -> Result<T, String> {
    let mut merged = meta.options.clone();
    for (k, v) in user {
        merged.insert(k.clone(), v.clone());
    }
    T::deserialize(toml::Value::Table(merged)).map_err(|e| {
        let msg = e.to_string();
        let known: Vec<&str> = meta.options.keys().map(String::as_str).collect();
        match unknown_key(&msg) {
            Some(key) => format!(
                "{} (options: {})",
                suggest(&format!("unknown option '{key}'"), &key, &known),
                known.join(", ")
            ),
            None => msg.trim().to_string(),
        }
    })
}

/// For rules without options: any key is unknown.
pub fn no_options(meta: &RuleMeta, user: &toml::Table) -> Result<(), String> {
    match user.keys().next() {
        Some(k) => Err(format!(
            "unknown option '{k}': {} has no options",
            meta.name
        )),
        None => Ok(()),
    }
}

/// The key serde complains about in an "unknown field `x`" message.
pub fn unknown_key(msg: &str) -> Option<String> {
    let rest = msg.split("unknown field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

/// Appends "did you mean 'x'?" when a known name is close to the given one.
pub fn suggest(message: &str, given: &str, known: &[&str]) -> String {
    // close spelling, or every word of the given name in a known one (`heavy-conv`)
    let words_in = |k: &str| {
        given
            .split(['-', '_'])
            .all(|w| !w.is_empty() && k.split('-').any(|x| x.eq_ignore_ascii_case(w)))
    };
    let best = known
        .iter()
        .map(|k| {
            (
                strsim::jaro_winkler(given, k).max(if words_in(k) { 0.85 } else { 0.0 }),
                *k,
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, k)) => format!("{message}: did you mean '{k}'?"),
        None => message.to_string(),
    }
}

/// Renders a rule's documentation (for `nnlint explain` and, one level down, the catalog).
pub fn explain(meta: &RuleMeta) -> String {
    explain_at(meta, 1)
}

fn explain_at(meta: &RuleMeta, level: usize) -> String {
    let h = "#".repeat(level);
    let d = &meta.docs;
    let mut out = format!(
        "{h} {} ({})\n\n{}.\n\nCategory: {}. Default severity: {}.",
        meta.name,
        meta.code,
        capitalise(&meta.summary),
        meta.category,
        meta.severity.as_str()
    );
    if let Some(r) = &meta.rewrite {
        out.push_str(&format!(" Fix: the {r} rewrite."));
    }
    out.push_str(&format!(
        "\n\n{h}# What it does\n\n{}\n\n{h}# Why is this bad?\n\n{}\n\n{h}# Example\n\n{}\n\n{h}# Use instead\n\n{}\n\n{h}# Rewrite safety\n\n{}\n",
        d.what, d.why, d.example, d.instead, d.rewrite_safety
    ));
    out.push_str(&format!("\n{h}# Options\n\n"));
    if meta.options.is_empty() {
        out.push_str("None.\n");
    } else {
        for (k, v) in &meta.options {
            out.push_str(&format!("- `{k}` = `{v}`\n"));
        }
    }
    out.push_str(&format!("\n{h}# References\n\n"));
    for r in &d.references {
        out.push_str(&format!("- {r}\n"));
    }
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The rule catalog (docs/rules.md), generated from the data files.
pub fn catalog() -> String {
    let mut out = String::from(
        "# nnlint rules\n\n<!-- generated from rules/*.toml by `nnlint rules --format markdown`; a test keeps it fresh -->\n\n| code | name | category | severity | summary |\n|---|---|---|---|---|\n",
    );
    for m in all_meta() {
        out.push_str(&format!(
            "| {} | [{}](#{}-{}) | {} | {} | {} |\n",
            m.code,
            m.name,
            m.name,
            m.code.to_ascii_lowercase(),
            m.category,
            m.severity.as_str(),
            m.summary
        ));
    }
    for m in all_meta() {
        out.push('\n');
        out.push_str(&explain_at(m, 2));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_files_parse_and_codes_are_unique() {
        let meta = all_meta();
        assert_eq!(meta.len(), RULES.len());
        let mut codes: Vec<&str> = meta.iter().map(|m| m.code.as_str()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), meta.len(), "rule codes are unique");
        let mut names: Vec<&str> = meta.iter().map(|m| m.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), meta.len(), "rule names are unique");
        for (file, _) in DATA {
            let m = meta.iter().find(|m| file.starts_with(&m.code)).unwrap();
            assert_eq!(
                *file,
                format!("{}-{}.toml", m.code, m.name),
                "file names follow CODE-name"
            );
        }
    }

    #[test]
    fn every_rule_has_data_and_valid_default_options() {
        for r in RULES {
            let m = r.meta();
            r.validate(&toml::Table::new())
                .unwrap_or_else(|e| panic!("{}: {e}", m.name));
            assert!(
                !m.summary.ends_with('.'),
                "{}: summaries have no trailing period",
                m.name
            );
        }
    }

    #[test]
    fn selectors() {
        let m = meta_by_name("heavy-standard-conv").unwrap();
        for s in [
            "NL101",
            "nl1",
            "NL",
            "heavy-standard-conv",
            "architecture",
            "ALL",
        ] {
            assert!(selects(s, m), "{s}");
        }
        for s in ["NL2", "hygiene", "large-fc-head"] {
            assert!(!selects(s, m), "{s}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            suggest(
                "unknown option 'min-savng'",
                "min-savng",
                &["min-saving", "min-macs"]
            ),
            "unknown option 'min-savng': did you mean 'min-saving'?"
        );
        assert_eq!(
            suggest("unknown option 'zzz'", "zzz", &["min-saving"]),
            "unknown option 'zzz'"
        );
    }
}

/// Findings of one model, and the configured node ignores that matched nothing.
#[derive(Debug, Default)]
pub struct Outcome {
    pub findings: Vec<Finding>,
    pub unused_ignores: Vec<String>,
    /// Rules that could not run, and why.
    pub warnings: Vec<String>,
}

/// Rules that need memory estimates, so every input dimension bound.
const NEEDS_SIZES: &[&str] = &["memory-budget", "activation-hotspot"];

/// Whether a rule runs under the configuration and the command line's `--select` / `--ignore`.
pub fn enabled(
    meta: &RuleMeta,
    config: &crate::config::Config,
    select: &[String],
    ignore: &[String],
) -> bool {
    let selected = if !select.is_empty() {
        select.iter().any(|s| selects(s, meta))
    } else if let Some(sel) = &config.select {
        sel.iter().any(|s| selects(s, meta))
    } else {
        true
    };
    let ignored = ignore
        .iter()
        .chain(&config.ignore)
        .any(|s| selects(s, meta));
    let rule_on = config
        .rules
        .get(&meta.name)
        .and_then(|r| r.enabled)
        .unwrap_or(true);
    selected && !ignored && rule_on
}

/// Runs every enabled rule on one model.
pub fn lint(
    model: &crate::ir::Model,
    settings: &Settings,
    config: &crate::config::Config,
    select: &[String],
    ignore: &[String],
) -> crate::Result<Outcome> {
    let cx = LintContext::new(model, settings)?;
    let mut out = Outcome::default();
    let empty = toml::Table::new();
    let mut used_globs: std::collections::HashSet<String> = std::collections::HashSet::new();
    for rule in RULES {
        let meta = rule.meta();
        if !enabled(meta, config, select, ignore) {
            continue;
        }
        if let (Some(why), true) = (&cx.unbound, NEEDS_SIZES.contains(&meta.name.as_str())) {
            out.warnings.push(format!("{} skipped: {why}", meta.name));
            continue;
        }
        let rs = config.rules.get(&meta.name);
        let opts = rs.map_or(&empty, |r| &r.options);
        let findings = rule.check(&cx, opts).map_err(|e| {
            crate::Error::Usage(format!("{}: rule {}: {e}", model.path.display(), meta.name))
        })?;
        for mut f in findings {
            let globs = rs
                .map(|r| r.ignore_nodes.as_slice())
                .unwrap_or(&[])
                .iter()
                .chain(&config.ignore_nodes);
            let mut skip = false;
            for g in globs {
                if crate::config::glob_match(g, &f.node) {
                    used_globs.insert(g.clone());
                    skip = true;
                }
            }
            if skip {
                continue;
            }
            if let Some(sev) = rs.and_then(|r| r.severity) {
                f.severity = sev;
            }
            out.findings.push(f);
        }
    }
    let configured = config
        .ignore_nodes
        .iter()
        .chain(config.rules.values().flat_map(|r| &r.ignore_nodes));
    out.unused_ignores = configured
        .filter(|g| !used_globs.contains(*g))
        .cloned()
        .collect();
    out.unused_ignores.sort();
    out.unused_ignores.dedup();
    Ok(out)
}

/// A stable fingerprint of a finding: rule, model file name and node (not the message, whose numbers
/// change with thresholds).
pub fn fingerprint(model: &str, f: &Finding) -> String {
    let file = std::path::Path::new(model)
        .file_name()
        .map_or(model.into(), |n| n.to_string_lossy().into_owned());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{}\u{0}{file}\u{0}{}", f.code, f.node).bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
