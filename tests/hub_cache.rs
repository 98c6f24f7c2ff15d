//! Issue 21, first part: a MODEL may be a Hugging Face Hub ID, read from the local Hugging Face
//! cache. Each test builds a cache in a temporary folder the way huggingface_hub lays one out
//! (`models--{org}--{name}/blobs/{etag}`, `snapshots/{sha}/{file}` as relative links into
//! `blobs/`, `refs/{revision}` holding the sha) from a bundled checkpoint, and runs the real
//! binary against it with `HF_HUB_CACHE` (or `HF_HOME`, `XDG_CACHE_HOME`, `HOME`) set.

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const SHA2: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// The Hub these tests reach when the cache lacks a model: a closed port on the loopback, so a
/// fetch fails at once (tests/hub_net.rs runs a real one).
const NO_HUB: &str = "http://127.0.0.1:9";

/// A content address for a blob (huggingface_hub names blobs by their etag: a sha256 for LFS
/// files, a git sha1 for small ones); any stable 64-hex name will do here.
fn etag(bytes: &[u8]) -> String {
    let mut h: [u64; 4] = [
        0xcbf29ce484222325,
        0x100000001b3,
        0x9e3779b97f4a7c15,
        bytes.len() as u64,
    ];
    for (i, &b) in bytes.iter().enumerate() {
        let k = i % 4;
        h[k] = (h[k] ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h.iter().map(|x| format!("{x:016x}")).collect()
}

/// A Hugging Face cache in a temporary folder.
struct Cache {
    dir: tempfile::TempDir,
}

impl Cache {
    fn new() -> Cache {
        Cache {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root()
            .join(format!("models--{}", repo.replace('/', "--")))
    }

    /// Adds the files of `fixture` (a folder under testdata/, or the files named) as snapshot
    /// `sha` of `repo`: each file a blob, each snapshot entry a relative link to it.
    fn add(&self, repo: &str, sha: &str, fixture: &str, only: Option<&[&str]>) -> PathBuf {
        let src = common::testdata().join(fixture);
        let repo_dir = self.repo_dir(repo);
        let blobs = repo_dir.join("blobs");
        let snap = repo_dir.join("snapshots").join(sha);
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::create_dir_all(&snap).unwrap();
        let names: Vec<String> = match only {
            Some(o) => o.iter().map(|s| s.to_string()).collect(),
            None => std::fs::read_dir(&src)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "expected.json")
                .collect(),
        };
        for name in names {
            let bytes = std::fs::read(src.join(&name)).unwrap();
            let blob = etag(&bytes);
            std::fs::write(blobs.join(&blob), &bytes).unwrap();
            let link = snap.join(&name);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            let up = "../".repeat(name.matches('/').count() + 2);
            std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), &link).unwrap();
        }
        snap
    }

    /// Adds `files` (relative paths, maybe in subfolders) as snapshot `sha` of `repo`, the same
    /// way as [`Cache::add`].
    fn add_files(
        &self,
        repo: &str,
        sha: &str,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
    ) -> PathBuf {
        let repo_dir = self.repo_dir(repo);
        let blobs = repo_dir.join("blobs");
        let snap = repo_dir.join("snapshots").join(sha);
        std::fs::create_dir_all(&blobs).unwrap();
        for (name, bytes) in files {
            let blob = etag(bytes);
            std::fs::write(blobs.join(&blob), bytes).unwrap();
            let link = snap.join(name);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            let up = "../".repeat(name.matches('/').count() + 2);
            std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), &link).unwrap();
        }
        snap
    }

    /// Points `refs/{name}` at `sha`, as huggingface_hub writes it (no newline).
    fn set_ref(&self, repo: &str, name: &str, sha: &str) {
        let path = self.repo_dir(repo).join("refs").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, sha).unwrap();
    }
}

