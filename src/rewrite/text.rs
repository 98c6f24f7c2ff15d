//! A line-per-item text rendering of a graph, for `nnlint rewrite --diff`: inputs, initializers
//! (name, type, shape), nodes (`outputs = Op[attrs](inputs)  # name`) and outputs, in file order, so
//! a unified diff of two renderings shows exactly which nodes and weights a rewrite changed.

use similar::TextDiff;

use crate::ir::{Attr, Graph, Model};

fn attr_text(a: &Attr) -> String {
    match a {
        Attr::Int(i) => i.to_string(),
        Attr::Float(f) => format!("{f}"),
        Attr::Ints(v) => format!("{v:?}"),
        Attr::Floats(v) => format!("{v:?}"),
        Attr::String(s) => format!("{:?}", String::from_utf8_lossy(s)),
        Attr::Tensor(t) => format!("<{} {:?}>", t.dtype.name(), t.dims),
        other => format!("<{}>", other.kind()),
    }
}

/// The graph as text.
pub fn render(model: &Model) -> String {
    let g: &Graph = &model.graph;
    let mut out = String::new();
    let ty = |v: usize| -> String {
        match &g.values[v].declared {
            Some(d) => format!(
                "{}{}",
                d.dtype.map_or("?", |t| t.name()),
                d.shape
                    .as_ref()
                    .map_or("[?]".into(), |s| crate::ir::shape_to_string(s))
            ),
            None => "?".into(),
        }
    };
    for &v in &g.inputs {
        out.push_str(&format!("input {}: {}\n", g.value_name(v), ty(v)));
    }
    let mut inits: Vec<_> = g.initializers().collect();
    inits.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    for (_, t) in inits {
        out.push_str(&format!(
            "init {}: {}{:?}\n",
            t.name,
            t.dtype.name(),
            t.dims
        ));
    }
    let name = |v: Option<usize>| v.map_or(String::new(), |v| g.value_name(v).to_string());
    for n in &g.nodes {
        let attrs: Vec<String> = n
            .attrs
            .0
            .iter()
            .map(|(k, a)| format!("{k}={}", attr_text(a)))
            .collect();
        out.push_str(&format!(
            "{} = {}{}({})  # {}\n",
            n.outputs().iter().map(name).collect::<Vec<_>>().join(", "),
            n.op_type,
            if attrs.is_empty() {
                String::new()
            } else {
                format!("[{}]", attrs.join(", "))
            },
            n.inputs().iter().map(name).collect::<Vec<_>>().join(", "),
            g.name(n.name)
        ));
    }
    for &v in &g.outputs {
        out.push_str(&format!("output {}: {}\n", g.value_name(v), ty(v)));
    }
    out
}

/// A unified diff of two models' renderings.
pub fn diff(before: &Model, after: &Model) -> String {
    let (a, b) = (render(before), render(after));
    TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(2)
        .header(
            &before.path.display().to_string(),
            &after.path.display().to_string(),
        )
        .to_string()
}
