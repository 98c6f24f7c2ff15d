//! The Hub's answers: two loopback servers (the endpoint and a "CDN") play back fuzzer-chosen
//! answers (status, `Location`, `Content-Range`, `X-Repo-Commit`, `Link`, `X-Error-Code`, body)
//! to whatever nnlint asks, in order. nnlint fetches an ID (a checkpoint, one GGUF file of a
//! repo, a revision with a slash), keeps what it fetched in its cache, loads the snapshot and
//! analyses it, with and without a training plan.
//!
//! Besides panics, hangs and unbounded allocations, the servers check the token rule: the
//! `Authorization` header reaches the endpoint only, never the CDN host (a panic in a server
//! thread aborts the process, so libFuzzer sees it).
#![no_main]

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::{Mutex, OnceLock};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nnlint::analysis::{self, training::TrainConfig, Bindings};
use nnlint::load::{self, hub::HubId, hub_net, hub_store};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_fuzzsecret";

/// Files a listing can name.
const NAMES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "m.gguf",
    "mmproj.gguf",
    "sub/m.gguf",
    "model_index.json",
    "modules.json",
    "unet/config.json",
    "unet/diffusion_pytorch_model.safetensors",
    "1_Pooling/config.json",
    "pytorch_model.bin",
];

/// Real files an answer can carry.
const FIXTURES: &[&[u8]] = &[
    include_bytes!("../../testdata/llm/llama/config.json"),
    include_bytes!("../../testdata/llm/llama/model.safetensors"),
    include_bytes!("../../testdata/llm/llama-sharded/model.safetensors.index.json"),
    include_bytes!("../../testdata/llm/llama-sharded/model-00001-of-00007.safetensors"),
    include_bytes!("../../testdata/llm/gguf/all-types.gguf"),
    include_bytes!("../../testdata/llm/llama/generation_config.json"),
];

const STATUSES: &[u16] = &[200, 206, 302, 307, 301, 304, 401, 403, 404, 416, 429, 500];
const ERROR_CODES: &[&str] = &["RepoNotFound", "RevisionNotFound", "EntryNotFound", "GatedRepo"];

#[derive(Arbitrary, Debug, Clone)]
enum Body {
    Raw(Vec<u8>),
    Fixture(u8),
    Info { sha: u8, files: Option<Vec<u8>> },
    Tree(Vec<(bool, u8)>),
    Json(String),
    Safetensors { header: String, declared: Option<u64>, pad: u16 },
}

#[derive(Arbitrary, Debug, Clone)]
enum ContentRange {
    None,
    /// The range the request asked, clipped to the body: what a correct server says.
    Asked,
    /// The range asked, with another total.
    AskedOf(u32),
    Raw(String),
}

#[derive(Arbitrary, Debug, Clone)]
struct Answer {
    status: u8,
    /// 0-4: a path, a URL to the endpoint, a URL to the CDN, scheme-relative, relative; else none.
    location: u8,
    range: ContentRange,
    /// 0: none, 1: the commit asked, 2: another, else garbage.
    commit: u8,
    link: Option<String>,
    error_code: Option<u8>,
    body: Body,
}

#[derive(Arbitrary, Debug)]
struct Input {
    target: u8,
    answers: Vec<Answer>,
}

struct Servers {
    answers: Mutex<VecDeque<Answer>>,
    hub: u16,
    cdn: u16,
}

fn servers() -> &'static Servers {
    static S: OnceLock<&'static Servers> = OnceLock::new();
    S.get_or_init(|| {
        let hub = tiny_http::Server::http("127.0.0.1:0").expect("bind the fake Hub");
        let cdn = tiny_http::Server::http("127.0.0.1:0").expect("bind the fake CDN");
        let port = |s: &tiny_http::Server| s.server_addr().to_ip().expect("an IP").port();
        let s: &'static Servers = Box::leak(Box::new(Servers {
            answers: Mutex::new(VecDeque::new()),
            hub: port(&hub),
            cdn: port(&cdn),
        }));
        for (server, is_cdn) in [(hub, false), (cdn, true)] {
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let reply = answer(s, &req, is_cdn);
                    let _ = req.respond(reply);
                }
            });
        }
        s
    })
}

fn header(k: &str, v: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).ok()
}

fn json_body(body: &Body) -> Vec<u8> {
    let names = |ix: &[u8]| -> Vec<&str> { ix.iter().map(|i| NAMES[*i as usize % NAMES.len()]).collect() };
    match body {
        Body::Raw(b) => b.clone(),
        Body::Fixture(i) => FIXTURES[*i as usize % FIXTURES.len()].to_vec(),
        Body::Info { sha, files } => {
            let sha = match sha % 3 {
                0 => serde_json::json!(SHA),
                1 => serde_json::json!("not-a-sha"),
                _ => serde_json::Value::Null,
            };
            let mut v = serde_json::json!({ "id": "org/name", "sha": sha });
            if let Some(f) = files {
                v["siblings"] = names(f).iter().map(|n| serde_json::json!({ "rfilename": n })).collect();
            }
            serde_json::to_vec(&v).unwrap_or_default()
        }
        Body::Tree(entries) => {
            let v: Vec<serde_json::Value> = entries
                .iter()
                .map(|(dir, i)| {
                    serde_json::json!({
                        "type": if *dir { "directory" } else { "file" },
                        "path": NAMES[*i as usize % NAMES.len()],
                    })
                })
                .collect();
            serde_json::to_vec(&v).unwrap_or_default()
        }
        Body::Json(s) => s.as_bytes().to_vec(),
        Body::Safetensors { header, declared, pad } => {
            let n = declared.unwrap_or(header.len() as u64);
            let mut b = n.to_le_bytes().to_vec();
            b.extend_from_slice(header.as_bytes());
            b.resize(b.len() + *pad as usize % 4096, 0);
            b
        }
    }
}