/// Runs the binary with only `vars` among the Hugging Face variables, a `HOME` that holds no
/// cache, from `cwd` (the repository root by default).
fn run_in(cwd: Option<&Path>, vars: &[(&str, &Path)], args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nnlint"));
    cmd.args(args).env("NO_COLOR", "1").env("HOME", home.path());
    for v in common::HUB_ENV {
        cmd.env_remove(v);
    }
    cmd.env("HF_ENDPOINT", NO_HUB);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.current_dir(cwd.unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR"))));
    cmd.output().expect("the nnlint binary runs")
}

fn run(cache: &Cache, args: &[&str]) -> Output {
    run_in(None, &[("HF_HUB_CACHE", cache.root())], args)
}

fn json_of(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        common::stderr(out)
    );
    serde_json::from_str(&common::stdout(out)).expect("JSON on standard output")
}

/// The JSON without the fields that name where the model came from.
fn numbers(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("model");
    o.remove("source");
    v
}

/// The one line of standard error of a run that must fail with exit status 2.
fn error_line(out: &Output) -> String {
    let err = common::stderr(out);
    assert!(!err.contains("panicked"), "nnlint panicked:\n{err}");
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("nnlint: error: "), "{err}");
    lines[0].to_string()
}

fn mem_json(cache: &Cache, model: &str, extra: &[&str]) -> Value {
    let mut args = vec!["mem", model, "-f", "json"];
    args.extend(extra);
    json_of(&run(cache, &args))
}

fn folder_json(fixture: &str) -> Value {
    common::run_json(&["mem", &common::fixture(fixture), "-f", "json"])
}

#[test]
fn an_id_reads_the_snapshot_as_its_folder() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    let want = numbers(folder_json("llm/llama"));
    let v = mem_json(&c, "org/llama", &[]);
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["model"], "org/llama@main (snapshot 01234567)");
    let src = &v["source"];
    assert_eq!(src["hub_id"], "org/llama");
    assert_eq!(src["revision"], "main");
    assert_eq!(src["commit"], SHA);
    assert_eq!(src["cache_dir"], c.root().display().to_string());
    assert_eq!(
        src["snapshot"],
        c.repo_dir("org/llama")
            .join("snapshots")
            .join(SHA)
            .display()
            .to_string()
    );
    let errors = common::schema_errors("mem.schema.json", &v);
    assert!(errors.is_empty(), "{errors:?}");
    // the table names the ID
    let table = common::stdout(&run(&c, &["mem", "org/llama"]));
    assert!(
        table.starts_with("org/llama@main (snapshot 01234567) · batch 1"),
        "{table}"
    );
}

#[test]
fn revisions_by_at_by_flag_by_sha_and_with_slashes() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    c.set_ref("org/llama", "refs/pr/1", SHA);
    c.set_ref("org/llama", "v1.0", SHA);
    let want = numbers(folder_json("llm/llama"));
    for (model, extra) in [
        ("org/llama@main", &[][..]),
        ("org/llama@v1.0", &[][..]),
        ("org/llama@refs/pr/1", &[][..]),
        ("org/llama", &["--revision", "refs/pr/1"][..]),
        ("org/llama@v1.0", &["--revision", "v1.0"][..]),
    ] {
        let v = mem_json(&c, model, extra);
        assert_eq!(numbers(v.clone()), want, "{model} {extra:?}");
        assert_eq!(v["source"]["commit"], SHA, "{model} {extra:?}");
    }
    // a commit sha needs no ref
    let at = format!("org/llama@{SHA}");
    let v = mem_json(&c, &at, &[]);
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["model"], at.as_str());
    let v = mem_json(&c, "org/llama", &["--revision", SHA]);
    assert_eq!(v["source"]["revision"], SHA);
    // @ and --revision must agree
    let e = error_line(&run(&c, &["mem", "org/llama@main", "--revision", "v1.0"]));
    assert!(
        e.contains("names revision 'main' and --revision names 'v1.0'"),
        "{e}"
    );
    // a revision the cache lacks names the refs it has
    let e = error_line(&run(&c, &["mem", "org/llama@v2"]));
    assert!(e.contains(&format!("org/llama@v2: the Hugging Face cache ({}, from HF_HUB_CACHE) has org/llama but no revision 'v2' (no refs/v2; it has main, refs/pr/1, v1.0)", c.root().display())), "{e}");
    // a ref to a commit whose snapshot is gone
    c.set_ref("org/llama", "old", SHA2);
    let e = error_line(&run(&c, &["mem", "org/llama@old"]));
    assert!(
        e.contains(&format!(
            "refs/old names commit {SHA2}, whose snapshot is not in the Hugging Face cache"
        )),
        "{e}"
    );
    let e = error_line(&run(&c, &["mem", &format!("org/llama@{SHA2}")]));
    assert!(
        e.contains(&format!("has no snapshot {SHA2} of org/llama")),
        "{e}"
    );
}

