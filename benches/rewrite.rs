//! Performance benchmark of `nnlint rewrite` and `nnlint verify` on VGG-16 (issue 5: "rewriting a
//! VGG-16-sized model, every heavy conv at rank 1 plus the GAP head, takes under 10 s on the
//! 2-core machine, verification included").
//!
//! Generates `vgg16.onnx`, torchvision's VGG-16 as `torch.onnx.export` (dynamo=False) writes it:
//! the same node and initializer names, opset 17, input `input: float32[batch, 3, 224, 224]`,
//! output `logits`, 138,357,544 parameters (He-normal weights, small random biases, seeded). It is
//! written piece by piece, so the generator never holds the weights in memory.
//!
//! Then it runs the release binary (`target/release/nnlint`, which `cargo bench` builds: benches get
//! `CARGO_BIN_EXE_nnlint`) in a child process per run and measures its wall time, CPU time and
//! peak RSS (`wait4`), for these cases:
//!
//! * `a`: `rewrite vgg16.onnx -o OUT --rule heavy-standard-conv,large-fc-head` (the issue's
//!   workload: 12 convolutions at rank 1 and the GAP head, then verification);
//! * `b`: the same with `--no-verify`;
//! * `c`: `rewrite vgg16.onnx -o OUT` (every rewrite: adds low-rank FC layers, by randomized SVD);
//! * `d`: `verify vgg16.onnx OUT-of-a`.
//!
//! The runs go round by round (a, b, c, d, a, b, ...), so that load from other processes falls on
//! every case alike. Each rewrite runs with `--no-config --format json`; the bench reads the JSON to
//! check that the expected rewrites happened. The model goes to `target/bench-models/v1/` (or
//! `$CARGO_TARGET_DIR/bench-models/v1/`) and is reused when present. Usage:
//!
//! ```text
//! cargo bench --bench rewrite                    # generate if needed, 3 rounds, print a table
//! cargo bench --bench rewrite -- --quick         # 1 round
//! cargo bench --bench rewrite -- --runs 5        # 5 rounds
//! cargo bench --bench rewrite -- --generate-only # only write the model, print its path
//! ```
//!
//! No wall-clock limits are asserted anywhere: this prints figures, it does not judge them.

mod support;

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{attr_float, attr_int, attr_ints, value_info, Builder};

/// Bump when the generated models change, so stale files are not reused.
const GEN_VERSION: &str = "v1";

/// The binary under test: `cargo bench` builds it with the bench profile (release),
/// `cargo test --all-targets` with the dev profile.
const NNLINT: &str = env!("CARGO_BIN_EXE_nnlint");

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// A VGG-16 (torchvision's configuration "D") whose widths are divided by `div`.
#[derive(Clone, Copy, Debug)]
struct Vgg {
    name: &'static str,
    div: i64,
    /// Input side (H = W).
    hw: i64,
}

const VGG16: Vgg = Vgg {
    name: "vgg16",
    div: 1,
    hw: 224,
};

/// For `cargo test`: the same graph with 1/16 of the channels and hidden units (780k parameters,
/// 3.1 MB).
const VGG16_DIV16: Vgg = Vgg {
    name: "vgg16-div16",
    div: 16,
    hw: 224,
};

/// `torchvision.models.vgg.cfgs["D"]`: output channels of each 3x3 convolution, `None` for a
/// 2x2 max pool.
const CFG_D: [Option<i64>; 18] = [
    Some(64),
    Some(64),
    None,
    Some(128),
    Some(128),
    None,
    Some(256),
    Some(256),
    Some(256),
    None,
    Some(512),
    Some(512),
    Some(512),
    None,
    Some(512),
    Some(512),
    Some(512),
    None,
];

/// torchvision's VGG-16 parameter count (`sum(p.numel() for p in vgg16().parameters())`).
const VGG16_PARAMS: u64 = 138_357_544;

const BIAS_BOUND: f32 = 0.01;

/// He-normal (Kaiming, fan-in, ReLU gain): keeps the activations' scale through the stack.
fn he_std(fan_in: i64) -> f32 {
    (2.0 / fan_in as f32).sqrt()
}

