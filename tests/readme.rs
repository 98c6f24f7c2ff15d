//! Every command the README shows runs, and prints what the README says it prints: each ```text
//! block that starts with `$ nnlint ...` is run (a bare model name such as `resnet18.onnx` is the
//! bundled torchvision fixture, staged with its external data file beside it, run from its folder)
//! and its standard output compared line by line. `...` on a line of its own stands for any lines;
//! inside a line, for any text. Lines the README leaves out at the start or end are not compared.
//! A block preceded by `<!-- readme-test: skip (why) -->` is not run (the line says why).

mod common;

use std::path::Path;

/// (command, expected lines) of every runnable block.
fn blocks(readme: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = readme.lines().peekable();
    let mut skip_next = false;
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("<!-- readme-test: skip") {
            skip_next = true;
            continue;
        }
        if line.trim() != "```text" {
            continue;
        }
        let mut body = Vec::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            body.push(l.to_string());
        }
        let skip = std::mem::take(&mut skip_next);
        if let Some(cmd) = body.first().and_then(|l| l.strip_prefix("$ nnlint ")) {
            if !skip {
                out.push((cmd.to_string(), body[1..].to_vec()));
            }
        }
    }
    out
}

/// Whether `got` matches `want`, where `...` stands for any text.
fn line_matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split("...").collect();
    if parts.len() == 1 {
        return want.trim_end() == got.trim_end();
    }
    let mut rest = got;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.trim_end().ends_with(p.trim_end());
        } else {
            match rest.find(p) {
                Some(k) => rest = &rest[k + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Whether the expected chunks (split at `...` lines) appear in order, each contiguous.
fn output_matches(want: &[String], got: &str) -> Result<(), String> {
    let got: Vec<&str> = got.lines().collect();
    let mut at = 0;
    for chunk in want.split(|l| l.trim() == "...") {
        if chunk.is_empty() {
            continue;
        }
        if got.len() < at + chunk.len() {
            return Err(format!("not found in order:\n{}", chunk.join("\n")));
        }
        let found = (at..=got.len() - chunk.len()).find(|&s| {
            chunk
                .iter()
                .zip(&got[s..s + chunk.len()])
                .all(|(w, g)| line_matches(w, g))
        });
        match found {
            Some(s) => at = s + chunk.len(),
            None => return Err(format!("not found in order:\n{}", chunk.join("\n"))),
        }
    }
    Ok(())
}

#[test]
fn every_readme_command_prints_what_the_readme_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = blocks(&readme);
    assert!(blocks.len() >= 5, "found {} blocks", blocks.len());
    let mut failures = Vec::new();
    for (cmd, want) in &blocks {
        let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        // a bare model name is a bundled torchvision fixture, run from its staged folder
        let bare = args
            .iter()
            .find(|a| a.ends_with(".onnx") && !a.contains('/'))
            .cloned();
        let staged = bare.map(|m| common::stage(&format!("models/torch/{m}")));
        let dir = staged.as_ref().map_or(root.to_path_buf(), |s| {
            s.path.parent().unwrap().to_path_buf()
        });
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nnlint"))
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        if let Err(e) = output_matches(want, &got) {
            failures.push(format!(
                "$ nnlint {cmd}\n{e}\n--- got (exit {:?}):\n{got}{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_matcher_takes_ellipses() {
    assert!(line_matches("a ...; b", "a x y; b"));
    assert!(!line_matches("a ...; b", "a x y; c"));
    let want: Vec<String> = ["x", "...", "z"].iter().map(|s| s.to_string()).collect();
    assert!(output_matches(&want, "h\nx\ny\nz\nt\n").is_ok());
    assert!(output_matches(&want, "z\nx\n").is_err());
}

/// The README's CI workflow uses this repository's action (no install from a placeholder URL), and
/// the action calls `nnlint lint` in formats that exist.
#[test]
fn the_ci_workflow_uses_the_action_of_this_repository() {
    use nnlint::report::lint::LintFormat;
    use nnlint::util::names::Named;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let action = std::fs::read_to_string(root.join("action.yml")).unwrap();
    assert!(readme.contains("- uses: OWNER/nnlint@v0"));
    assert!(!readme.contains("github.com/OWNER"), "a placeholder URL");
    assert!(action.contains("using: composite"));
    for input in ["paths", "args", "version", "wheel", "sarif-file"] {
        assert!(action.contains(&format!("\n  {input}:\n")), "input {input}");
    }
    for format in ["github", "sarif", "markdown"] {
        assert!(action.contains(&format!("--format {format}")), "{format}");
        assert!(LintFormat::from_name(format).is_some(), "{format}");
    }
    assert!(action.contains("GITHUB_STEP_SUMMARY") && action.contains("upload-sarif@"));
}