#[test]
fn the_cache_root_comes_from_hf_home_xdg_and_home() {
    let want = numbers(folder_json("llm/llama"));
    for (var, top, hub) in [
        ("HF_HOME", "hf", "hf/hub"),
        ("XDG_CACHE_HOME", "xdg", "xdg/huggingface/hub"),
        ("HOME", "home", "home/.cache/huggingface/hub"),
    ] {
        let base = tempfile::tempdir().unwrap();
        let c = Cache::new();
        c.add("org/llama", SHA, "llm/llama", None);
        c.set_ref("org/llama", "main", SHA);
        // the same layout, moved to where the variable puts the cache (the links are relative)
        let root = base.path().join(hub);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::rename(c.repo_dir("org/llama"), root.join("models--org--llama")).unwrap();
        let top = base.path().join(top);
        let v = json_of(&run_in(
            None,
            &[(var, &top)],
            &["mem", "org/llama", "-f", "json"],
        ));
        assert_eq!(numbers(v.clone()), want, "{var}");
        assert_eq!(
            v["source"]["cache_dir"],
            root.display().to_string(),
            "{var}"
        );
        // and HF_HUB_CACHE wins over it
        let elsewhere = tempfile::tempdir().unwrap();
        let e = error_line(&run_in(
            None,
            &[(var, &top), ("HF_HUB_CACHE", elsewhere.path())],
            &["mem", "org/llama"],
        ));
        assert!(
            e.contains(&format!(
                "not in the Hugging Face cache ({}, from HF_HUB_CACHE)",
                elsewhere.path().display()
            )),
            "{e}"
        );
    }
}

#[test]
fn a_sharded_snapshot_links_into_blobs_and_names_a_missing_shard() {
    let c = Cache::new();
    let snap = c.add("org/sharded", SHA, "llm/llama-sharded", None);
    c.set_ref("org/sharded", "main", SHA);
    assert_eq!(
        numbers(mem_json(&c, "org/sharded", &[])),
        numbers(folder_json("llm/llama-sharded"))
    );
    // fit reads the same snapshot, and its JSON says where from
    let out = run(&c, &["fit", "org/sharded", "--gpu", "T4", "-f", "json"]);
    let v = json_of(&out);
    assert_eq!(v["model"], "org/sharded@main (snapshot 01234567)");
    assert_eq!(v["source"]["commit"], SHA);
    let errors = common::schema_errors("fit.schema.json", &v);
    assert!(errors.is_empty(), "{errors:?}");
    // a snapshot someone stopped downloading
    std::fs::remove_file(snap.join("model-00003-of-00007.safetensors")).unwrap();
    let e = error_line(&run(&c, &["mem", "org/sharded"]));
    assert!(
        e.starts_with(&format!(
            "nnlint: error: org/sharded@main: snapshot 01234567 in the Hugging Face cache ({}, from HF_HUB_CACHE) lacks model-00003-of-00007.safetensors; not in nnlint's cache (",
            c.root().display()
        )) && e.contains("either; cannot reach the Hub at http://127.0.0.1:9: "),
        "{e}"
    );
    // offline says so instead, from the variable or the flag
    for (vars, flag) in [
        (
            vec![
                ("HF_HUB_CACHE", c.root()),
                ("HF_HUB_OFFLINE", Path::new("1")),
            ],
            None,
        ),
        (vec![("HF_HUB_CACHE", c.root())], Some("--offline")),
    ] {
        let mut args = vec!["mem", "org/sharded"];
        args.extend(flag);
        let e = error_line(&run_in(None, &vars, &args));
        assert!(
            e.contains("lacks model-00003-of-00007.safetensors; not in nnlint's cache (")
                && e.ends_with(
                    "either; offline (--offline or HF_HUB_OFFLINE), so the Hub is not asked"
                ),
            "{e}"
        );
    }
    // a broken link (its blob deleted) is missing too
    std::fs::remove_dir_all(c.repo_dir("org/sharded").join("blobs")).unwrap();
    let e = error_line(&run(&c, &["mem", "org/sharded"]));
    assert!(
        e.contains("lacks config.json, model.safetensors.index.json"),
        "{e}"
    );
}

