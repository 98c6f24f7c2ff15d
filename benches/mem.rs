//! Performance benchmark of `nnlint mem` (in-process).
//!
//! Generates synthetic ONNX models with the crate's own prost types (the writer is in
//! `benches/support/mod.rs`, shared with `benches/rewrite.rs`) and times
//! `nnlint::analysis::analyze_path` + `nnlint::report::render_mem` on them:
//!
//! * `big`: a CNN/attention hybrid with > 500 MB of float32 `raw_data` initializers and > 1,000
//!   nodes (the foundation issue's benchmark model). It is written piece by piece, so the generator
//!   never holds the weights in memory.
//! * `s1k`, `s10k`, `s100k`: the same block structure with small weights and ~1k, ~10k, ~100k nodes,
//!   for the scaling series (ns per node).
//!
//! Models go to `target/bench-models/v1/` (or `$CARGO_TARGET_DIR/bench-models/v1/`) and are reused
//! when present. Usage:
//!
//! ```text
//! cargo bench --bench mem                    # generate if needed, time everything, print a table
//! cargo bench --bench mem -- --generate-only # only write the models, print their paths
//! cargo bench --bench mem -- --quick         # fewer iterations
//! ```
//!
//! No wall-clock limits are asserted anywhere: this prints figures, it does not judge them. The
//! end-to-end measurements (real binary, peak RSS, cold page cache, Python onnx) are in
//! `benches/run.sh`.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nnlint::analysis::Bindings;
use nnlint::load::onnx_pb as pb;
use nnlint::report::{render_mem, MemFormat, ViewOptions};
use support::{attr_float, attr_int, attr_ints, attr_tensor, i64_bytes, value_info, Builder, I64};

/// Bump when the generated models change, so stale files are not reused.
const GEN_VERSION: &str = "v1";

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

impl Builder {
    fn conv(&mut self, scope: &str, x: &str, cin: i64, cout: i64, k: i64, bias: bool) -> String {
        let w = self.weight(&format!("{scope}.weight"), &[cout, cin, k, k], true);
        let mut ins = vec![x.to_string(), w];
        if bias {
            ins.push(self.weight(&format!("{scope}.bias"), &[cout], true));
        }
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let p = k / 2;
        self.node1(
            scope,
            "Conv",
            &ins,
            vec![
                attr_ints("dilations", &[1, 1]),
                attr_int("group", 1),
                attr_ints("kernel_shape", &[k, k]),
                attr_ints("pads", &[p, p, p, p]),
                attr_ints("strides", &[1, 1]),
            ],
        )
    }

    fn batch_norm(&mut self, scope: &str, x: &str, c: i64) -> String {
        let s = self.weight(&format!("{scope}.weight"), &[c], true);
        let b = self.weight(&format!("{scope}.bias"), &[c], true);
        let m = self.weight(&format!("{scope}.running_mean"), &[c], false);
        let v = self.weight(&format!("{scope}.running_var"), &[c], false);
        self.node1(
            scope,
            "BatchNormalization",
            &[x, &s, &b, &m, &v],
            vec![attr_float("epsilon", 1e-5), attr_float("momentum", 0.9)],
        )
    }