/// The graph `torch.onnx.export(torchvision.models.vgg16().eval(), ...)` writes, with
/// `input_names=["input"]`, `output_names=["logits"]` and a dynamic batch axis. Biases are random
/// (the exporter shares identical initializers through `Identity` nodes, which torchvision's zero
/// initialisation would trigger; trained biases differ).
fn build(v: &Vgg) -> Builder {
    let mut b = Builder {
        seed: 0x5eed_7667,
        ..Default::default()
    };
    b.inputs
        .push(value_info("input", "batch", &[3, v.hw, v.hw]));
    let (mut x, mut c, mut hw) = ("input".to_string(), 3, v.hw);
    let mut i = 0;
    for layer in CFG_D {
        let scope = format!("/features/features.{i}");
        match layer {
            Some(width) => {
                let out = width / v.div;
                let w = b.normal(
                    &format!("features.{i}.weight"),
                    &[out, c, 3, 3],
                    he_std(9 * c),
                );
                let bias = b.uniform(&format!("features.{i}.bias"), &[out], BIAS_BOUND);
                let y = b.node1(
                    &scope,
                    "Conv",
                    &[&x, &w, &bias],
                    vec![
                        attr_ints("dilations", &[1, 1]),
                        attr_int("group", 1),
                        attr_ints("kernel_shape", &[3, 3]),
                        attr_ints("pads", &[1, 1, 1, 1]),
                        attr_ints("strides", &[1, 1]),
                    ],
                );
                x = b.node1(
                    &format!("/features/features.{}", i + 1),
                    "Relu",
                    &[&y],
                    vec![],
                );
                c = out;
                i += 2;
            }
            None => {
                x = b.node1(
                    &scope,
                    "MaxPool",
                    &[&x],
                    vec![
                        attr_int("ceil_mode", 0),
                        attr_ints("dilations", &[1, 1]),
                        attr_ints("kernel_shape", &[2, 2]),
                        attr_ints("pads", &[0, 0, 0, 0]),
                        attr_ints("strides", &[2, 2]),
                    ],
                );
                hw /= 2;
                i += 1;
            }
        }
    }
    // AdaptiveAvgPool2d((7, 7)) on a 7x7 map: the exporter writes a 1x1 AveragePool
    assert_eq!(hw, 7, "{}: the classifier expects a 7x7 map", v.name);
    x = b.node1(
        "/avgpool",
        "AveragePool",
        &[&x],
        vec![
            attr_ints("kernel_shape", &[1, 1]),
            attr_ints("strides", &[1, 1]),
        ],
    );
    x = b.node1("", "Flatten", &[&x], vec![attr_int("axis", 1)]);
    // classifier: Linear, ReLU, Dropout, Linear, ReLU, Dropout, Linear (Dropout vanishes in eval)
    let hidden = 4096 / v.div;
    let mut width = c * hw * hw;
    for (idx, out) in [(0, hidden), (3, hidden), (6, 1000)] {
        let w = b.normal(
            &format!("classifier.{idx}.weight"),
            &[out, width],
            he_std(width),
        );
        let bias = b.uniform(&format!("classifier.{idx}.bias"), &[out], BIAS_BOUND);
        let scope = format!("/classifier/classifier.{idx}");
        x = b.node1(
            &scope,
            "Gemm",
            &[&x, &w, &bias],
            vec![
                attr_float("alpha", 1.0),
                attr_float("beta", 1.0),
                attr_int("transB", 1),
            ],
        );
        if idx < 6 {
            let relu = format!("/classifier/classifier.{}", idx + 1);
            x = b.node1(&relu, "Relu", &[&x], vec![]);
        }
        width = out;
    }
    b.nodes.last_mut().unwrap().output = vec!["logits".into()];
    b.outputs.push(value_info("logits", "batch", &[1000]));
    b
}

struct Generated {
    path: PathBuf,
    nodes: usize,
    params: u64,
    file_bytes: u64,
}

