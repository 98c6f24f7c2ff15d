//! Issue 21, second part: Hub IDs fetched from the network, headers only. Each test starts a fake
//! Hub on 127.0.0.1 (tiny_http, a real HTTP/1.1 server) that serves fixture repos with the Hub's
//! URL layout: the revision API, `resolve/` answering small files with a relative redirect to
//! `/api/resolve-cache/...` and weight files with a 302 to a second server on another port (the
//! "CDN"), which honours `Range` with `206` and `Content-Range`. Every request is recorded (host,
//! path, `Authorization`, `Range`, bytes served), so the tests check what nnlint asked for as
//! well as what it printed.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_SECRETtoken123";

/// One request as a server saw it.
#[derive(Clone, Debug)]
struct Seen {
    cdn: bool,
    path: String,
    auth: Option<String>,
    range: Option<String>,
    served: usize,
}

/// How the fake Hub misbehaves, when asked to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Fault {
    #[default]
    None,
    /// The CDN ignores Range and answers 200 with the whole file.
    RangeAs200,
    /// The CDN's Content-Range names other bytes than asked.
    WrongContentRange,
}

/// A file's content: bytes, or a file on disk read by range (a sparse 140 GB shard).
#[derive(Clone)]
enum Blob {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Blob {
    fn len(&self) -> u64 {
        match self {
            Blob::Bytes(b) => b.len() as u64,
            Blob::File(p) => std::fs::metadata(p).unwrap().len(),
        }
    }

