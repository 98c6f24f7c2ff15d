//! The module tree is a pipeline whose imports only point down: every `crate::X` path in `src/`
//! must name a module of a lower layer than the file's own (or its own), and clap and indicatif
//! appear only in the application layer. docs/architecture.md describes the layers.

use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may import its own layer and the ones before it.
const LAYERS: &[&str] = &[
    "util", "error", "ir", "load", "analysis", "rules", "rewrite", "verify", "report", "app",
];

/// Items the crate root re-exports, and the layer they belong to.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("Error", "error"),
    ("Result", "error"),
    ("named_enum", "util"),
    ("run", "app"),
    ("ExitStatus", "app"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (doc comments name higher modules in prose).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names following `crate::` (or `$crate::`) in the code.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `some_crate::`
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            // `use crate::{a, b}`: every name in the braces
            if let Some(body) = rest.strip_prefix('{') {
                let end = body.find('}').unwrap_or(body.len());
                for part in body[..end].split(',') {
                    let n: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !n.is_empty() {
                        out.push(n);
                    }
                }
            }
            continue;
        }
        out.push(name);
    }
    out
}

fn layer_of(name: &str) -> Option<usize> {
    let name = ROOT_ITEMS
        .iter()
        .find(|(item, _)| *item == name)
        .map_or(name, |(_, layer)| *layer);
    LAYERS.iter().position(|l| *l == name)
}

#[test]
fn imports_only_point_down_the_pipeline() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs");
        if top == "lib" || top == "main" {
            continue;
        }
        let own = layer_of(top).unwrap_or_else(|| {
            panic!(
                "src/{}: module '{top}' is in no layer of LAYERS",
                rel.display()
            )
        });
        let text = std::fs::read_to_string(f).unwrap();
        for name in crate_paths(&code(&text)) {
            checked += 1;
            match layer_of(&name) {
                Some(l) if l <= own => {}
                Some(_) => violations.push(format!(
                    "src/{}: {top} imports crate::{name}, a higher layer",
                    rel.display()
                )),
                None => violations.push(format!(
                    "src/{}: crate::{name} is in no layer",
                    rel.display()
                )),
            }
        }
    }
    assert!(checked > 100, "the scan found only {checked} crate paths");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn clap_and_indicatif_stay_in_the_application_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if rel.starts_with("app/") || rel == "main.rs" {
            continue;
        }
        let code = code(&std::fs::read_to_string(f).unwrap());
        for dep in ["clap::", "indicatif::"] {
            assert!(!code.contains(dep), "src/{rel} uses {dep}");
        }
    }
}

#[test]
fn the_scanner_reads_paths_and_braces() {
    assert_eq!(
        crate_paths("use crate::ir::Dim;\nuse crate::{error, load};\nmy_crate::x; $crate::util::y"),
        ["ir", "error", "load", "util"]
    );
}
