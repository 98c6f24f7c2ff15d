//! SARIF 2.1.0, as GitHub code scanning accepts it: rule metadata from the rule data files, one
//! result per finding with the model as its artifact and the node as a logical location, and a
//! stable partial fingerprint (rule, file name, node) so alerts persist across runs.

use serde_json::{json, Value};

use super::lint::LintRun;
use crate::rules::baseline::fingerprint;
use crate::rules::{self, Severity};

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A relative URI for the artifact (`./x` and Windows separators normalised).
fn uri(model: &str) -> String {
    let u = model.replace('\\', "/");
    u.strip_prefix("./").unwrap_or(&u).to_string()
}

pub fn render(run: &LintRun) -> String {
    let metas = rules::all_meta();
    let rules_json: Vec<Value> = metas
        .iter()
        .map(|m| {
            json!({
                "id": m.code,
                "name": m.name,
                "shortDescription": {"text": m.summary},
                "fullDescription": {"text": m.docs.what},
                "help": {"text": rules::explain(m), "markdown": rules::explain(m)},
                "defaultConfiguration": {"level": level(m.severity)},
                "properties": {"category": m.category, "tags": [m.category]},
            })
        })
        .collect();
    let mut results = Vec::new();
    let mut notifications = Vec::new();
    for file in &run.files {
        if let Some(e) = &file.error {
            notifications.push(json!({"level": "error", "message": {"text": e}}));
            continue;
        }
        for f in &file.findings {
            let index = metas.iter().position(|m| m.code == f.code).unwrap_or(0);
            results.push(json!({
                "ruleId": f.code,
                "ruleIndex": index,
                "level": level(f.severity),
                "message": {"text": format!("{} ({}): {}; fix: {}", f.node, f.op, f.message, f.fix)},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&file.model)},
                        "region": {"startLine": 1}
                    },
                    "logicalLocations": [{"name": f.node, "kind": "element"}]
                }],
                "partialFingerprints": {"nnlintFinding/v1": fingerprint(&file.model, f)},
                "properties": {
                    "node": f.node,
                    "op": f.op,
                    "measured": f.measured,
                    "limit": f.limit,
                    "unit": f.unit,
                    "fix": f.fix,
                    "saving": f.saving,
                    "rewrite": f.rewrite,
                }
            }));
        }
    }
    let sarif = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "nnlint",
                "version": env!("CARGO_PKG_VERSION"),
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "rules": rules_json,
            }},
            "invocations": [{
                "executionSuccessful": notifications.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }]
    });
    let mut s = serde_json::to_string_pretty(&sarif).expect("SARIF serialises");
    s.push('\n');
    s
}