#[test]
fn a_link_out_of_the_repo_is_refused() {
    let c = Cache::new();
    let snap = c.add(
        "org/llama",
        SHA,
        "llm/llama",
        Some(&["config.json", "generation_config.json"]),
    );
    c.set_ref("org/llama", "main", SHA);
    let outside = common::testdata().join("llm/llama/model.safetensors");
    std::os::unix::fs::symlink(&outside, snap.join("model.safetensors")).unwrap();
    let e = error_line(&run(&c, &["mem", "org/llama"]));
    assert!(
        e.contains(
            "model.safetensors: resolves outside its repo's folder in the Hugging Face cache"
        ),
        "{e}"
    );
    // a link to another repo's blob leaves the repo too
    let other = c.add("org/other", SHA, "llm/llama", None);
    std::fs::remove_file(snap.join("model.safetensors")).unwrap();
    let target = std::fs::read_link(other.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink(
        Path::new("../../../models--org--other/snapshots")
            .join(SHA)
            .join(target),
        snap.join("model.safetensors"),
    )
    .unwrap();
    let e = error_line(&run(&c, &["mem", "org/llama"]));
    assert!(e.contains("resolves outside its repo's folder"), "{e}");
}

#[test]
fn the_shard_guard_allows_the_repo_folder_only_for_a_snapshot() {
    let c = Cache::new();
    let snap = c.add("org/sharded", SHA, "llm/llama-sharded", None);
    let repo = c.repo_dir("org/sharded");
    // a plain folder's shards may not leave it, even into a cache's blobs/
    let plain = c.root().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for e in std::fs::read_dir(&snap).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path().canonicalize().unwrap(), plain.join(e.file_name()))
            .unwrap();
    }
    let e = nnlint::load::hf::load(&plain).unwrap_err().to_string();
    assert!(
        e.contains("resolves outside the index's directory (through a link)"),
        "{e}"
    );
    let ck = nnlint::load::hf::load_within(&snap, Some(&repo)).unwrap();
    assert_eq!(ck.weights.shards.len(), 7);
    // a snapshot folder given as a path (models--org--name/snapshots/<sha>) is bounded by its
    // repo's folder as an ID is
    let ck = nnlint::load::hf::load(&snap).unwrap();
    assert_eq!(ck.weights.shards.len(), 7);
    // a snapshot's shards may not leave the repo's folder
    let shard = snap.join("model-00002-of-00007.safetensors");
    std::fs::remove_file(&shard).unwrap();
    std::os::unix::fs::symlink(
        common::testdata().join("llm/llama-sharded/model-00002-of-00007.safetensors"),
        &shard,
    )
    .unwrap();
    for e in [
        nnlint::load::hf::load_within(&snap, Some(&repo)).unwrap_err(),
        nnlint::load::hf::load(&snap).unwrap_err(),
    ] {
        let e = e.to_string();
        assert!(
            e.contains("shard 'model-00002-of-00007.safetensors' resolves outside its repo's folder in the Hugging Face cache"),
            "{e}"
        );
    }
}