    /// One block on `[N, C, H, W]`, 24 nodes: a residual conv pair (Conv, BatchNormalization, Relu,
    /// Conv, BatchNormalization, Add, Relu), then single-head spatial self-attention whose reshapes
    /// are computed at run time from the input's shape (Shape → Gather → Concat → Reshape, the way
    /// exporters write dynamic batch), MatMul projections, Softmax, and a residual Add.
    fn block(&mut self, i: usize, x: &str, c: i64) -> String {
        let s = format!("/blocks.{i}");
        // residual conv pair
        let y = self.conv(&format!("{s}/conv1"), x, c, c, 3, true);
        let y = self.batch_norm(&format!("{s}/bn1"), &y, c);
        let y = self.node1(&format!("{s}/relu1"), "Relu", &[&y], vec![]);
        let y = self.conv(&format!("{s}/conv2"), &y, c, c, 3, false);
        let y = self.batch_norm(&format!("{s}/bn2"), &y, c);
        let y = self.node1(&format!("{s}/add1"), "Add", &[x, &y], vec![]);
        let r = self.node1(&format!("{s}/relu2"), "Relu", &[&y], vec![]);
        // attention over the H*W positions
        let a = format!("{s}/attn");
        let shape = self.node1(&a, "Shape", &[&r], vec![]);
        let idx = self.const_i64(&format!("{a}/Constant_index"), &[0]);
        let n = self.node1(&a, "Gather", &[&shape, &idx], vec![attr_int("axis", 0)]);
        let tail = self.node1(
            &format!("{a}/tail"),
            "Constant",
            &[],
            vec![attr_tensor(
                "value",
                pb::TensorProto {
                    dims: vec![2],
                    data_type: Some(I64),
                    raw_data: Some(Bytes::from(i64_bytes(&[c, -1]))),
                    ..Default::default()
                },
            )],
        );
        let target = self.node1(&a, "Concat", &[&n, &tail], vec![attr_int("axis", 0)]);
        let flat = self.node1(&format!("{a}/flatten"), "Reshape", &[&r, &target], vec![]);
        let t = self.node1(
            &format!("{a}/in"),
            "Transpose",
            &[&flat],
            vec![attr_ints("perm", &[0, 2, 1])],
        );
        let wq = self.weight(&format!("{a}.q.weight"), &[c, c], true);
        let wk = self.weight(&format!("{a}.k.weight"), &[c, c], true);
        let wv = self.weight(&format!("{a}.v.weight"), &[c, c], true);
        let q = self.node1(&format!("{a}/q"), "MatMul", &[&t, &wq], vec![]);
        let k = self.node1(&format!("{a}/k"), "MatMul", &[&t, &wk], vec![]);
        let v = self.node1(&format!("{a}/v"), "MatMul", &[&t, &wv], vec![]);
        let kt = self.node1(
            &format!("{a}/kt"),
            "Transpose",
            &[&k],
            vec![attr_ints("perm", &[0, 2, 1])],
        );
        let scores = self.node1(&format!("{a}/scores"), "MatMul", &[&q, &kt], vec![]);
        let scale = self.scalar_f32(&format!("{a}/Constant_scale"), 1.0 / (c as f32).sqrt());
        let scores = self.node1(&a, "Mul", &[&scores, &scale], vec![]);
        let probs = self.node1(&a, "Softmax", &[&scores], vec![attr_int("axis", -1)]);
        let o = self.node1(&format!("{a}/out"), "MatMul", &[&probs, &v], vec![]);
        let o = self.node1(
            &format!("{a}/back"),
            "Transpose",
            &[&o],
            vec![attr_ints("perm", &[0, 2, 1])],
        );
        let o = self.node1(&format!("{a}/unflatten"), "Reshape", &[&o, &shape], vec![]);
        self.node1(&format!("{s}/add2"), "Add", &[&r, &o], vec![])
    }

    fn gemm(&mut self, scope: &str, x: &str, cin: i64, cout: i64) -> String {
        let w = self.weight(&format!("{scope}.weight"), &[cout, cin], true);
        let b = self.weight(&format!("{scope}.bias"), &[cout], true);
        self.node1(
            scope,
            "Gemm",
            &[x, &w, &b],
            vec![
                attr_float("alpha", 1.0),
                attr_float("beta", 1.0),
                attr_int("transB", 1),
            ],
        )
    }
}

/// What a generated model is made of.
#[derive(Clone, Copy, Debug)]
struct Spec {
    name: &'static str,
    /// Channels of the trunk.
    c: i64,
    /// Spatial side (H = W).
    hw: i64,
    blocks: usize,
    /// Hidden widths of the MLP head (Gemm + Relu each), then a 1000-way classifier.
    head: &'static [i64],
}

/// stem (Conv + Relu), `blocks` blocks, head (GlobalAveragePool, Flatten, Gemm+Relu..., Gemm,
/// Softmax).
fn build(spec: &Spec) -> Builder {
    let mut b = Builder {
        seed: 0x5eed,
        ..Default::default()
    };
    let (c, hw) = (spec.c, spec.hw);
    b.inputs.push(value_info("input", "batch", &[3, hw, hw]));
    let x = b.conv("/stem/conv", "input", 3, c, 3, true);
    let mut x = b.node1("/stem/relu", "Relu", &[&x], vec![]);
    for i in 0..spec.blocks {
        x = b.block(i, &x, c);
    }
    let x = b.node1("/head/pool", "GlobalAveragePool", &[&x], vec![]);
    let mut x = b.node1("/head/flatten", "Flatten", &[&x], vec![attr_int("axis", 1)]);
    let mut width = c;
    for (i, &h) in spec.head.iter().enumerate() {
        let y = b.gemm(&format!("/head/fc{i}"), &x, width, h);
        x = b.node1(&format!("/head/act{i}"), "Relu", &[&y], vec![]);
        width = h;
    }
    let y = b.gemm("/head/classifier", &x, width, 1000);
    b.node1(
        "/head/softmax",
        "Softmax",
        &[&y],
        vec![attr_int("axis", -1)],
    );
    // the graph output is named "output", as exporters do
    b.nodes.last_mut().unwrap().output = vec!["output".into()];
    b.outputs.push(value_info("output", "batch", &[1000]));
    b
}

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/// 42 blocks of 24 nodes at 384 channels, 14x14, and a 4096-wide MLP head: 1,018 nodes, 680
/// initializers, 610.7 MB of float32 weights (the two largest tensors: 67 MB and 16 MB).
const BIG: Spec = Spec {
    name: "big",
    c: 384,
    hw: 14,
    blocks: 42,
    head: &[4096, 4096],
};