fn ensure(v: &Vgg, dir: &Path) -> Generated {
    let b = build(v);
    if v.div == 1 {
        assert_eq!(b.params, VGG16_PARAMS, "the generator's VGG-16 is off");
    }
    let path = dir.join(format!("{}.onnx", v.name));
    let file_bytes = match std::fs::metadata(&path) {
        Ok(m) => {
            eprintln!("reusing {}", path.display());
            m.len()
        }
        Err(_) => {
            let t = Instant::now();
            let size = support::write_model(&b, "main_graph", GEN_VERSION, &path)
                .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            eprintln!(
                "generated {} ({:.1} MB) in {:.1} s",
                path.display(),
                size as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
            size
        }
    };
    Generated {
        path,
        nodes: b.nodes.len(),
        params: b.params,
        file_bytes,
    }
}

// ---------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------

/// One run of the binary.
struct Run {
    wall: Duration,
    user: Duration,
    sys: Duration,
    /// Peak resident set size in bytes (`None` where `wait4` is not available).
    max_rss: Option<u64>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `nnlint ARGS` with stdout and stderr going to files in `scratch`, and measures it.
fn run(args: &[OsString], scratch: &Path) -> Run {
    let (out_path, err_path) = (scratch.join("stdout"), scratch.join("stderr"));
    let mut cmd = Command::new(NNLINT);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("create stdout file"))
        .stderr(File::create(&err_path).expect("create stderr file"));
    let start = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("running {NNLINT}: {e}"));
    let (code, user, sys, max_rss) = wait(child);
    let wall = start.elapsed();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Run {
        wall,
        user,
        sys,
        max_rss,
        code,
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}

/// Waits for `child`; returns its exit code, user and system CPU time and peak RSS.
#[cfg(unix)]
fn wait(child: std::process::Child) -> (Option<i32>, Duration, Duration, Option<u64>) {
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which nothing else waits for.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4 failed");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // ru_maxrss is in KiB on Linux (bytes on macOS)
    let rss_unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
    (
        code,
        tv(usage.ru_utime),
        tv(usage.ru_stime),
        Some(usage.ru_maxrss as u64 * rss_unit),
    )
}

#[cfg(not(unix))]
fn wait(mut child: std::process::Child) -> (Option<i32>, Duration, Duration, Option<u64>) {
    let status = child.wait().expect("wait for nnlint");
    (status.code(), Duration::ZERO, Duration::ZERO, None)
}

/// Panics with the command's output unless it exited 0.
fn check_ok(r: &Run, what: &str) {
    check_exit(r, what, 0);
}

/// Panics with the command's output unless it exited `code` (`verify` of lossy rewrites: 3).
fn check_exit(r: &Run, what: &str, code: i32) {
    assert_eq!(
        r.code,
        Some(code),
        "{what}: nnlint failed\n--- stdout\n{}\n--- stderr\n{}",
        r.stdout,
        r.stderr
    );
}

fn os(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    args.iter().map(|a| a.as_ref().to_owned()).collect()
}

/// The rewrite case the issue names: heavy convolutions at rank 1 and the GAP head, verified.
fn case_a(model: &Path, out: &Path, config: Option<&Path>) -> Vec<OsString> {
    let mut args = os(&[
        &"rewrite",
        &model,
        &"-o",
        &out,
        &"--rule",
        &"heavy-standard-conv,large-fc-head",
        &"--lossy",
        &"--format",
        &"json",
    ]);
    match config {
        Some(c) => args.extend(os(&[&"--config", &c])),
        None => args.push("--no-config".into()),
    }
    args
}

/// What a rewrite's JSON report says: rewrites by kind, how many were checked one by one,
/// parameters before and after, and whether the whole model was checked.
struct Outcome {
    rewrites: usize,
    kinds: String,
    checked: usize,
    params: (u64, u64),
    verified: bool,
}

fn outcome(json: &str) -> Outcome {
    let v: serde_json::Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("rewrite --format json printed no JSON ({e}):\n{json}"));
    let rows = v["rewrites"].as_array().expect("a 'rewrites' array");
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for r in rows {
        let k = r["kind"].as_str().unwrap_or("?").to_string();
        match kinds.iter_mut().find(|(n, _)| *n == k) {
            Some((_, c)) => *c += 1,
            None => kinds.push((k, 1)),
        }
    }
    let params = &v["totals"]["params"];
    Outcome {
        rewrites: rows.len(),
        checked: rows.iter().filter(|r| !r["verify"].is_null()).count(),
        kinds: kinds
            .iter()
            .map(|(k, c)| format!("{c} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        params: (
            params["before"].as_u64().unwrap_or(0),
            params["after"].as_u64().unwrap_or(0),
        ),
        verified: v["whole_model"]["checked"].as_bool() == Some(true),
    }
}

/// `nnlint mem --format json MODEL`'s parameter and MAC totals.
fn mem_totals(model: &Path, scratch: &Path) -> (u64, u64) {
    let r = run(&os(&[&"mem", &"--format", &"json", &model]), scratch);
    check_ok(&r, "mem");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("mem prints JSON");
    let total = |k: &str| v["totals"][k].as_u64().unwrap_or(0);
    (total("params"), total("macs"))
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

fn median_secs(v: impl Iterator<Item = Duration>) -> f64 {
    let mut s: Vec<Duration> = v.collect();
    s.sort();
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2].as_secs_f64()
    } else {
        (s[n / 2 - 1] + s[n / 2]).as_secs_f64() / 2.0
    }
}