    /// Bytes `a..=b`.
    fn read(&self, a: u64, b: u64) -> Vec<u8> {
        match self {
            Blob::Bytes(d) => d[a as usize..=b as usize].to_vec(),
            Blob::File(p) => {
                use std::io::{Read, Seek};
                let mut f = std::fs::File::open(p).unwrap();
                f.seek(std::io::SeekFrom::Start(a)).unwrap();
                let mut out = vec![0; (b - a + 1) as usize];
                f.read_exact(&mut out).unwrap();
                out
            }
        }
    }
}

#[derive(Default)]
struct Repo {
    refs: BTreeMap<String, String>,
    files: BTreeMap<String, Blob>,
    /// Extra names listed in siblings without content (a pickle, say).
    listed_only: Vec<String>,
    gated: bool,
    /// The revision answer leaves `siblings` out (some mirrors do): the tree API lists the
    /// files, this many a page.
    tree_pages_of: Option<usize>,
}

#[derive(Default)]
struct State {
    repos: BTreeMap<String, Repo>,
    seen: Vec<Seen>,
    fault: Fault,
}

/// The fake Hub and its CDN, stopped when dropped.
struct FakeHub {
    state: Arc<Mutex<State>>,
    hub: Arc<tiny_http::Server>,
    cdn: Arc<tiny_http::Server>,
    threads: Vec<std::thread::JoinHandle<()>>,
    prefix: String,
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 3 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

type Reply = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn reply(status: u16, body: Vec<u8>, headers: &[(&str, String)]) -> Reply {
    let mut r = tiny_http::Response::from_data(body).with_status_code(status);
    for (k, v) in headers {
        r.add_header(header(k, v));
    }
    r
}

fn not_found(code: &str) -> Reply {
    reply(
        404,
        code.as_bytes().to_vec(),
        &[("X-Error-Code", code.to_string())],
    )
}

impl FakeHub {
    fn start(prefix: &str) -> FakeHub {
        let state = Arc::new(Mutex::new(State::default()));
        let hub = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let cdn = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let cdn_port = cdn.server_addr().to_ip().unwrap().port();
        let mut threads = Vec::new();
        {
            let (state, server, prefix) = (state.clone(), hub.clone(), prefix.to_string());
            threads.push(std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let r = serve_hub(&state, &req, &prefix, cdn_port);
                    let _ = req.respond(r);
                }
            }));
        }
        {
            let (state, server) = (state.clone(), cdn.clone());
            threads.push(std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let r = serve_cdn(&state, &req);
                    let _ = req.respond(r);
                }
            }));
        }
        FakeHub {
            state,
            hub,
            cdn,
            threads,
            prefix: prefix.to_string(),
        }
    }

    fn endpoint(&self) -> String {
        format!(
            "http://127.0.0.1:{}{}",
            self.hub.server_addr().to_ip().unwrap().port(),
            self.prefix
        )
    }

    /// Adds `repo` at commit SHA (and `main`) with the files of a fixture folder, or given files.
    fn add(&self, repo: &str, files: BTreeMap<String, Vec<u8>>) {
        self.add_blobs(
            repo,
            files
                .into_iter()
                .map(|(k, v)| (k, Blob::Bytes(v)))
                .collect(),
        );
    }

    fn add_blobs(&self, repo: &str, files: BTreeMap<String, Blob>) {
        let mut s = self.state.lock().unwrap();
        let r = s.repos.entry(repo.to_string()).or_default();
        r.refs.insert("main".into(), SHA.into());
        r.files = files;
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    fn clear(&self) {
        self.state.lock().unwrap().seen.clear();
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.hub.unblock();
        self.cdn.unblock();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn req_header(req: &tiny_http::Request, name: &str) -> Option<String> {
    req.headers()
        .iter()
        .find(|h| h.field.to_string().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str().to_string())
}

fn serve_hub(state: &Mutex<State>, req: &tiny_http::Request, prefix: &str, cdn: u16) -> Reply {
    let mut s = state.lock().unwrap();
    let auth = req_header(req, "Authorization");
    let url = req.url().to_string();
    s.seen.push(Seen {
        cdn: false,
        path: url.clone(),
        auth: auth.clone(),
        range: req_header(req, "Range"),
        served: 0,
    });
    let Some(path) = url.strip_prefix(prefix) else {
        return reply(404, vec![], &[]);
    };
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let authorized = auth.as_deref() == Some(&format!("Bearer {TOKEN}"));
    let commit_of = |r: &Repo, rev: &str| -> Option<String> {
        if rev == SHA {
            Some(SHA.to_string())
        } else {
            r.refs.get(rev).cloned()
        }
    };
    let (reply, served) = match parts.as_slice() {
        ["api", "models", org, name, "revision", rev] => {
            let repo = format!("{org}/{name}");
            let rev = decode(rev);
            match s.repos.get(&repo) {
                None => (not_found("RepoNotFound"), 0),
                Some(r) if r.gated && !authorized => (
                    reply(
                        401,
                        b"gated".to_vec(),
                        &[("X-Error-Code", "GatedRepo".into())],
                    ),
                    0,
                ),
                Some(r) => match commit_of(r, &rev) {
                    None => (not_found("RevisionNotFound"), 0),
                    Some(sha) => {
                        let mut siblings: Vec<Value> = r
                            .files
                            .keys()
                            .chain(&r.listed_only)
                            .map(|f| serde_json::json!({"rfilename": f}))
                            .collect();
                        siblings.sort_by_key(|v| v.to_string());
                        let info = match r.tree_pages_of {
                            None => {
                                serde_json::json!({"id": repo, "sha": sha, "siblings": siblings})
                            }
                            Some(_) => serde_json::json!({"id": repo, "sha": sha}),
                        };
                        let body = serde_json::to_vec(&info).unwrap();
                        let n = body.len();
                        (
                            reply(200, body, &[("Content-Type", "application/json".into())]),
                            n,
                        )
                    }
                },
            }
        }
        ["api", "models", org, name, "tree", rev] => {
            // huggingface_hub's list_repo_tree: entries of the whole tree, folders included,
            // a page at a time, the next one named by a Link header
            let repo = format!("{org}/{name}");
            match s.repos.get(&repo) {
                Some(r) if commit_of(r, &decode(rev)).is_some() => {
                    let per = r.tree_pages_of.unwrap_or(1000).max(1);
                    let mut entries: Vec<Value> = Vec::new();
                    let mut folders = std::collections::BTreeSet::new();
                    for f in r.files.keys().chain(&r.listed_only) {
                        let mut at = String::new();
                        for part in f.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
                            at = if at.is_empty() {
                                part.to_string()
                            } else {
                                format!("{at}/{part}")
                            };
                            if folders.insert(at.clone()) {
                                entries.push(serde_json::json!({"type": "directory", "path": at, "oid": "0"}));
                            }
                        }
                        entries.push(
                            serde_json::json!({"type": "file", "path": f, "size": 1, "oid": "0"}),
                        );
                    }
                    let cursor: usize = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("cursor="))
                        .map_or(0, |c| c.parse().unwrap());
                    let end = (cursor + per).min(entries.len());
                    let body = serde_json::to_vec(&entries[cursor..end]).unwrap();
                    let n = body.len();
                    let mut headers = vec![("Content-Type", "application/json".to_string())];
                    if end < entries.len() {
                        // the first page's link is absolute, the others a path (both are seen)
                        let next = format!(
                            "{prefix}/api/models/{repo}/tree/{rev}?recursive=true&cursor={end}"
                        );
                        headers.push((
                            "Link",
                            if cursor == 0 {
                                format!(
                                    "<http://{}{next}>; rel=\"next\"",
                                    req_header(req, "Host").unwrap()
                                )
                            } else {
                                format!("<{next}>; rel=\"next\"")
                            },
                        ));
                    }
                    (reply(200, body, &headers), n)
                }
                _ => (not_found("RepoNotFound"), 0),
            }
        }
        [org, name, "resolve", rev, file @ ..] => {
            let repo = format!("{org}/{name}");
            let file = decode(&file.join("/"));
            match s.repos.get(&repo) {
                None => (not_found("RepoNotFound"), 0),
                Some(r) if r.gated && !authorized => (
                    reply(401, vec![], &[("X-Error-Code", "GatedRepo".into())]),
                    0,
                ),
                Some(r) => match (commit_of(r, &decode(rev)), r.files.contains_key(&file)) {
                    (None, _) => (not_found("RevisionNotFound"), 0),
                    (Some(_), false) => (not_found("EntryNotFound"), 0),
                    (Some(sha), true) => {
                        let big = file.ends_with(".safetensors") || file.ends_with(".gguf");
                        let location = if big {
                            format!("http://127.0.0.1:{cdn}/blobs/{repo}/{sha}/{file}")
                        } else {
                            format!("{prefix}/api/resolve-cache/models/{repo}/{sha}/{file}")
                        };
                        (
                            reply(
                                if big { 302 } else { 307 },
                                vec![],
                                &[("Location", location), ("X-Repo-Commit", sha)],
                            ),
                            0,
                        )
                    }
                },
            }
        }
        ["api", "resolve-cache", "models", org, name, sha, file @ ..] => {
            let repo = format!("{org}/{name}");
            match s
                .repos
                .get(&repo)
                .and_then(|r| r.files.get(&file.join("/")))
            {
                Some(b) => {
                    let body = b.read(0, b.len() - 1);
                    let n = body.len();
                    (reply(200, body, &[("X-Repo-Commit", sha.to_string())]), n)
                }
                None => (not_found("EntryNotFound"), 0),
            }
        }
        _ => (reply(404, vec![], &[]), 0),
    };
    s.seen.last_mut().unwrap().served = served;
    reply
}