#[test]
fn a_gguf_file_of_a_repo() {
    let c = Cache::new();
    c.add(
        "org/tiny-GGUF",
        SHA,
        "llm/gguf",
        Some(&["tiny-llama-q4_k_m.gguf"]),
    );
    c.set_ref("org/tiny-GGUF", "main", SHA);
    let want = numbers(common::run_json(&[
        "mem",
        &common::fixture("llm/gguf/tiny-llama-q4_k_m.gguf"),
        "-f",
        "json",
    ]));
    let v = mem_json(&c, "org/tiny-GGUF/tiny-llama-q4_k_m.gguf", &[]);
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(
        v["model"],
        "org/tiny-GGUF/tiny-llama-q4_k_m.gguf@main (snapshot 01234567)"
    );
    assert_eq!(v["source"]["file"], "tiny-llama-q4_k_m.gguf");
    let v = mem_json(&c, "org/tiny-GGUF/tiny-llama-q4_k_m.gguf@main", &[]);
    assert_eq!(numbers(v), want);
    // the repo alone has no config.json, and its GGUF files are named one at a time
    let e = error_line(&run(&c, &["mem", "org/tiny-GGUF"]));
    assert!(
        e.contains("lacks config.json, model.safetensors (or model.safetensors.index.json and its shards); it holds GGUF files: name one, as org/tiny-GGUF/tiny-llama-q4_k_m.gguf"),
        "{e}"
    );
    assert!(!e.contains("hf download"), "{e}");
    let e = error_line(&run(&c, &["mem", "org/tiny-GGUF/q8_0.gguf"]));
    assert!(
        e.contains("lacks q8_0.gguf; not in nnlint's cache (")
            && e.contains("cannot reach the Hub at http://127.0.0.1:9"),
        "{e}"
    );
}

#[test]
fn a_path_on_disk_wins_over_an_id() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    // a folder ./org/llama holding another checkpoint
    let cwd = tempfile::tempdir().unwrap();
    let local = cwd.path().join("org/llama");
    std::fs::create_dir_all(&local).unwrap();
    let qwen = common::testdata().join("llm/qwen2");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(qwen.join(f), local.join(f)).unwrap();
    }
    let vars = [("HF_HUB_CACHE", c.root())];
    let v = json_of(&run_in(
        Some(cwd.path()),
        &vars,
        &["mem", "org/llama", "-f", "json"],
    ));
    assert_eq!(v["model"], "org/llama");
    assert!(v.get("source").is_none());
    let qwen_params = folder_json("llm/qwen2")["totals"]["params"].clone();
    assert_eq!(v["totals"]["params"], qwen_params);
    assert_ne!(
        qwen_params,
        folder_json("llm/llama")["totals"]["params"],
        "the two fixtures differ"
    );
    // --revision on a path is refused rather than ignored
    let e = error_line(&run_in(
        Some(cwd.path()),
        &vars,
        &["mem", "org/llama", "--revision", "main"],
    ));
    assert!(e.contains("is a path on disk"), "{e}");
}

