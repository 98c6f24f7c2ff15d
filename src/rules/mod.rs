//! Stage 4, lint rules: the `Rule` trait, the static registry, and what a finding carries.
//!
//! Each rule lives in one file here; its metadata, documentation and default thresholds live in a
//! data file under `rules/` (embedded in the binary), so `nnlint rules`, `nnlint explain`, SARIF rule
//! help and docs/rules.md come from one source.

mod activation_hotspot;
pub mod baseline;
mod context;
mod dead_node;
mod duplicate_initializer;
pub mod fix;
mod fixed_batch_input;
mod fp32_weights;
mod heavy_conv;
mod large_fc_head;
mod memory_budget;
mod oversized_linear;
mod unknown_op;
mod unused_initializer;

use std::sync::OnceLock;

pub use context::{LintContext, Settings};
pub use fix::{Fix, Plan, RewriteKind, Safety};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::util::suggest::{suggest, unknown_key};

crate::named_enum! {
    /// How serious a finding is (ordered: info < warning < error).
    #[derive(PartialOrd, Ord)]
    pub enum Severity {
        /// Worth knowing.
        Info = "info",
        /// Worth fixing.
        Warning = "warning",
        /// Must be fixed.
        Error = "error",
    }
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

/// A rule's settings from the configuration file.
#[derive(Clone, Debug, Default)]
pub struct RuleSettings {
    pub enabled: Option<bool>,
    pub severity: Option<Severity>,
    pub ignore_nodes: Vec<String>,
    pub options: toml::Table,
}

/// Which rules run and how, as the application resolved it from the command line and the
/// configuration file.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Selectors of the rules to run; every rule when `None`.
    pub select: Option<Vec<String>>,
    /// Selectors of rules not to run.
    pub ignore: Vec<String>,
    /// Node-name globs no rule reports.
    pub ignore_nodes: Vec<String>,
    /// Per-rule settings, by rule name.
    pub rules: std::collections::BTreeMap<String, RuleSettings>,
    /// The configuration file the settings came from, for messages.
    pub source: Option<std::path::PathBuf>,
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
    pub rewrite: Option<RewriteKind>,
    /// How the proposed fix, as `rewrite` applies it by default, changes the function.
    #[serde(default)]
    pub safety: Option<Safety>,
    /// The options (thresholds), with their defaults and documentation.
    #[serde(default)]
    pub options: std::collections::BTreeMap<String, OptionMeta>,
    pub docs: RuleDocs,
}

/// One rule option: its default and what it means.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptionMeta {
    pub default: toml::Value,
    pub doc: String,
}

impl RuleMeta {
    /// The options' default values.
    pub fn defaults(&self) -> toml::Table {
        self.options
            .iter()
            .map(|(k, o)| (k.clone(), o.default.clone()))
            .collect()
    }
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
    /// The fix as `nnlint rewrite` applies it, when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Fix>,
}

/// A lint rule. `check` inspects the model and returns findings; it never changes anything.
pub trait Rule: Sync {
    /// The rule's name (kebab-case), which finds its metadata.
    fn name(&self) -> &'static str;
    /// The rule's data file (metadata, documentation, options), `rule_data!("NL101-name")`.
    fn data(&self) -> RuleData;
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
    &unknown_op::UnknownOp,
];

/// A rule's data file under `rules/`, embedded: its file name and text.
pub struct RuleData {
    pub file: &'static str,
    pub text: &'static str,
}

/// Embeds `rules/NAME.toml` (called in each rule's file, beside the code it documents).
macro_rules! rule_data {
    ($file:literal) => {
        $crate::rules::RuleData {
            file: concat!($file, ".toml"),
            text: include_str!(concat!("../../rules/", $file, ".toml")),
        }
    };
}
pub(crate) use rule_data;

/// Every rule's metadata, parsed once. A malformed data file is a build defect, caught by tests.
pub fn all_meta() -> &'static [RuleMeta] {
    static META: OnceLock<Vec<RuleMeta>> = OnceLock::new();
    META.get_or_init(|| {
        RULES
            .iter()
            .map(|r| {
                let d = r.data();
                toml::from_str::<RuleMeta>(d.text)
                    .unwrap_or_else(|e| panic!("rules/{} is malformed: {e}", d.file))
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
    let mut merged = meta.defaults();
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
        out.push_str(&format!(" Fix: the {r} rewrite"));
        if let Some(s) = meta.safety {
            out.push_str(&format!(" ({s})"));
        }
        out.push('.');
    }
    out.push_str(&format!(
        "\n\n{h}# What it does\n\n{}\n\n{h}# Why is this bad?\n\n{}\n\n{h}# Example\n\n{}\n\n{h}# Use instead\n\n{}\n\n{h}# Rewrite safety\n\n{}\n",
        d.what, d.why, d.example, d.instead, d.rewrite_safety
    ));
    out.push_str(&format!("\n{h}# Options\n\n"));
    if meta.options.is_empty() {
        out.push_str("None.\n");
    } else {
        for (k, o) in &meta.options {
            out.push_str(&format!("- `{k}` = `{}`: {}\n", o.default, o.doc));
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
        for (r, m) in RULES.iter().zip(meta) {
            assert_eq!(
                r.data().file,
                format!("{}-{}.toml", m.code, m.name),
                "file names follow CODE-name"
            );
            assert_eq!(r.name(), m.name, "the rule's name is its data file's");
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

/// Whether a rule runs under a selection.
pub fn enabled(meta: &RuleMeta, selection: &Selection) -> bool {
    let selected = match &selection.select {
        Some(sel) => sel.iter().any(|s| selects(s, meta)),
        None => true,
    };
    let ignored = selection.ignore.iter().any(|s| selects(s, meta));
    let rule_on = selection
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
    config: &Selection,
) -> crate::Result<Outcome> {
    let cx = LintContext::new(model, settings)?;
    let mut out = Outcome::default();
    let empty = toml::Table::new();
    let mut used_globs: std::collections::HashSet<String> = std::collections::HashSet::new();
    for rule in RULES {
        let meta = rule.meta();
        if !enabled(meta, config) {
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
                if crate::util::glob::glob_match(g, &f.node) {
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