fn serve_cdn(state: &Mutex<State>, req: &tiny_http::Request) -> Reply {
    let mut s = state.lock().unwrap();
    let url = req.url().to_string();
    let range = req_header(req, "Range");
    s.seen.push(Seen {
        cdn: true,
        path: url.clone(),
        auth: req_header(req, "Authorization"),
        range: range.clone(),
        served: 0,
    });
    let parts: Vec<&str> = url.trim_start_matches('/').split('/').collect();
    let ["blobs", org, name, _sha, file @ ..] = parts.as_slice() else {
        return reply(404, vec![], &[]);
    };
    let Some(data) = s
        .repos
        .get(&format!("{org}/{name}"))
        .and_then(|r| r.files.get(&file.join("/")))
        .cloned()
    else {
        return reply(404, vec![], &[]);
    };
    let total = data.len();
    let asked = range.as_deref().and_then(|r| {
        let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    let (r, served) = match (asked, s.fault) {
        (None, _) | (_, Fault::RangeAs200) => {
            let body = data.read(0, total - 1);
            let n = body.len();
            (reply(200, body, &[]), n)
        }
        (Some((a, _)), _) if a >= total => (reply(416, vec![], &[]), 0),
        (Some((a, b)), fault) => {
            let b = b.min(total - 1);
            let body = data.read(a, b);
            let cr = if fault == Fault::WrongContentRange {
                format!("bytes {}-{}/{total}", a + 1, b)
            } else {
                format!("bytes {a}-{b}/{total}")
            };
            let n = body.len();
            (reply(206, body, &[("Content-Range", cr)]), n)
        }
    };
    s.seen.last_mut().unwrap().served = served;
    r
}

/// The files of a fixture folder (without expected.json).
fn fixture_files(dir: &str) -> BTreeMap<String, Vec<u8>> {
    let src = common::testdata().join(dir);
    std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "expected.json")
        .map(|n| (n.clone(), std::fs::read(src.join(&n)).unwrap()))
        .collect()
}

/// A run's environment: an empty Hugging Face cache and nnlint's cache in temporary folders.
struct Env {
    hf: tempfile::TempDir,
    nnlint: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            hf: tempfile::tempdir().unwrap(),
            nnlint: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// `program` with the environment of these caches and `endpoint`, every other Hub
    /// variable cleared.
    fn command(&self, program: &str, endpoint: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("NO_COLOR", "1").env("HOME", self.home.path());
        for v in common::HUB_ENV {
            cmd.env_remove(v);
        }
        cmd.env("HF_HUB_CACHE", self.hf.path())
            .env("NNLINT_CACHE", self.nnlint.path())
            .env("HF_ENDPOINT", endpoint);
        cmd
    }

    fn run(&self, endpoint: &str, extra: &[(&str, &str)], args: &[&str]) -> Output {
        let mut cmd = self.command(env!("CARGO_BIN_EXE_nnlint"), endpoint);
        cmd.args(args);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.output().expect("the nnlint binary runs")
    }

    /// [`Env::run`] with standard error on a terminal: util-linux's `script` gives the command a
    /// pseudo-terminal and copies what it shows (standard output and error together).
    fn run_on_terminal(&self, endpoint: &str, args: &[&str]) -> String {
        let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_nnlint"))
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let out = self
            .command("script", endpoint)
            .args(["-qec", &quoted.join(" "), "/dev/null"])
            .output()
            .expect("util-linux's script runs");
        assert!(out.status.success(), "{}", common::stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn json_of(out: &Output) -> Value {
    let err = common::stderr(out);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    serde_json::from_str(&common::stdout(out)).unwrap()
}

fn error_line(out: &Output) -> String {
    let err = common::stderr(out);
    assert!(!err.contains("panicked"), "nnlint panicked:\n{err}");
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    lines[0].to_string()
}

fn numbers(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("model");
    o.remove("source");
    v
}

fn folder_json(dir: &Path) -> Value {
    common::run_json(&["mem", &dir.display().to_string(), "-f", "json"])
}

/// The CDN's answers for one file.
fn cdn_for<'a>(seen: &'a [Seen], file: &str) -> Vec<&'a Seen> {
    seen.iter()
        .filter(|s| s.cdn && s.path.ends_with(&format!("/{file}")))
        .collect()
}

/// An endpoint that takes the connection and never answers: one line naming it once
/// `HF_HUB_DOWNLOAD_TIMEOUT` (huggingface_hub's setting, whole seconds) has passed.
#[test]
fn an_endpoint_that_never_answers_times_out_in_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    // accept and hold every connection without a byte in reply
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let env = Env::new();
    let out = env.run(
        &endpoint,
        &[("HF_HUB_DOWNLOAD_TIMEOUT", "1")],
        &["mem", "org/silent"],
    );
    let e = error_line(&out);
    assert!(
        e.contains(&endpoint) && e.contains("no answer in time") && e.contains("1 s a request"),
        "{e}"
    );
}

/// On a terminal a fetch says what it fetched (a progress bar while the headers come, then one
/// line); `--quiet` silences it, and a pipe (every other test) never sees it.
#[test]
fn a_terminal_sees_what_was_fetched_and_quiet_silences_it() {
    let hub = FakeHub::start("");
    hub.add("org/sharded", fixture_files("llm/llama-sharded"));
    let env = Env::new();
    let shown = env.run_on_terminal(&hub.endpoint(), &["mem", "org/sharded", "--top", "1"]);
    let line = "org/sharded@main: fetched ".to_string();
    assert!(
        shown.contains(&line)
            && shown.contains(&format!("requests from {}, kept in", hub.endpoint())),
        "{shown}"
    );
    // the table follows on standard output
    assert!(shown.contains("parameters"), "{shown}");
    // again, from the cache: nothing fetched, nothing said
    let again = env.run_on_terminal(&hub.endpoint(), &["mem", "org/sharded", "--top", "1"]);
    assert!(!again.contains(&line), "{again}");
    // --quiet on a fresh cache: the same fetch, silent
    let env = Env::new();
    let quiet = env.run_on_terminal(
        &hub.endpoint(),
        &["mem", "org/sharded", "--top", "1", "--quiet"],
    );
    assert!(
        !quiet.contains(&line) && !quiet.contains("fetching headers"),
        "{quiet}"
    );
    assert!(quiet.contains("parameters"), "{quiet}");
    // not a terminal: nothing on standard error
    let env = Env::new();
    let out = env.run(&hub.endpoint(), &[], &["mem", "org/sharded", "--top", "1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !common::stderr(&out).contains(&line),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn a_sharded_checkpoint_over_the_network_equals_its_folder_then_comes_from_the_cache() {
    let hub = FakeHub::start("");
    hub.add("org/sharded", fixture_files("llm/llama-sharded"));
    let env = Env::new();
    let want = numbers(folder_json(&common::testdata().join("llm/llama-sharded")));
    let tok = [("HF_TOKEN", TOKEN)];
    let out = env.run(&hub.endpoint(), &tok, &["mem", "org/sharded", "-f", "json"]);
    let v = json_of(&out);
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["model"], "org/sharded@main (snapshot 01234567)");
    let src = &v["source"];
    assert_eq!(src["origin"], "hub");
    assert_eq!(src["commit"], SHA);
    assert_eq!(src["endpoint"], hub.endpoint());
    let errors = common::schema_errors("mem.schema.json", &v);
    assert!(errors.is_empty(), "{errors:?}");
    // what was asked: per shard one Range request to the CDN, no token there
    let seen = hub.seen();
    for i in 1..=7 {
        let f = format!("model-{i:05}-of-00007.safetensors");
        let c = cdn_for(&seen, &f);
        assert_eq!(c.len(), 1, "{f}: {c:?}");
        // the first window is estimated from the index: 16 KiB at least for these few tensors
        assert_eq!(c[0].range.as_deref(), Some("bytes=0-16383"));
        assert!(c[0].served <= 16384);
    }
    assert!(
        seen.iter().filter(|s| s.cdn).all(|s| s.auth.is_none()),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .filter(|s| !s.cdn)
            .all(|s| s.auth.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "{seen:?}"
    );
    let served: usize = seen.iter().map(|s| s.served).sum();
    assert_eq!(src["fetched_bytes"], served as u64);
    assert_eq!(src["requests"], seen.len() as u64);
    // the token is never printed
    let all = format!("{}{}", common::stdout(&out), common::stderr(&out));
    assert!(!all.contains(TOKEN));
    // nnlint's cache: header-only files and the manifest
    let kept = env.nnlint.path().join("hub/models--org--sharded").join(SHA);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(kept.join(".nnlint-manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["weights"].as_object().unwrap().len(), 7);
    assert_eq!(
        std::fs::read_to_string(env.nnlint.path().join("hub/models--org--sharded/refs/main"))
            .unwrap(),
        SHA
    );
    // a second run asks nothing: the server is gone
    let endpoint = hub.endpoint();
    drop(hub);
    let v2 = json_of(&env.run(&endpoint, &[], &["mem", "org/sharded", "-f", "json"]));
    assert_eq!(numbers(v2.clone()), want);
    assert_eq!(v2["source"]["origin"], "nnlint-cache");
    assert!(v2["source"].get("fetched_bytes").is_none());
    // and offline too, fit as well
    let off = [("HF_HUB_OFFLINE", "1")];
    let v3 = json_of(&env.run(&endpoint, &off, &["mem", "org/sharded@main", "-f", "json"]));
    assert_eq!(numbers(v3), want);
    let f = env.run(
        &endpoint,
        &off,
        &["fit", "org/sharded", "--gpu", "T4", "-f", "json"],
    );
    let fj = json_of(&f);
    assert_eq!(fj["source"]["origin"], "nnlint-cache");
    let errors = common::schema_errors("fit.schema.json", &fj);
    assert!(errors.is_empty(), "{errors:?}");
    // a revision never fetched, offline: says what is missing
    let e = error_line(&env.run(&endpoint, &off, &["mem", "org/sharded@v2"]));
    assert!(
        e.contains("not in nnlint's cache (")
            && e.ends_with(
                "either; offline (--offline or HF_HUB_OFFLINE), so the Hub is not asked"
            ),
        "{e}"
    );
}

#[test]
fn without_siblings_the_paginated_tree_api_lists_the_files() {
    let hub = FakeHub::start("/mirror");
    hub.add("org/sharded", fixture_files("llm/llama-sharded"));
    hub.with(|s| {
        let r = s.repos.get_mut("org/sharded").unwrap();
        r.tree_pages_of = Some(3);
        // a folder: its entry is no file
        r.listed_only = vec!["onnx/model.onnx".into()];
    });
    let env = Env::new();
    let want = numbers(folder_json(&common::testdata().join("llm/llama-sharded")));
    let out = env.run(&hub.endpoint(), &[], &["mem", "org/sharded", "-f", "json"]);
    assert_eq!(numbers(json_of(&out)), want);
    let seen = hub.seen();
    let pages: Vec<&Seen> = seen.iter().filter(|s| s.path.contains("/tree/")).collect();
    let entries = fixture_files("llm/llama-sharded").len() + 2;
    assert_eq!(pages.len(), entries.div_ceil(3), "{pages:?}");
    assert!(pages[0].path.starts_with(&format!(
        "/mirror/api/models/org/sharded/tree/{SHA}?recursive=true"
    )));
    assert!(pages.iter().skip(1).all(|p| p.path.contains("cursor=")));
}

#[test]
fn refresh_refetches_and_a_mirror_with_a_path_works() {
    let hub = FakeHub::start("/mirror/hf");
    hub.add("org/llama", fixture_files("llm/llama"));
    let env = Env::new();
    let want = numbers(folder_json(&common::testdata().join("llm/llama")));
    let endpoint = format!("{}/", hub.endpoint());
    let v = json_of(&env.run(&endpoint, &[], &["mem", "org/llama", "-f", "json"]));
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["source"]["endpoint"], hub.endpoint());
    assert!(hub.seen().iter().all(|s| s.auth.is_none()));
    assert!(hub
        .seen()
        .iter()
        .filter(|s| !s.cdn)
        .all(|s| s.path.starts_with("/mirror/hf/")));
    hub.clear();
    let v = json_of(&env.run(&endpoint, &[], &["mem", "org/llama", "-f", "json"]));
    assert_eq!(v["source"]["origin"], "nnlint-cache");
    assert!(hub.seen().is_empty());
    let v = json_of(&env.run(
        &endpoint,
        &[],
        &["mem", "org/llama", "--refresh", "-f", "json"],
    ));
    assert_eq!(v["source"]["origin"], "hub");
    assert_eq!(numbers(v), want);
    assert!(!hub.seen().is_empty());
    // by sha and with a slashed revision
    hub.with(|s| {
        s.repos
            .get_mut("org/llama")
            .unwrap()
            .refs
            .insert("refs/pr/1".into(), SHA.into());
    });
    hub.clear();
    let v = json_of(&env.run(
        &endpoint,
        &[],
        &["mem", "org/llama@refs/pr/1", "-f", "json"],
    ));
    assert_eq!(numbers(v), want);
    assert!(hub.seen()[0].path.ends_with("/revision/refs%2Fpr%2F1"));
    let v = json_of(&env.run(
        &endpoint,
        &[],
        &["mem", &format!("org/llama@{SHA}"), "-f", "json"],
    ));
    assert_eq!(v["source"]["origin"], "nnlint-cache");
}

#[test]
fn a_gguf_file_over_the_network() {
    let hub = FakeHub::start("");
    let mut files = BTreeMap::new();
    let gguf = std::fs::read(common::testdata().join("llm/gguf/tiny-llama-q4_k_m.gguf")).unwrap();
    files.insert("sub/tiny.gguf".to_string(), gguf.clone());
    files.insert("README.md".to_string(), b"hi".to_vec());
    hub.add("org/tiny-GGUF", files);
    let env = Env::new();
    let local = tempfile::tempdir().unwrap();
    std::fs::write(local.path().join("tiny.gguf"), &gguf).unwrap();
    let want = numbers(folder_json(&local.path().join("tiny.gguf")));
    let v = json_of(&env.run(
        &hub.endpoint(),
        &[],
        &["mem", "org/tiny-GGUF/sub/tiny.gguf", "-f", "json"],
    ));
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["source"]["file"], "sub/tiny.gguf");
    let kept = env
        .nnlint
        .path()
        .join("hub/models--org--tiny-GGUF")
        .join(SHA)
        .join("sub/tiny.gguf");
    let stored = std::fs::metadata(&kept).unwrap().len();
    assert!(stored < gguf.len() as u64, "{stored} of {}", gguf.len());
    let endpoint = hub.endpoint();
    drop(hub);
    let v = json_of(&env.run(
        &endpoint,
        &[],
        &["mem", "org/tiny-GGUF/sub/tiny.gguf", "-f", "json"],
    ));
    assert_eq!(numbers(v.clone()), want);
    assert_eq!(v["source"]["origin"], "nnlint-cache");
}

/// The llama fixture's weights with the header's JSON padded with spaces to `n` bytes.
fn padded(n: usize) -> Vec<u8> {
    let data = std::fs::read(common::testdata().join("llm/llama/model.safetensors")).unwrap();
    let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    assert!(n >= len);
    let mut out = (n as u64).to_le_bytes().to_vec();
    out.extend(&data[8..8 + len]);
    out.resize(8 + n, b' ');
    out.extend(&data[8 + len..]);
    out
}

#[test]
fn headers_around_the_first_window_take_one_or_two_requests() {
    let hub = FakeHub::start("");
    let env = Env::new();
    let config = std::fs::read(common::testdata().join("llm/llama/config.json")).unwrap();
    for n in 99_992..=100_001usize {
        let weights = padded(n);
        let repo = format!("org/edge-{n}");
        let mut files = BTreeMap::new();
        files.insert("config.json".to_string(), config.clone());
        files.insert("model.safetensors".to_string(), weights.clone());
        hub.add(&repo, files);
        let local = tempfile::tempdir().unwrap();
        std::fs::write(local.path().join("config.json"), &config).unwrap();
        std::fs::write(local.path().join("model.safetensors"), &weights).unwrap();
        let want = numbers(folder_json(local.path()));
        hub.clear();
        let v = json_of(&env.run(&hub.endpoint(), &[], &["mem", &repo, "-f", "json"]));
        // a padded header misaligns the data: the same warning, naming each copy's own path
        let tail = |mut v: Value| {
            for w in v["warnings"].as_array_mut().unwrap() {
                let t = w.as_str().unwrap();
                *w = Value::from(&t[t.find("model.safetensors:").unwrap()..]);
            }
            v
        };
        assert_eq!(tail(numbers(v)), tail(want), "n = {n}");
        let seen = hub.seen();
        let c = cdn_for(&seen, "model.safetensors");
        let served: usize = c.iter().map(|s| s.served).sum();
        // bytes=0-100000 holds the length and a header of up to 99,993 bytes
        let requests = if 8 + n <= 100_001 { 1 } else { 2 };
        assert_eq!(c.len(), requests, "n = {n}: {c:?}");
        assert!(served <= (8 + n).max(100_001), "n = {n}: {served}");
        assert!(served < weights.len(), "n = {n}");
        if requests == 2 {
            assert_eq!(c[1].range, Some(format!("bytes=100001-{}", n + 7)));
        }
    }
}

#[test]
fn the_hubs_refusals_are_one_line() {
    let hub = FakeHub::start("");
    hub.add("org/llama", fixture_files("llm/llama"));
    hub.add("org/gated", fixture_files("llm/llama"));
    hub.with(|s| s.repos.get_mut("org/gated").unwrap().gated = true);
    let env = Env::new();
    let ep = hub.endpoint();
    let e = error_line(&env.run(&ep, &[], &["mem", "org/nothere"]));
    assert!(
        e.contains(&format!(
            "repo org/nothere not found on the Hub ({ep}/org/nothere)"
        )),
        "{e}"
    );
    let e = error_line(&env.run(&ep, &[], &["mem", "org/llama@v9"]));
    assert!(
        e.contains("org/llama has no revision 'v9' on the Hub"),
        "{e}"
    );
    let e = error_line(&env.run(&ep, &[], &["mem", "org/gated"]));
    assert!(
        e.contains(&format!(
            "gated or private (HTTP 401): accept the license at {ep}/org/gated and set HF_TOKEN"
        )),
        "{e}"
    );
    // the right token opens it; HF_HUB_DISABLE_IMPLICIT_TOKEN keeps it home
    let tok = [("HF_TOKEN", TOKEN)];
    json_of(&env.run(&ep, &tok, &["mem", "org/gated", "-f", "json"]));
    let e = error_line(&env.run(
        &ep,
        &[
            ("HF_TOKEN", TOKEN),
            ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"),
            ("NNLINT_CACHE", "/nonexistent/x"),
        ],
        &["mem", "org/gated"],
    ));
    assert!(e.contains("gated or private"), "{e}");
    assert!(!e.contains(TOKEN));
    // the token file under HF_HOME
    let hf_home = tempfile::tempdir().unwrap();
    std::fs::write(hf_home.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let env2 = Env::new();
    json_of(&env2.run(
        &ep,
        &[("HF_HOME", &hf_home.path().display().to_string())],
        &["mem", "org/gated", "-f", "json"],
    ));
    // a GGUF file the repo lacks
    let e = error_line(&env.run(&ep, &[], &["mem", "org/llama/x.gguf"]));
    assert!(e.contains("the repo has no file x.gguf"), "{e}");
    // only a pickle
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), b"{}".to_vec());
    hub.add("org/pickle", files);
    hub.with(|s| {
        s.repos.get_mut("org/pickle").unwrap().listed_only = vec!["pytorch_model.bin".into()]
    });
    let e = error_line(&env.run(&ep, &[], &["mem", "org/pickle"]));
    assert!(
        e.contains("holds pytorch_model.bin (a pickle) but no safetensors weights: nnlint reads safetensors headers only"),
        "{e}"
    );
    // an index naming a shard the repo does not hold
    let mut files = fixture_files("llm/llama-sharded");
    files.remove("model-00003-of-00007.safetensors");
    hub.add("org/holey", files);
    let e = error_line(&env.run(&ep, &[], &["mem", "org/holey"]));
    assert!(
        e.contains("model.safetensors.index.json names shard 'model-00003-of-00007.safetensors', which the repo does not hold"),
        "{e}"
    );
    // a header larger than the format allows
    let mut files = fixture_files("llm/llama");
    let mut big = 200_000_000u64.to_le_bytes().to_vec();
    big.extend(b"{}");
    files.insert("model.safetensors".into(), big);
    hub.add("org/huge", files);
    let e = error_line(&env.run(&ep, &[], &["mem", "org/huge"]));
    assert!(
        e.contains("model.safetensors: safetensors header length 200000000 is larger than the 100 MB the format allows"),
        "{e}"
    );
    // the network down names the endpoint
    let e = error_line(&env.run("http://127.0.0.1:9", &[], &["mem", "org/llama"]));
    assert!(
        e.contains("cannot reach the Hub at http://127.0.0.1:9"),
        "{e}"
    );
}

#[test]
fn a_server_that_ignores_range_or_lies_about_it_is_refused() {
    let hub = FakeHub::start("");
    hub.add("org/llama", fixture_files("llm/llama"));
    hub.with(|s| s.fault = Fault::RangeAs200);
    let env = Env::new();
    let e = error_line(&env.run(&hub.endpoint(), &[], &["mem", "org/llama"]));
    assert!(
        e.contains("/blobs/org/llama/")
            && e.contains("answered 200 (the whole file) to a Range request for bytes 0-100000"),
        "{e}"
    );
    hub.with(|s| s.fault = Fault::WrongContentRange);
    let e = error_line(&env.run(&hub.endpoint(), &[], &["mem", "org/llama"]));
    assert!(
        e.contains("does not match the range asked (bytes 0-100000)"),
        "{e}"
    );
    // nothing was kept
    assert!(!env
        .nnlint
        .path()
        .join("hub/models--org--llama")
        .join(SHA)
        .join(".nnlint-manifest.json")
        .exists());
}

/// Serves a sparse llama-70B-shaped checkpoint from `NNLINT_BIG_CHECKPOINT` (a folder made by
/// tools/llm/make_sparse_checkpoint.py) and prints what a cold fetch costs: run by hand for
/// docs/hub.md (`cargo test --release --test hub_net -- --ignored --nocapture`).
#[test]
#[ignore]
fn measure_a_big_checkpoint() {
    let Some(dir) = std::env::var_os("NNLINT_BIG_CHECKPOINT").map(PathBuf::from) else {
        return;
    };
    let hub = FakeHub::start("");
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        files.insert(name, Blob::File(p));
    }
    hub.add_blobs("meta/big", files);
    let env = Env::new();
    let t = std::time::Instant::now();
    let v = json_of(&env.run(&hub.endpoint(), &[], &["mem", "meta/big", "-f", "json"]));
    let cold = t.elapsed();
    let t = std::time::Instant::now();
    json_of(&env.run(&hub.endpoint(), &[], &["mem", "meta/big", "-f", "json"]));
    let warm = t.elapsed();
    println!(
        "requests {} fetched_bytes {} cold {:?} warm {:?}",
        v["source"]["requests"], v["source"]["fetched_bytes"], cold, warm
    );
}

#[test]
fn a_shard_whose_header_outgrows_its_estimated_window_takes_a_second_request() {
    let hub = FakeHub::start("");
    let mut files = fixture_files("llm/llama-sharded");
    let name = "model-00002-of-00007.safetensors";
    let data = files[name].clone();
    let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    let n = 50_000;
    let mut out = (n as u64).to_le_bytes().to_vec();
    out.extend(&data[8..8 + len]);
    out.resize(8 + n, b' ');
    out.extend(&data[8 + len..]);
    files.insert(name.to_string(), out);
    let local = tempfile::tempdir().unwrap();
    for (k, v) in &files {
        std::fs::write(local.path().join(k), v).unwrap();
    }
    let want = numbers(folder_json(local.path()));
    hub.add("org/sharded", files);
    let env = Env::new();
    let v = json_of(&env.run(&hub.endpoint(), &[], &["mem", "org/sharded", "-f", "json"]));
    let tail = |mut v: Value| {
        for w in v["warnings"].as_array_mut().unwrap() {
            let t = w.as_str().unwrap().to_string();
            *w = Value::from(&t[t.find("model-").unwrap()..]);
        }
        v
    };
    assert_eq!(tail(numbers(v)), tail(want));
    let seen = hub.seen();
    let c = cdn_for(&seen, name);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c[1].range, Some(format!("bytes=16384-{}", n + 7)));
}