#[test]
fn malformed_and_hostile_ids_are_one_line() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    for (arg, why) in [
        ("x/y/z", "'z' is not a .gguf file"),
        ("a--b/c", "holds '--' or '..'"),
        ("org/-llama", "starts or ends with '-' or '.'"),
        ("org/llama@", "the revision after '@' is empty"),
        ("org/llama@../../../etc", "starting with '.'"),
        ("org/llama@refs/../../x", "starting with '.'"),
        ("org/llama/../../x.gguf", "'..' part"),
        ("org/llama@a b", "holds ' '"),
        ("org/lla ma", "holds ' '"),
        ("org/llama.git", "cannot end in '.git'"),
    ] {
        let e = error_line(&run(&c, &["mem", arg]));
        assert!(
            e.starts_with(&format!("nnlint: error: {arg}: is neither a file nor a directory, nor a Hub ID (org/name[@revision], org/name/file.gguf): ")),
            "{arg}: {e}"
        );
        assert!(e.contains(why), "{arg}: {e}");
    }
    let long = format!("org/{}", "a".repeat(97));
    let e = error_line(&run(&c, &["mem", &long]));
    assert!(e.contains("97 characters long"), "{e}");
    let e = error_line(&run(&c, &["mem", "org/llama", "--revision", "../main"]));
    assert!(e.contains("--revision: "), "{e}");
    // a ref that holds a path is an error, never followed
    c.set_ref("org/llama", "evil", "../../../../etc");
    let e = error_line(&run(&c, &["mem", "org/llama@evil"]));
    assert!(
        e.contains("refs/evil: holds '../../../../etc', not a commit sha"),
        "{e}"
    );
    // a missing file stays a missing file
    let e = error_line(&run(&c, &["mem", "testdata/missing.onnx"]));
    assert!(e.contains("testdata/missing.onnx: No such file"), "{e}");
    // a typo beside a folder of that name is said as a path first
    let e = error_line(&run(&c, &["mem", "testdata/nothere"]));
    assert!(
        e.starts_with("nnlint: error: testdata/nothere: no such file or directory; as a Hub ID, testdata/nothere@main: not in the Hugging Face cache"),
        "{e}"
    );
}

#[test]
fn an_id_not_in_the_cache_names_the_cache() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    let e = error_line(&run(&c, &["mem", "Qwen/Qwen3-32B"]));
    assert!(
        e.starts_with(&format!(
            "nnlint: error: Qwen/Qwen3-32B@main: not in the Hugging Face cache ({}, from HF_HUB_CACHE); not in nnlint's cache (",
            c.root().display()
        )) && e.contains("either; cannot reach the Hub at http://127.0.0.1:9: "),
        "{e}"
    );
    // a different case or a close spelling is a typo
    for typo in ["Org/llama", "org/lama"] {
        let e = error_line(&run(&c, &["mem", typo]));
        assert!(
            e.ends_with("; the Hugging Face cache has 'org/llama': did you mean it?"),
            "{e}"
        );
    }
    // the default cache, under HOME
    let home = tempfile::tempdir().unwrap();
    let e = error_line(&run_in(
        None,
        &[("HOME", home.path())],
        &["fit", "a/b@v1", "--gpu", "T4"],
    ));
    assert!(
        e.contains(&format!(
            "a/b@v1: not in the Hugging Face cache ({}); not in nnlint's cache ({}) either; cannot reach the Hub at http://127.0.0.1:9: ",
            home.path().join(".cache/huggingface/hub").display(),
            home.path().join(".cache/nnlint").display()
        )),
        "{e}"
    );
}