/// Reads a file through once, so every timed run starts from a warm page cache.
fn warm(path: &Path) {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf).expect("read") > 0 {}
}

/// The 1-minute load average (Linux; `?` elsewhere).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The CPU model name (Linux; `?` elsewhere).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

struct Case {
    key: &'static str,
    /// The command line as the table shows it.
    shown: &'static str,
    args: Vec<OsString>,
    /// The file the command writes.
    output: Option<PathBuf>,
    /// The exit status it must end with.
    exit: i32,
    runs: Vec<Run>,
}

/// `cargo test --all-targets` runs this binary without `--bench`: then only check, on a VGG-16
/// with 1/16 of the channels, that case `a` rewrites all it should and verifies (no 553 MB file,
/// no timing). The rules' size thresholds are lowered so that the small convolutions qualify.
fn smoke_test(dir: &Path) {
    let g = ensure(&VGG16_DIV16, dir);
    let tmp = tempfile::tempdir().expect("temp dir");
    let config = tmp.path().join("nnlint.toml");
    std::fs::write(
        &config,
        "[rules.heavy-standard-conv]\nmin-macs = 0\nmin-in-channels = 4\n",
    )
    .expect("write config");
    assert_eq!(mem_totals(&g.path, tmp.path()).0, g.params);
    let out = tmp.path().join("out.onnx");
    let r = run(&case_a(&g.path, &out, Some(&config)), tmp.path());
    check_ok(&r, "rewrite");
    assert!(out.is_file(), "{} was not written", out.display());
    let o = outcome(&r.stdout);
    assert_eq!(
        o.rewrites, 13,
        "12 convolutions and the head: {}\n{}",
        o.kinds, r.stdout
    );
    assert!(o.verified, "the whole model was not checked:\n{}", r.stdout);
    assert_eq!(
        o.checked, 13,
        "rewrites not checked one by one:\n{}",
        r.stdout
    );
    assert_eq!(o.params.0, g.params);
    println!(
        "bench rewrite: smoke test passed ({} nodes, {}; run `cargo bench --bench rewrite` to measure)",
        g.nodes, o.kinds
    );
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
    let g = ensure(&VGG16, &dir);
    if generate_only {
        println!("{}\t{}\t{}", g.path.display(), g.nodes, g.params);
        return;
    }
    let rounds = match args.iter().position(|a| a == "--runs") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .filter(|&n: &usize| n > 0)
            .expect("--runs N, N >= 1"),
        None if args.iter().any(|a| a == "--quick") => 1,
        None => 3,
    };

    let scratch = tempfile::tempdir_in(&dir).expect("temp dir");
    let out = |k: &str| scratch.path().join(format!("vgg16-{k}.onnx"));
    let model = g.path.as_path();
    let (params, macs) = mem_totals(model, scratch.path());
    if params != g.params {
        eprintln!(
            "warning: nnlint mem counts {params} parameters, the generator made {}",
            g.params
        );
    }

    let mut with_no_verify = case_a(model, &out("b"), None);
    with_no_verify.push("--no-verify".into());
    let mut cases = [
        Case {
            key: "a",
            shown: "`rewrite vgg16.onnx -o OUT --rule heavy-standard-conv,large-fc-head --lossy`",
            args: case_a(model, &out("a"), None),
            output: Some(out("a")),
            exit: 0,
            runs: Vec::new(),
        },
        Case {
            key: "b",
            shown: "the same, `--no-verify`",
            args: with_no_verify,
            output: Some(out("b")),
            exit: 0,
            runs: Vec::new(),
        },
        Case {
            key: "c",
            shown: "`rewrite vgg16.onnx -o OUT --lossy` (every rewrite)",
            args: os(&[
                &"rewrite",
                &model,
                &"-o",
                &out("c"),
                &"--lossy",
                &"--format",
                &"json",
                &"--no-config",
            ]),
            output: Some(out("c")),
            exit: 0,
            runs: Vec::new(),
        },
        Case {
            key: "d",
            shown: "`verify vgg16.onnx OUT` (OUT of a)",
            args: os(&[&"verify", &model, &out("a")]),
            output: None,
            exit: 3,
            runs: Vec::new(),
        },
    ];

    warm(Path::new(NNLINT));
    warm(model);
    let load_before = load_average();
    eprintln!(
        "{NNLINT}\n{} ({:.1} MB, {} nodes, {params} parameters, {macs} MACs), {rounds} round(s)",
        model.display(),
        g.file_bytes as f64 / 1e6,
        g.nodes
    );
    for round in 1..=rounds {
        for case in &mut cases {
            let r = run(&case.args, scratch.path());
            check_exit(&r, case.key, case.exit);
            eprintln!(
                "round {round}, case {}: {:.2} s",
                case.key,
                r.wall.as_secs_f64()
            );
            case.runs.push(r);
        }
    }

    println!("\n## nnlint rewrite, release binary, VGG-16 ({params} parameters)\n");
    println!(
        "{} CPUs ({}), load average {} before, {} after\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        load_before,
        load_average()
    );
    println!(
        "| case | command | runs | wall min s | wall median s | user median s | sys median s | peak RSS MiB (max) | output MB |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cases {
        let rss = c.runs.iter().filter_map(|r| r.max_rss).max();
        let out_mb = c
            .output
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or("-".into(), |m| format!("{:.1}", m.len() as f64 / 1e6));
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
            c.key,
            c.shown,
            c.runs.len(),
            c.runs.iter().map(|r| r.wall).min().unwrap().as_secs_f64(),
            median_secs(c.runs.iter().map(|r| r.wall)),
            median_secs(c.runs.iter().map(|r| r.user)),
            median_secs(c.runs.iter().map(|r| r.sys)),
            rss.map_or("-".into(), |b| format!(
                "{:.0}",
                b as f64 / (1 << 20) as f64
            )),
            out_mb,
        );
    }

    println!("\n| case | rewrites | checked one by one | parameters | whole model checked |");
    println!("|---|---|---:|---|---|");
    for c in cases.iter().filter(|c| c.output.is_some()) {
        let o = outcome(&c.runs[0].stdout);
        println!(
            "| {} | {} ({}) | {} | {} → {} | {} |",
            c.key,
            o.rewrites,
            o.kinds,
            o.checked,
            o.params.0,
            o.params.1,
            if o.verified { "yes" } else { "no" }
        );
    }
    let verify_out = cases[3].runs[0]
        .stdout
        .replace(&*out("a").to_string_lossy(), "OUT")
        .replace(&*model.to_string_lossy(), "vgg16.onnx");
    println!("\n`verify` (case d) prints:\n\n```text\n{verify_out}```");
    println!(
        "\nEach run is a child process (`{}`); wall time from spawn to exit, user/sys CPU time \
         and peak RSS from wait4. The model file and the binary are in the page cache. Rewrites run \
         with `--no-config --format json`.",
        NNLINT
    );
}