/// Small-weight models for the scaling series: 8 channels, 8x8, blocks of 24 nodes (1,016, 10,016
/// and 100,016 nodes).
const fn small(name: &'static str, blocks: usize) -> Spec {
    Spec {
        name,
        c: 8,
        hw: 8,
        blocks,
        head: &[64],
    }
}

const SCALING: [Spec; 3] = [small("s1k", 42), small("s10k", 417), small("s100k", 4167)];

struct Generated {
    spec: Spec,
    path: PathBuf,
    nodes: usize,
    initializers: usize,
    weight_bytes: u64,
    params: u64,
    file_bytes: u64,
    gen_time: Option<Duration>,
}

fn ensure(spec: &Spec, dir: &Path) -> Generated {
    let b = build(spec);
    let path = dir.join(format!("{}.onnx", spec.name));
    let (file_bytes, gen_time) = match std::fs::metadata(&path) {
        Ok(m) => (m.len(), None),
        Err(_) => {
            let t = Instant::now();
            let size =
                support::write_model(&b, &format!("bench_{}", spec.name), GEN_VERSION, &path)
                    .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            (size, Some(t.elapsed()))
        }
    };
    Generated {
        spec: *spec,
        path,
        nodes: b.nodes.len(),
        initializers: b.inits.len(),
        weight_bytes: b.weight_bytes,
        params: b.params,
        file_bytes,
        gen_time,
    }
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Stats {
    n: usize,
    min: Duration,
    median: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    };
    Stats {
        n,
        min: v[0],
        median,
    }
}

/// Iterations: at least `min_iters`, then until `budget` is spent or `max_iters` reached.
/// CPU time of the calling thread, from `/proc/thread-self/schedstat` (Linux; `None` elsewhere).
/// The work is single-threaded, so this is the CPU time of the work itself.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn repeat(
    min_iters: usize,
    max_iters: usize,
    budget: Duration,
    mut f: impl FnMut(),
) -> Vec<Duration> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < min_iters || (out.len() < max_iters && start.elapsed() < budget) {
        let t = Instant::now();
        f();
        out.push(t.elapsed());
    }
    out
}

/// `nnlint::analysis::analyze_path` with the CLI's defaults (no `--batch`, `--dim` or `--train`).
fn report_of(path: &Path) -> nnlint::Result<nnlint::analysis::MemReport> {
    nnlint::analysis::analyze_path(path, &Bindings::default(), None)
}

/// One `nnlint mem` as the CLI does it (default options, table format); returns the output length.
fn mem_once(path: &Path) -> usize {
    let report = report_of(path).expect("nnlint mem succeeds");
    let text = render_mem(&report, MemFormat::Table, ViewOptions::default());
    std::hint::black_box(text).len()
}

struct Row {
    g: Generated,
    total: Stats,
    /// Mean CPU time of the same iterations (Linux only): less sensitive than wall time to other
    /// load on the machine.
    cpu_mean: Option<Duration>,
    load: Stats,
    analyze: Stats,
    render: Stats,
}