/// `bytes=a-b` of a request.
fn asked(req: &tiny_http::Request) -> Option<(u64, u64)> {
    let v = req.headers().iter().find(|h| h.field.equiv("Range"))?.value.as_str().to_string();
    let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn answer(s: &Servers, req: &tiny_http::Request, is_cdn: bool) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let auth = req.headers().iter().any(|h| h.field.equiv("Authorization"));
    if is_cdn && auth {
        panic!("the token reached the CDN host: {}", req.url());
    }
    let next = s.answers.lock().ok().and_then(|mut q| q.pop_front());
    let Some(a) = next else {
        return tiny_http::Response::from_data(Vec::new()).with_status_code(404);
    };
    let mut body = json_body(&a.body);
    let mut headers = Vec::new();
    let range = asked(req);
    match (&a.range, range) {
        (ContentRange::Asked | ContentRange::AskedOf(_), Some((lo, hi))) => {
            let total = body.len() as u64;
            let end = hi.min(total.saturating_sub(1));
            body = if lo <= end && total > 0 {
                body[lo as usize..=end as usize].to_vec()
            } else {
                Vec::new()
            };
            let total = match a.range {
                ContentRange::AskedOf(t) => u64::from(t),
                _ => total,
            };
            headers.extend(header("Content-Range", &format!("bytes {lo}-{end}/{total}")));
        }
        (ContentRange::Raw(r), _) => headers.extend(header("Content-Range", r)),
        _ => {}
    }
    let location = match a.location {
        0 => Some("/api/resolve-cache/models/org/name/x/config.json".to_string()),
        1 => Some(format!("http://127.0.0.1:{}/org/name/resolve/{SHA}/model.safetensors", s.hub)),
        2 => Some(format!("http://127.0.0.1:{}/blobs/x", s.cdn)),
        3 => Some(format!("//127.0.0.1:{}/blobs/y", s.cdn)),
        4 => Some("z/../model.safetensors".to_string()),
        _ => None,
    };
    headers.extend(location.and_then(|l| header("Location", &l)));
    match a.commit {
        0 => {}
        1 => headers.extend(header("X-Repo-Commit", SHA)),
        2 => headers.extend(header("X-Repo-Commit", "ffffffffffffffffffffffffffffffffffffffff")),
        _ => headers.extend(header("X-Repo-Commit", "\u{7f}garbage")),
    }
    if let Some(l) = &a.link {
        headers.extend(header("Link", l));
    }
    if let Some(c) = a.error_code {
        headers.extend(header("X-Error-Code", ERROR_CODES[c as usize % ERROR_CODES.len()]));
    }
    let mut r = tiny_http::Response::from_data(body)
        .with_status_code(STATUSES[a.status as usize % STATUSES.len()]);
    for h in headers {
        r.add_header(h);
    }
    r
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary(&mut arbitrary::Unstructured::new(data)) else {
        return;
    };
    let s = servers();
    if let Ok(mut q) = s.answers.lock() {
        *q = input.answers.iter().take(64).cloned().collect();
    }
    let (id, revision) = match input.target % 3 {
        0 => ("org/name", "main"),
        1 => ("org/name/m.gguf", "main"),
        _ => ("org/name", "refs/pr/1"),
    };
    let Ok(id) = HubId::parse(id) else { return };
    let endpoint = format!("http://127.0.0.1:{}", s.hub);
    let env = |k: &str| -> Option<OsString> {
        match k {
            "HF_ENDPOINT" => Some(endpoint.clone().into()),
            "HF_TOKEN" => Some(TOKEN.into()),
            "HF_HUB_DOWNLOAD_TIMEOUT" => Some("5".into()),
            _ => None,
        }
    };
    let hub = hub_net::Hub::from_env(&env);
    let fetched = hub_net::fetch(&hub, &id, revision, &nnlint::util::progress::Silent);
    if let Ok(mut q) = s.answers.lock() {
        q.clear();
    }
    let Ok(fetched) = fetched else { return };
    let dir = std::env::temp_dir().join(format!("nnlint-fuzz-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = hub_store::Store { dir: dir.clone(), from: "NNLINT_CACHE" };
    if let Ok(snapshot) = store.write(&id, revision, &fetched) {
        // a second lookup reads the cache back
        let again = store.find(&id, revision);
        if let Ok(loaded) = load::load_snapshot(&snapshot) {
            let train = TrainConfig::default();
            let _ = analysis::analyze_loaded(&snapshot.path, &loaded, &Bindings::default(), None);
            let _ = analysis::analyze_loaded(&snapshot.path, &loaded, &Bindings::default(), Some(&train));
        }
        drop(again);
    }
    let _ = std::fs::remove_dir_all(&dir);
});