#[test]
fn the_proxy_variables_are_honoured() {
    // a proxy that records what it is asked and refuses it: ureq tunnels through CONNECT
    let proxy = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = proxy.server_addr().to_ip().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let t = {
        let (proxy, asked) = (proxy.clone(), asked.clone());
        std::thread::spawn(move || {
            for req in proxy.incoming_requests() {
                asked
                    .lock()
                    .unwrap()
                    .push(format!("{} {}", req.method(), req.url()));
                let _ = req.respond(not_found("RepoNotFound"));
            }
        })
    };
    let env = Env::new();
    let e = error_line(&env.run(
        "http://hub.invalid",
        &[("HTTP_PROXY", &format!("http://127.0.0.1:{port}"))],
        &["mem", "org/x"],
    ));
    assert!(
        e.contains("cannot reach the Hub at http://hub.invalid: CONNECT proxy failed"),
        "{e}"
    );
    assert_eq!(asked.lock().unwrap().as_slice(), ["CONNECT hub.invalid:80"]);
    proxy.unblock();
    t.join().unwrap();
}

#[test]
fn diffusers_and_sentence_transformers_repos_over_the_network_equal_their_folders() {
    let hub = FakeHub::start("");
    let env = Env::new();
    let tok = [("HF_TOKEN", TOKEN)];
    for (repo, files, weights) in [
        (
            "org/pipe",
            common::diffusers_files(),
            &[
                "text_encoder/model.safetensors",
                "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
                "unet/diffusion_pytorch_model-00002-of-00002.safetensors",
                "vae/diffusion_pytorch_model.safetensors",
            ][..],
        ),
        (
            "org/st",
            common::sentence_transformers_files(),
            &["model.safetensors", "2_Dense/model.safetensors"][..],
        ),
    ] {
        hub.add(repo, files.clone());
        let dir = tempfile::tempdir().unwrap();
        common::write_files(dir.path(), &files);
        let want = numbers(folder_json(dir.path()));
        let notes = want["notes"].to_string();
        assert!(
            notes.contains("are out of scope")
                || notes.contains("its transformer (the folder's root) is estimated"),
            "{want:#}"
        );
        hub.clear();
        let v = json_of(&env.run(&hub.endpoint(), &tok, &["mem", repo, "-f", "json"]));
        assert_eq!(numbers(v.clone()), want, "{repo}");
        assert_eq!(v["source"]["origin"], "hub");
        let errors = common::schema_errors("mem.schema.json", &v);
        assert!(errors.is_empty(), "{errors:?}");
        // headers only: each weight file by one Range request to the CDN, without the token
        let seen = hub.seen();
        for w in weights {
            let c: Vec<&Seen> = seen
                .iter()
                .filter(|s| s.cdn && s.path.ends_with(&format!("/{SHA}/{w}")))
                .collect();
            assert_eq!(c.len(), 1, "{w}: {seen:?}");
            assert!(c[0].range.is_some() && c[0].auth.is_none(), "{w}: {c:?}");
        }
        // files of no use are not fetched
        assert!(
            !seen
                .iter()
                .any(|s| s.path.contains("tokenizer/") || s.path.contains("scheduler_config")),
            "{seen:?}"
        );
    }
    // a second run comes from nnlint's cache, the server gone
    let endpoint = hub.endpoint();
    drop(hub);
    for (repo, said) in [
        ("org/pipe", "are out of scope"),
        (
            "org/st",
            "its transformer (the folder's root) is estimated as a checkpoint",
        ),
    ] {
        let v = json_of(&env.run(&endpoint, &[], &["mem", repo, "-f", "json"]));
        assert_eq!(v["source"]["origin"], "nnlint-cache", "{repo}");
        assert!(v["notes"].to_string().contains(said), "{repo}: {v:#}");
    }
}

#[test]
fn a_pipeline_listing_that_leaves_the_repo_is_refused() {
    let hub = FakeHub::start("");
    let env = Env::new();
    for (repo, file, body) in [
        (
            "org/bad1",
            "model_index.json",
            r#"{"../x": ["diffusers", "UNet"]}"#,
        ),
        (
            "org/bad2",
            "modules.json",
            r#"[{"path": "/etc", "type": "x"}]"#,
        ),
        (
            "org/bad3",
            "model_index.json",
            r#"{"scheduler": ["diffusers", "S"]}"#,
        ),
    ] {
        let mut files = BTreeMap::new();
        files.insert(file.to_string(), body.as_bytes().to_vec());
        files.insert("x/../../y.safetensors".to_string(), vec![0; 8]);
        hub.add(repo, files);
        let e = error_line(&env.run(&hub.endpoint(), &[], &["mem", repo]));
        assert!(e.starts_with("nnlint: error: "), "{e}");
        assert!(
            e.contains(file) || e.contains("has no safetensors weights"),
            "{repo}: {e}"
        );
    }
}