fn bench(g: Generated, quick: bool) -> Row {
    // correctness first: the report must account for the whole model
    let report = report_of(&g.path).expect("nnlint mem succeeds");
    let problems: Vec<String> = [
        (!report.warnings.is_empty()).then(|| format!("warnings: {:?}", report.warnings)),
        (!report.unknown_ops.is_empty()).then(|| format!("unknown ops: {:?}", report.unknown_ops)),
        (!report.unaccounted.is_empty())
            .then(|| format!("{} layers unaccounted", report.unaccounted.len())),
        report
            .peak
            .is_none()
            .then(|| format!("no peak: {:?}", report.peak_missing)),
        (report.totals.params != g.params).then(|| {
            format!(
                "params {} but the generator made {}",
                report.totals.params, g.params
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !problems.is_empty() {
        eprintln!(
            "warning: {}: the report is incomplete: {}",
            g.spec.name,
            problems.join("; ")
        );
    }
    drop(report);

    let (min_i, max_i, budget) = match (quick, g.nodes) {
        (true, n) if n > 50_000 => (3, 3, Duration::ZERO),
        (true, _) => (5, 10, Duration::from_millis(500)),
        (false, n) if n > 50_000 => (5, 10, Duration::from_secs(5)),
        (false, _) => (10, 50, Duration::from_secs(3)),
    };
    // warm-up (page cache, allocator)
    mem_once(&g.path);
    // CPU time over the whole loop: the kernel updates it at scheduler ticks, too coarse per iteration
    let c0 = thread_cpu();
    let total = repeat(min_i, max_i, budget, || {
        mem_once(&g.path);
    });
    let cpu_mean = match (c0, thread_cpu()) {
        (Some(c0), Some(c1)) => Some(c1.saturating_sub(c0) / total.len() as u32),
        _ => None,
    };

    // stage breakdown: the same work as analyze_path + render, split
    let (mut load, mut analyze, mut render) = (Vec::new(), Vec::new(), Vec::new());
    repeat(min_i, max_i, budget, || {
        let t0 = Instant::now();
        let nnlint::load::Loaded::Onnx(model) = nnlint::load::load(&g.path).expect("loads") else {
            unreachable!("an ONNX file")
        };
        let t1 = Instant::now();
        let report =
            nnlint::analysis::analyze(&model, &Bindings::default(), None).expect("analyses");
        drop(model);
        let t2 = Instant::now();
        let text = render_mem(&report, MemFormat::Table, ViewOptions::default());
        std::hint::black_box(text);
        drop(report);
        let t3 = Instant::now();
        load.push(t1 - t0);
        analyze.push(t2 - t1);
        render.push(t3 - t2);
    });
    Row {
        g,
        total: stats(total),
        cpu_mean,
        load: stats(load),
        analyze: stats(analyze),
        render: stats(render),
    }
}

/// `cargo test --all-targets` runs this binary without `--bench`: then only check, on the 1k-node
/// model, that generation and analysis work (no 600 MB file, no timing).
fn smoke_test(dir: &Path) {
    let g = ensure(&SCALING[0], dir);
    let report = report_of(&g.path).expect("nnlint mem succeeds");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(report.unknown_ops.is_empty(), "{:?}", report.unknown_ops);
    assert!(report.unaccounted.is_empty(), "{:?}", report.unaccounted);
    assert!(report.peak.is_some(), "{:?}", report.peak_missing);
    assert_eq!(report.totals.params, g.params);
    assert!(mem_once(&g.path) > 0);
    println!("bench mem: smoke test passed (run `cargo bench --bench mem` to measure)");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = support::model_dir(GEN_VERSION);
    std::fs::create_dir_all(&dir).expect("create target/bench-models");
    let generate_only = args.iter().any(|a| a == "--generate-only");
    if !generate_only && !args.iter().any(|a| a == "--bench") {
        smoke_test(&dir);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `cargo bench -- FILTER`: only the models whose name contains FILTER
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();

    let specs: Vec<Spec> = std::iter::once(BIG)
        .chain(SCALING)
        .filter(|s| filter.is_empty() || filter.iter().any(|f| s.name.contains(f.as_str())))
        .collect();
    let mut generated = Vec::new();
    for spec in &specs {
        let g = ensure(spec, &dir);
        match g.gen_time {
            Some(t) => eprintln!(
                "generated {} ({:.1} MB) in {:.1} s",
                g.path.display(),
                g.file_bytes as f64 / 1e6,
                t.as_secs_f64()
            ),
            None => eprintln!("reusing {}", g.path.display()),
        }
        generated.push(g);
    }
    if generate_only {
        for g in &generated {
            println!(
                "{}\t{}\t{}\t{}\t{}",
                g.spec.name,
                g.path.display(),
                g.nodes,
                g.initializers,
                g.weight_bytes
            );
        }
        return;
    }

    println!("\n## nnlint mem, in process (analyze_path + render_mem, table format)\n");
    println!(
        "| model | nodes | initializers | weights MB | file MB | iters | min ms | median ms | CPU mean ms | ns/node (wall median) | ns/node (CPU mean) | load ms | analyze ms | render ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for g in generated {
        let r = bench(g, quick);
        let g = &r.g;
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {} | {:.2} | {:.2} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} |",
            g.spec.name,
            g.nodes,
            g.initializers,
            g.weight_bytes as f64 / 1e6,
            g.file_bytes as f64 / 1e6,
            r.total.n,
            ms(r.total.min),
            ms(r.total.median),
            r.cpu_mean.map_or("-".into(), |c| format!("{:.2}", ms(c))),
            r.total.median.as_nanos() as f64 / g.nodes as f64,
            r.cpu_mean.map_or("-".into(), |c| format!(
                "{:.0}",
                c.as_nanos() as f64 / g.nodes as f64
            )),
            ms(r.load.median),
            ms(r.analyze.median),
            ms(r.render.median),
        );
    }
    println!(
        "\nCPU mean: thread CPU time over all the iterations (/proc/thread-self/schedstat) divided by \
         their number; less sensitive than wall time to other load on the machine. load/analyze/render are wall medians of a \
         separate run split by stage (nnlint::load::load, nnlint::analysis::analyze, \
         nnlint::report::render_mem)."
    );
}