#[test]
fn fit_report_and_lint_take_ids() {
    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    let out = run(&c, &["fit", "org/llama", "--gpu", "T4"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).starts_with("org/llama@main (snapshot 01234567) on T4"),
        "{}",
        common::stdout(&out)
    );
    // the page is written to the working directory, named after the repo
    let cwd = tempfile::tempdir().unwrap();
    let out = run_in(
        Some(cwd.path()),
        &[("HF_HUB_CACHE", c.root())],
        &["report", "org/llama"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let page = std::fs::read_to_string(cwd.path().join("llama-report.html")).unwrap();
    assert!(page.contains("org/llama@main (snapshot 01234567)"));
    // lint needs a graph, and says so naming the ID
    let out = run(&c, &["lint", "org/llama"]);
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr(&out);
    assert!(
        err.contains("nnlint: error: org/llama@main (snapshot 01234567): is a language-model checkpoint: lint needs an ONNX graph"),
        "{err}"
    );
}

/// The interpreter of the Python interop tests (tests/interop/run.sh): `NNLINT_INTEROP_PY`, else
/// the venv run.sh makes in `target/interop-venv`; `None` when neither is there.
fn interop_python() -> Option<PathBuf> {
    if let Some(py) = std::env::var_os("NNLINT_INTEROP_PY") {
        return Some(PathBuf::from(py));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let py = target.join("interop-venv/bin/python");
    py.is_file().then_some(py)
}

/// The layout `Cache` writes, and so the one nnlint reads, is the one huggingface_hub itself
/// recognises: `scan_cache_dir` finds every repo, revision, ref and file, each file's blob, and
/// reports no corrupted entry. Needs huggingface_hub (tests/interop/requirements.txt): run.sh runs
/// this test with its venv and `NNLINT_INTEROP_REQUIRED=1`; elsewhere it is skipped, said on
/// standard error, when the venv or the package is absent.
#[test]
fn the_cache_layout_is_the_one_huggingface_hub_scans() {
    let required = std::env::var_os("NNLINT_INTEROP_REQUIRED").is_some_and(|v| v == "1");
    let skip = |why: String| {
        assert!(!required, "NNLINT_INTEROP_REQUIRED=1 but {why}");
        eprintln!("skipped: {why} (bash tests/interop/run.sh installs it and runs this test)");
    };
    let Some(py) = interop_python() else {
        return skip("no interop venv (target/interop-venv) and no NNLINT_INTEROP_PY".into());
    };
    let probe = Command::new(&py)
        .args(["-c", "import huggingface_hub"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        return skip(format!("{} cannot import huggingface_hub", py.display()));
    }

    let c = Cache::new();
    c.add("org/llama", SHA, "llm/llama", None);
    c.set_ref("org/llama", "main", SHA);
    c.set_ref("org/llama", "v1.0", SHA);
    c.set_ref("org/llama", "refs/pr/1", SHA);
    c.add("org/llama", SHA2, "llm/llama", Some(&["config.json"]));
    c.set_ref("org/llama", "old", SHA2);
    c.add("org/sharded", SHA, "llm/llama-sharded", None);
    c.set_ref("org/sharded", "main", SHA);
    c.add(
        "org/gguf",
        SHA2,
        "llm/gguf",
        Some(&["tiny-llama-q4_k_m.gguf"]),
    );
    c.set_ref("org/gguf", "main", SHA2);
    // a file in a subfolder of the snapshot links two levels further up
    let snap = c.repo_dir("org/gguf").join("snapshots").join(SHA2);
    let bytes = std::fs::read(common::testdata().join("llm/llama/config.json")).unwrap();
    let blob = etag(&bytes);
    std::fs::write(c.repo_dir("org/gguf").join("blobs").join(&blob), &bytes).unwrap();
    std::fs::create_dir_all(snap.join("sub")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../blobs/{blob}"),
        snap.join("sub/config.json"),
    )
    .unwrap();
    // nnlint reads what it wrote (the test's premise)
    assert_eq!(
        numbers(mem_json(&c, "org/sharded", &[])),
        numbers(folder_json("llm/llama-sharded"))
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/scan_cache.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(c.root())
        .env_remove("HF_HUB_CACHE")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .expect("the interop python runs");
    assert!(
        out.status.success(),
        "scan_cache.py failed: {}",
        common::stderr(&out)
    );
    let scan: Value =
        serde_json::from_str(&common::stdout(&out)).expect("scan_cache.py prints JSON");
    assert_eq!(scan["warnings"], serde_json::json!([]), "{scan:#}");

    // what huggingface_hub should see: repo → [(sha, refs, files)]
    let listing = |fixture: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(common::testdata().join(fixture))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "expected.json")
            .collect();
        v.sort();
        v
    };
    /// A revision: its commit, its refs, its files.
    type Revision<'a> = (&'a str, Vec<&'a str>, Vec<String>);
    let expected: Vec<(&str, Vec<Revision>)> = vec![
        (
            "org/gguf",
            vec![(
                SHA2,
                vec!["main"],
                vec!["sub/config.json".into(), "tiny-llama-q4_k_m.gguf".into()],
            )],
        ),
        (
            "org/llama",
            vec![
                (SHA, vec!["main", "refs/pr/1", "v1.0"], listing("llm/llama")),
                (SHA2, vec!["old"], vec!["config.json".into()]),
            ],
        ),
        (
            "org/sharded",
            vec![(SHA, vec!["main"], listing("llm/llama-sharded"))],
        ),
    ];
    let repos = scan["repos"].as_array().expect("repos");
    assert_eq!(repos.len(), expected.len(), "{scan:#}");
    for (repo, (id, revisions)) in repos.iter().zip(&expected) {
        assert_eq!(repo["repo_id"], *id, "{scan:#}");
        assert_eq!(repo["repo_type"], "model");
        let revs = repo["revisions"].as_array().unwrap();
        assert_eq!(revs.len(), revisions.len(), "{id}: {scan:#}");
        let mut blobs = std::collections::BTreeSet::new();
        for (rev, (sha, refs, files)) in revs.iter().zip(revisions) {
            assert_eq!(rev["commit_hash"], *sha, "{id}");
            assert_eq!(rev["refs"], serde_json::json!(refs), "{id}@{sha}");
            let repo_dir = format!("models--{}", id.replace('/', "--"));
            assert_eq!(rev["snapshot"], format!("{repo_dir}/snapshots/{sha}"));
            let got: Vec<&String> = rev["files"].as_object().unwrap().keys().collect();
            let want: Vec<&String> = files.iter().collect();
            assert_eq!(got, want, "{id}@{sha}");
            for (name, f) in rev["files"].as_object().unwrap() {
                let blob = f["blob"].as_str().unwrap();
                assert!(
                    blob.starts_with(&format!("{repo_dir}/blobs/")),
                    "{name}: {blob}"
                );
                let on_disk = std::fs::metadata(c.root().join(blob)).unwrap().len();
                assert_eq!(f["size"], on_disk, "{id}@{sha}/{name}");
                blobs.insert(blob.to_string());
            }
        }
        // the same blob in two revisions is one file of the repo
        assert_eq!(repo["nb_files"], blobs.len(), "{id}");
    }
}

/// A diffusers pipeline and a sentence-transformers model in the Hugging Face cache read as their
/// folders do, their component files linked into `blobs/` from subfolders of the snapshot.
#[test]
fn pipelines_in_the_cache_read_as_their_folders() {
    let c = Cache::new();
    for (repo, files) in [
        ("org/pipe", common::diffusers_files()),
        ("org/st", common::sentence_transformers_files()),
    ] {
        c.add_files(repo, SHA, &files);
        c.set_ref(repo, "main", SHA);
        let dir = tempfile::tempdir().unwrap();
        common::write_files(dir.path(), &files);
        let want = numbers(common::run_json(&[
            "mem",
            &dir.path().display().to_string(),
            "-f",
            "json",
        ]));
        let got = mem_json(&c, repo, &[]);
        assert_eq!(got["source"]["origin"], "huggingface-cache", "{got:#}");
        assert_eq!(numbers(got), want, "{repo}");
    }
    // a component's weight file linked out of the repo's folder
    let outside = tempfile::tempdir().unwrap();
    let snap = c.repo_dir("org/pipe").join("snapshots").join(SHA);
    let w = snap.join("vae/diffusion_pytorch_model.safetensors");
    std::fs::copy(&w, outside.path().join("w.safetensors")).unwrap();
    std::fs::remove_file(&w).unwrap();
    std::os::unix::fs::symlink(outside.path().join("w.safetensors"), &w).unwrap();
    let e = error_line(&run(&c, &["mem", "org/pipe"]));
    assert!(e.contains("outside"), "{e}");
}
