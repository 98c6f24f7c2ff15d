//! `nnlint report` (and `mem --format html`): the page of a bundled model has every section, its
//! charts, nothing fetched from outside, and escapes what the model names; it is written
//! atomically, beside the input by default, and never over the input.

mod common;

use common::onnx::{node, vi, FLOAT, G};
use common::{fixture, nnlint, stderr, stdout};

const SECTIONS: [&str; 6] = ["summary", "layers", "liveness", "training", "fit", "lint"];

fn page(args: &[&str]) -> String {
    let out = nnlint(args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

/// What no self-contained page may hold: a URL, a script, a stylesheet or image fetched from
/// elsewhere.
fn assert_self_contained(html: &str) {
    for bad in [
        "http:", "https:", "<script", "<link", "src=", "url(", "@import",
    ] {
        assert!(!html.contains(bad), "the page holds '{bad}'");
    }
}

#[test]
fn the_report_of_a_bundled_model_has_every_section_and_chart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("minicnn.html");
    let o = nnlint(&[
        "report",
        &fixture("models/torch/minicnn.onnx"),
        "--batch",
        "32",
        "--gpu",
        "T4",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("open it in a browser"),
        "{}",
        stderr(&o)
    );
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    for id in SECTIONS {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "section {id} missing"
        );
    }
    for chart in [
        "layer-chart",
        "liveness-chart",
        "peak-marker",
        "training-bar",
        "fit-plans",
        "findings",
    ] {
        assert!(html.contains(&format!("id=\"{chart}\"")), "{chart} missing");
    }
    // one bar group per layer of the table (17 layers), each with its numbers on hover
    let chart = &html[html.find("id=\"layer-chart\"").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert_eq!(chart.matches("<title>").count(), 17, "{chart}");
    assert!(chart.contains("activations: 2 MiB"));
    // the numbers are `nnlint mem`'s
    assert!(html.contains("4 MiB"), "the inference peak");
    assert!(
        html.contains("\n4 MiB live</title>"),
        "the curve reaches the peak"
    );
    assert!(html.contains("T4"));
    assert!(html.contains("heavy-standard-conv") && html.contains("saves"));
    assert!(html.matches("<svg").count() >= 4);
    assert_self_contained(&html);
}

#[test]
fn the_page_goes_to_standard_output_with_dash_and_mem_renders_html() {
    let model = fixture("models/torch/minicnn.onnx");
    let html = page(&["report", &model, "-o", "-"]);
    assert!(html.contains("id=\"liveness-chart\""));
    let mem = page(&["mem", &model, "--format", "html", "--train"]);
    for id in ["layers", "liveness", "training"] {
        assert!(mem.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(!mem.contains("id=\"fit\"") && !mem.contains("id=\"lint\""));
    assert_self_contained(&mem);
    let plain = page(&["mem", &model, "--format", "html"]);
    assert!(
        plain.contains("add --train"),
        "no estimate, and it says why"
    );
}

#[test]
fn by_default_the_page_is_written_beside_the_input_and_never_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("minicnn.onnx");
    std::fs::copy(fixture("models/torch/minicnn.onnx"), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let o = nnlint(&["report", model.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dir.path().join("minicnn-report.html").is_file());
    let o = nnlint(&[
        "report",
        model.to_str().unwrap(),
        "-o",
        model.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("never replaces"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&model).unwrap(), before);
    // no temporary files are left behind
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_checkpoint_folder_is_reported_from_its_index_and_activations_are_unknown() {
    let html = page(&[
        "report",
        &fixture("models/safetensors/tiny_transformer_bf16"),
        "-o",
        "-",
    ]);
    assert!(html.contains("model.safetensors.index.json"));
    assert!(html.contains("a weights file has no graph"));
    assert!(
        !html.contains("id=\"liveness-chart\""),
        "no curve without a graph"
    );
    assert!(
        html.contains("id=\"layer-chart\""),
        "the parameters still are"
    );
    let o = nnlint(&["report", &fixture("models/torch"), "-o", "-"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("torch: is a directory without a config.json and with"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unbound_dimensions_leave_the_peak_unknown_not_zero() {
    let html = page(&[
        "report",
        &fixture("models/torch/tiny_transformer_dynamo.onnx"),
        "-o",
        "-",
    ]);
    assert!(
        html.contains("peak unknown"),
        "the curve says why it is missing"
    );
    assert!(!html.contains("id=\"peak-marker\""));
    assert!(html.contains("depend on unbound dimensions"));
    assert!(html.contains("not estimated") && html.contains("--dim seq"));
    let bound = page(&[
        "report",
        &fixture("models/torch/tiny_transformer_dynamo.onnx"),
        "--dim",
        "seq=128",
        "-o",
        "-",
    ]);
    assert!(bound.contains("id=\"peak-marker\"") && bound.contains("id=\"training-bar\""));
}

#[test]
fn names_from_the_model_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("hostile.onnx");
    let name = "<script>alert('x')</script>&\"";
    let bytes = G::new("g")
        .input(vi("x", FLOAT, &[1, 8]))
        .output(vi("y", FLOAT, &[1, 8]))
        .node(node("Relu", name, &["x"], &["y"]))
        .model();
    std::fs::write(&model, bytes).unwrap();
    let html = page(&["report", model.to_str().unwrap(), "-o", "-"]);
    assert!(!html.contains("<script"), "raw markup from the model");
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
}

#[test]
fn a_rewrite_is_shown_before_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slim.onnx");
    let model = fixture("models/rewrite/vgg_like.onnx");
    let o = nnlint(&[
        "rewrite",
        &model,
        "-o",
        out.to_str().unwrap(),
        "--no-verify",
        "--no-config",
        "--lossy",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let html = page(&[
        "report",
        &model,
        "--rewritten",
        out.to_str().unwrap(),
        "--no-config",
        "-o",
        "-",
    ]);
    for id in ["rewrite", "rewrite-totals", "rewrites-applied"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    let totals = &html[html.find("id=\"rewrite-totals\"").unwrap()..];
    assert!(totals.contains("parameters") && totals.contains('%'));
    assert_self_contained(&html);
}

#[test]
fn quiet_drops_notices_but_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    let model = fixture("models/torch/minicnn.onnx");
    let o = nnlint(&["report", &model, "-o", out.to_str().unwrap(), "--quiet"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(out.is_file());
    let o = nnlint(&["-q", "mem", "no-such-model.onnx"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no-such-model.onnx"), "{}", stderr(&o));
}

#[test]
fn a_language_model_folder_takes_mems_options() {
    // issue 22: `report DIR` refused --seq, which `mem DIR` takes
    let html = page(&[
        "report",
        "testdata/llm/llama",
        "--seq",
        "24",
        "--batch",
        "2",
        "-o",
        "-",
    ]);
    assert!(html.contains("seq=24"), "the page is for the asked shape");
    // on an ONNX graph they are refused, in one grammatical line with the way to bind it
    let out = nnlint(&[
        "report",
        "testdata/models/torch/minicnn.onnx",
        "--seq",
        "24",
        "-o",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--seq applies only to language-model checkpoints") && err.contains("--dim"),
        "{err}"
    );
}

/// Issue 22: a checkpoint folder's page has what `fit` and `mem` say for it: the fit plans for
/// `--gpu` (the same batches as `nnlint fit`), the per-layer activations and MACs the totals add
/// up, a legend naming every series drawn, and parameters counted as `mem` counts them.
#[test]
fn a_language_model_page_has_fits_plans_and_its_layers_numbers() {
    let dir = "testdata/llm/llama";
    let html = page(&[
        "report", dir, "--seq", "24", "--batch", "2", "--gpu", "T4", "-o", "-",
    ]);
    let section = |id: &str| {
        let i = html
            .find(&format!("<section id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id} section"));
        let j = html[i..].find("</section>").unwrap() + i;
        html[i..j].to_string()
    };
    let fit = section("fit");
    assert!(!fit.contains("not computed"), "{fit}");
    assert!(fit.contains("T4"), "{fit}");
    let f = common::run_json(&["fit", dir, "--seq", "24", "--gpu", "T4", "--format", "json"]);
    let plans = f["plans"].as_array().unwrap();
    assert!(plans.len() > 2);
    for p in plans {
        let name = p["name"].as_str().unwrap();
        let row = fit
            .lines()
            .find(|l| l.contains(&format!("<td>{}</td>", name)))
            .unwrap_or_else(|| panic!("no row for {name}: {fit}"));
        let peak = nnlint::util::units::bytes(p["peak_bytes"].as_u64().unwrap());
        assert!(row.contains(&peak), "{name}: {peak} not in {row}");
    }
    // every layer row has numbers where `mem` has them: no n/a for what the architecture gives
    let layers = section("layers");
    let table = &layers[layers.find("id=\"largest-layers\"").unwrap()..];
    assert!(!table.contains(">n/a<"), "{table}");
    assert!(
        layers.contains("output activations"),
        "the legend names the series drawn"
    );
    assert!(
        !layers.contains("saved for backward (training)</"),
        "no saved series is drawn, so the legend does not name it: {layers}"
    );
    let m = common::run_json(&[
        "mem", dir, "--seq", "24", "--batch", "2", "--format", "json",
    ]);
    for l in m["layers"].as_array().unwrap() {
        let name = l["name"].as_str().unwrap();
        if let Some(row) = table
            .lines()
            .find(|r| r.contains(&format!("title=\"{name}\"")))
        {
            let params = nnlint::util::units::count(l["params"].as_u64().unwrap());
            assert!(
                row.contains(&format!(">{params}<")),
                "{name}: {params} in {row}"
            );
        }
    }
}

#[test]
fn a_graph_of_thousands_of_layers_draws_at_most_2000_bars_and_says_so() {
    // 4,500 layers: a chain of Relu, with one wider layer (a Tile x 8) in the middle, whose bar
    // and the peak must survive the grouping
    let n = 4500;
    let mut g = G::new("long").input(vi("x", FLOAT, &[1, 64])).output(vi(
        &format!("v{n}"),
        FLOAT,
        &[1, 64],
    ));
    let reps = common::onnx::ints("reps", &[1, 8]);
    let starts = common::onnx::ints("starts", &[0, 0]);
    let ends = common::onnx::ints("ends", &[1, 64]);
    g = g.init(reps).init(starts).init(ends);
    for i in 0..n {
        let (a, b) = (
            if i == 0 {
                "x".to_string()
            } else {
                format!("v{i}")
            },
            format!("v{}", i + 1),
        );
        g = match i {
            2000 => g.node(node("Tile", "wide", &[&a, "reps"], &[&b])),
            2001 => g.node(node("Slice", "narrow", &[&a, "starts", "ends"], &[&b])),
            _ => g.node(node("Relu", &format!("relu{i}"), &[&a], &[&b])),
        };
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.onnx");
    std::fs::write(&path, g.model()).unwrap();
    let html = page(&["report", path.to_str().unwrap(), "-o", "-"]);
    let section = |id: &str| {
        let start = html.find(&format!("<section id=\"{id}\"")).unwrap();
        let end = start + html[start..].find("</section>").unwrap();
        &html[start..end]
    };
    let layers = section("layers");
    // 4,500 layers in groups of 3
    assert_eq!(layers.matches("<g><title>").count(), 1500, "{layers}");
    assert!(layers.contains(
        "4500 layers: each bar stands for 3 consecutive layers and draws the largest of them"
    ));
    // the wide layer is its group's bar
    assert!(layers.contains("layers 1999 to 2001 of 4500, the largest shown:\nwide (Tile)"));
    let live = section("liveness");
    assert!(live.contains("4500 steps: each point stands for 3 consecutive steps"));
    assert_eq!(live.matches("<rect x=").count(), 1500);
    // the peak (the Tile's input and output, 256 + 2,048 bytes) is on the curve and marked
    assert!(live.contains("id=\"peak-marker\""), "{live}");
    assert!(live.contains("the most at step 2001: wide"), "{live}");
}
