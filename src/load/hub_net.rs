//! The Hub's file API, headers only (issue 21, second part): the repo's file list and commit from
//! `{endpoint}/api/models/{repo}/revision/{rev}`, the small files whole from
//! `{endpoint}/{repo}/resolve/{sha}/{file}`, and per weight file its header by HTTP `Range`
//! requests: a safetensors file in at most two (`bytes=0-100000` as huggingface_hub reads it,
//! then the rest of a longer header), a GGUF file by growing reads until its header parses.
//! Redirects are followed here, not by the client, so that the token goes to the endpoint's host
//! only (a CDN gets no `Authorization`). A `200` to a Range request is an error, never a
//! download. What is fetched goes to nnlint's cache (`hub_store`).

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::hub::HubId;
use super::hub_store::Fetched;
use crate::error::{Error, Result};
use crate::util::progress::Progress;

/// The Hub huggingface_hub talks to without `HF_ENDPOINT`.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The first window of a safetensors header, `bytes=0-100000` as huggingface_hub reads it: the
/// 8-byte length and a header of up to 99,993 bytes in one request.
pub const SAFETENSORS_WINDOW: u64 = 100_001;

/// safetensors' own limit on a header (`safetensors::tensor::MAX_HEADER_SIZE`).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// A GGUF file's first read; each further read doubles what is at hand.
pub const GGUF_WINDOW: u64 = 256 * 1024;

/// The most of a GGUF file read before giving up on its header (tokenizer arrays make headers of
/// several MB; no header comes near this).
pub const MAX_GGUF_HEADER: u64 = 256 * 1024 * 1024;

/// The most a JSON answer or small file may be (an index of 75,000 tensors is 7 MB).
const MAX_SMALL_FILE: u64 = 64 * 1024 * 1024;

/// Shards fetched at once.
const WORKERS: usize = 8;

/// Pages of the tree API followed (the Hub pages by 1,000 files and more).
const MAX_TREE_PAGES: usize = 1000;

/// Redirects followed for one file.
const MAX_REDIRECTS: usize = 10;

/// Connection setup, TLS included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One request, its redirects and its body, unless `HF_HUB_DOWNLOAD_TIMEOUT` says otherwise.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The request timeout: `HF_HUB_DOWNLOAD_TIMEOUT` (whole seconds, as huggingface_hub reads it;
/// 0 or anything else leaves the default), else [`REQUEST_TIMEOUT`].
pub fn request_timeout(var: &dyn Fn(&str) -> Option<OsString>) -> Duration {
    var("HF_HUB_DOWNLOAD_TIMEOUT")
        .and_then(|v| v.to_str().and_then(|s| s.trim().parse::<u64>().ok()))
        .filter(|&s| s > 0)
        .map_or(REQUEST_TIMEOUT, Duration::from_secs)
}

/// How a transport error's message starts (the network is down, the endpoint does not answer).
const UNREACHABLE: &str = "cannot reach the Hub at";

/// Whether an error is the Hub not being reached at all (rather than an answer).
pub fn is_unreachable(e: &Error) -> bool {
    matches!(e, Error::Refused { message, .. } if message.starts_with(UNREACHABLE))
}

/// How the Hub is reached: the endpoint, the token, and the client.
pub struct Hub {
    agent: ureq::Agent,
    /// `HF_ENDPOINT` without its trailing slash.
    pub endpoint: String,
    /// scheme, host and port of the endpoint: the one origin the token is sent to.
    origin: Option<(String, String, u16)>,
    token: Option<String>,
    requests: AtomicU64,
    bytes: AtomicU64,
    /// To connect, and for one request with its redirects and body.
    timeouts: (Duration, Duration),
}

/// The endpoint: `HF_ENDPOINT` (empty counts as unset), trailing slashes stripped.
pub fn endpoint(var: &dyn Fn(&str) -> Option<OsString>) -> String {
    var("HF_ENDPOINT")
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().trim_end_matches('/').to_string())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

/// The token as huggingface_hub finds it (`utils/_auth.py`): `HF_TOKEN`, else the legacy
/// `HUGGING_FACE_HUB_TOKEN`, else the file at `HF_TOKEN_PATH`, else `$HF_HOME/token` (`HF_HOME`
/// defaulting to `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`). Surrounding
/// whitespace is dropped; an empty token is none. `HF_HUB_DISABLE_IMPLICIT_TOKEN` set true sends
/// none.
pub fn token(var: &dyn Fn(&str) -> Option<OsString>) -> Option<String> {
    let get = |k: &str| var(k).filter(|v| !v.is_empty());
    let truthy = |k: &str| {
        get(k).is_some_and(|v| {
            matches!(
                v.to_string_lossy().to_ascii_uppercase().as_str(),
                "1" | "ON" | "YES" | "TRUE"
            )
        })
    };
    if truthy("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
        return None;
    }
    let clean = |s: String| Some(s.trim().to_string()).filter(|t| !t.is_empty());
    for k in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        if let Some(v) = get(k) {
            return clean(v.to_string_lossy().into_owned());
        }
    }
    let home = get("HOME").map(PathBuf::from);
    let expand = |v: OsString| {
        let p = PathBuf::from(v);
        match (p.strip_prefix("~"), &home) {
            (Ok(rest), Some(h)) => h.join(rest),
            _ => p,
        }
    };
    let path = get("HF_TOKEN_PATH").map(expand).or_else(|| {
        let hf_home = get("HF_HOME")
            .map(expand)
            .or_else(|| get("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("huggingface")))
            .or_else(|| home.as_ref().map(|h| h.join(".cache").join("huggingface")))?;
        Some(hf_home.join("token"))
    })?;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    clean(text)
}

/// Percent-encodes everything but `A-Z a-z 0-9 - . _ ~` (and `/` when `keep_slash`), as
/// Python's `quote` does (`safe=""` for a revision, the default `safe="/"` for a file name).
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// scheme, lowercase host and port (the scheme's default when none is written) of a URL.
fn origin_of(url: &str) -> Option<(String, String, u16)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, uri.host()?.to_ascii_lowercase(), port))
}

/// A redirect's target: absolute, scheme-relative (`//host/x`), absolute path (`/api/...`,
/// against the current URL's origin) or relative path (against its folder).
fn join(base: &str, location: &str) -> Option<String> {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Some(location.to_string());
    }
    let (scheme, rest) = base.split_once("://")?;
    if let Some(r) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{r}"));
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = rest[authority.len()..]
        .split(['?', '#'])
        .next()
        .unwrap_or("");
    let folder = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let folder = if folder.is_empty() { "/" } else { folder };
    Some(format!("{scheme}://{authority}{folder}{location}"))
}

/// An answer, its redirects followed.
struct Answer {
    status: u16,
    url: String,
    error_code: Option<String>,
    content_range: Option<String>,
    commit: Option<String>,
    link: Option<String>,
    response: ureq::http::Response<ureq::Body>,
}

/// A Range answer's `Content-Range: bytes a-b/total`.
fn content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((
        a.trim().parse().ok()?,
        b.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

/// The `rel="next"` target of a `Link` header (`<url>; rel="next", <url>; rel="prev"`), as
/// huggingface_hub's `paginate` follows it.
fn next_link(v: &str) -> Option<&str> {
    v.split(',').find_map(|part| {
        let (target, params) = part.trim().strip_prefix('<')?.split_once('>')?;
        params
            .split(';')
            .filter_map(|p| p.trim().split_once('='))
            .any(|(k, v)| {
                k.trim().eq_ignore_ascii_case("rel")
                    && v.trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
            .then_some(target.trim())
    })
}

/// The repo's answer to the revision call: the commit and the file list (absent from some
/// mirrors' answers: then the tree API lists the files).
#[derive(serde::Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    siblings: Option<Vec<Sibling>>,
}

/// One entry of the tree API's answer (`/api/models/{repo}/tree/{rev}`).
#[derive(serde::Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

impl Hub {
    /// The endpoint, token and proxies from the environment (`var`), for the process's client.
    pub fn from_env(var: &dyn Fn(&str) -> Option<OsString>) -> Hub {
        let endpoint = endpoint(var);
        let request = request_timeout(var);
        let connect = CONNECT_TIMEOUT.min(request);
        let config = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .proxy(ureq::Proxy::try_from_env())
            .timeout_connect(Some(connect))
            .timeout_global(Some(request))
            .user_agent(concat!("nnlint/", env!("CARGO_PKG_VERSION")))
            .build();
        Hub {
            agent: config.new_agent(),
            origin: origin_of(&endpoint),
            endpoint,
            token: token(var),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            timeouts: (connect, request),
        }
    }

    /// HTTP requests made so far (each redirect hop is one).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Body bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// GET `url`, following redirects here: `Authorization` only while the URL is on the
    /// endpoint's origin, `Range` on every hop.
    fn get(&self, url: &str, range: Option<(u64, u64)>) -> Result<Answer> {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.agent.get(&url);
            if let (Some(t), Some(o)) = (&self.token, &self.origin) {
                if origin_of(&url).as_ref() == Some(o) {
                    req = req.header("Authorization", format!("Bearer {t}"));
                }
            }
            if let Some((a, b)) = range {
                req = req.header("Range", format!("bytes={a}-{b}"));
            }
            self.requests.fetch_add(1, Ordering::Relaxed);
            let response = req.call().map_err(|e| self.transport(&url, e))?;
            let status = response.status().as_u16();
            let header = |k: &str| {
                response
                    .headers()
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            if (300..400).contains(&status) && status != 304 {
                let Some(location) = header("location") else {
                    return Err(Error::refused(
                        &url,
                        format!("HTTP {status} redirect without a Location"),
                    ));
                };
                url = join(&url, &location).ok_or_else(|| {
                    Error::refused(
                        &url,
                        format!(
                            "HTTP {status}: cannot follow Location '{}'",
                            location.escape_debug()
                        ),
                    )
                })?;
                continue;
            }
            return Ok(Answer {
                status,
                error_code: header("x-error-code"),
                content_range: header("content-range"),
                commit: header("x-repo-commit"),
                link: header("link"),
                url,
                response,
            });
        }
        Err(Error::refused(
            &url,
            format!("more than {MAX_REDIRECTS} redirects"),
        ))
    }

    /// A transport error, naming the endpoint (never the request's headers).
    fn transport(&self, url: &str, e: ureq::Error) -> Error {
        let why = match &e {
            ureq::Error::Timeout(t) => format!(
                "no answer in time ({t:?} timeout: {} s to connect, {} s a request; HF_HUB_DOWNLOAD_TIMEOUT sets the second)",
                self.timeouts.0.as_secs(),
                self.timeouts.1.as_secs()
            ),
            _ => e.to_string(),
        };
        Error::refused(
            url,
            format!("{UNREACHABLE} {}: {why} (HF_ENDPOINT sets the endpoint; HF_HUB_OFFLINE=1 or --offline keeps nnlint off the network)", self.endpoint),
        )
    }

    /// An answer that is not the one asked for, as one line: the Hub's 404s by their
    /// `X-Error-Code`, 401/403 as a gated or private repo, anything else by its status.
    fn refuse(&self, a: &Answer, id: &HubId, revision: &str) -> Error {
        let repo = id.repo();
        let why = match (a.status, a.error_code.as_deref()) {
            (404, Some("RepoNotFound")) => format!(
                "repo {repo} not found on the Hub ({}/{repo}): check the name, or set HF_TOKEN for a private repo",
                self.endpoint
            ),
            (404, Some("RevisionNotFound")) => {
                format!("{repo} has no revision '{revision}' on the Hub")
            }
            (404, Some("EntryNotFound")) => format!("{repo}@{revision} has no such file"),
            (401 | 403, _) => format!(
                "gated or private (HTTP {}): accept the license at {}/{repo} and set HF_TOKEN",
                a.status, self.endpoint
            ),
            (s, code) => format!(
                "HTTP {s}{}",
                code.map(|c| format!(" ({})", c.escape_debug()))
                    .unwrap_or_default()
            ),
        };
        Error::refused(&a.url, why)
    }

    /// Reads a whole body of at most `limit` bytes.
    fn body(&self, a: &mut Answer, limit: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        a.response
            .body_mut()
            .as_reader()
            .take(limit + 1)
            .read_to_end(&mut out)
            .map_err(|e| Error::refused(&a.url, format!("reading the answer: {e}")))?;
        self.bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
        if out.len() as u64 > limit {
            return Err(Error::refused(
                &a.url,
                format!("the answer is larger than {limit} bytes"),
            ));
        }
        Ok(out)
    }

    /// The commit a revision names and the repo's files.
    fn info(&self, id: &HubId, revision: &str) -> Result<(String, Vec<String>)> {
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.endpoint,
            id.repo(),
            encode(revision, false)
        );
        let mut a = self.get(&url, None)?;
        if a.status != 200 {
            return Err(self.refuse(&a, id, revision));
        }
        let body = self.body(&mut a, MAX_SMALL_FILE)?;
        let info: RepoInfo = serde_json::from_slice(&body)
            .map_err(|e| Error::refused(&url, format!("not the Hub's repo information: {e}")))?;
        let sha = info
            .sha
            .filter(|s| super::hub::is_commit(s))
            .ok_or_else(|| Error::refused(&url, "the answer names no commit sha"))?;
        let files = match info.siblings {
            Some(s) => s.into_iter().map(|s| s.rfilename).collect(),
            None => self.tree(id, &sha)?,
        };
        Ok((sha, files))
    }

    /// The repo's files at `commit` from the paginated tree API (`?recursive=true`, pages
    /// followed by their `Link: <...>; rel="next"` header, at most [`MAX_TREE_PAGES`]).
    fn tree(&self, id: &HubId, commit: &str) -> Result<Vec<String>> {
        let mut url = format!(
            "{}/api/models/{}/tree/{commit}?recursive=true&expand=false",
            self.endpoint,
            id.repo()
        );
        let mut files = Vec::new();
        for _ in 0..MAX_TREE_PAGES {
            let mut a = self.get(&url, None)?;
            if a.status != 200 {
                return Err(self.refuse(&a, id, commit));
            }
            let body = self.body(&mut a, MAX_SMALL_FILE)?;
            let page: Vec<TreeEntry> = serde_json::from_slice(&body)
                .map_err(|e| Error::refused(&a.url, format!("not the Hub's file tree: {e}")))?;
            files.extend(
                page.into_iter()
                    .filter(|e| e.kind == "file")
                    .map(|e| e.path),
            );
            match a.link.as_deref().and_then(next_link) {
                None => return Ok(files),
                Some(next) => {
                    url = join(&a.url, next).ok_or_else(|| {
                        Error::refused(
                            &a.url,
                            format!("cannot follow the next page '{}'", next.escape_debug()),
                        )
                    })?
                }
            }
        }
        Err(Error::refused(
            &url,
            format!("the file tree runs past {MAX_TREE_PAGES} pages"),
        ))
    }

    fn resolve_url(&self, id: &HubId, commit: &str, file: &str) -> String {
        format!(
            "{}/{}/resolve/{commit}/{}",
            self.endpoint,
            id.repo(),
            encode(file, true)
        )
    }

    /// A small file, whole.
    fn whole(&self, id: &HubId, commit: &str, file: &str) -> Result<Vec<u8>> {
        let url = self.resolve_url(id, commit, file);
        let mut a = self.get(&url, None)?;
        if a.status != 200 {
            return Err(self.refuse(&a, id, commit));
        }
        self.check_commit(&a, commit)?;
        self.body(&mut a, MAX_SMALL_FILE)
    }

    /// huggingface_hub refuses a resolve answer without `X-Repo-Commit` (it reads file metadata
    /// from a HEAD request); nnlint asks by commit already, so it tolerates the header's absence
    /// (a CDN answer has none) but not a different commit.
    fn check_commit(&self, a: &Answer, commit: &str) -> Result<()> {
        match &a.commit {
            Some(c) if c.trim() != commit => Err(Error::refused(
                &a.url,
                format!(
                    "the answer is for commit {}, not {commit} as asked",
                    c.escape_debug()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Bytes `a..=b` of a file, and its total size: a `206` whose `Content-Range` is the range
    /// asked (its end clipped to the file) and whose body is exactly that long.
    fn range(&self, id: &HubId, commit: &str, url: &str, a: u64, b: u64) -> Result<(Vec<u8>, u64)> {
        let mut ans = self.get(url, Some((a, b)))?;
        match ans.status {
            206 => {}
            200 => {
                return Err(Error::refused(
                    &ans.url,
                    format!("answered 200 (the whole file) to a Range request for bytes {a}-{b}: nnlint reads headers only and does not download weight files"),
                ))
            }
            416 => {
                return Err(Error::refused(
                    &ans.url,
                    format!("answered 416 to bytes {a}-{b}: the file is shorter than a header"),
                ))
            }
            _ => return Err(self.refuse(&ans, id, commit)),
        }
        self.check_commit(&ans, commit)?;
        let cr = ans.content_range.clone().unwrap_or_default();
        let (ga, gb, total) = content_range(&cr).ok_or_else(|| {
            Error::refused(
                &ans.url,
                format!(
                    "206 with Content-Range '{}', not 'bytes a-b/total'",
                    cr.escape_debug()
                ),
            )
        })?;
        let want_end = b.min(total.saturating_sub(1));
        if ga != a || gb != want_end || gb < ga || gb >= total {
            return Err(Error::refused(
                &ans.url,
                format!("Content-Range '{cr}' does not match the range asked (bytes {a}-{b})"),
            ));
        }
        let len = gb - ga + 1;
        let body = self.body(&mut ans, len)?;
        if body.len() as u64 != len {
            return Err(Error::refused(
                &ans.url,
                format!(
                    "Content-Range '{cr}' announces {len} bytes and the answer holds {}",
                    body.len()
                ),
            ));
        }
        Ok((body, total))
    }

    /// A safetensors file's `8 + n` header bytes and its size: the first window, then the rest of
    /// the header when it is longer (at most two requests).
    fn safetensors_header(
        &self,
        id: &HubId,
        commit: &str,
        file: &str,
        window: u64,
    ) -> Result<(Vec<u8>, u64)> {
        let url = self.resolve_url(id, commit, file);
        let (mut head, total) = self.range(id, commit, &url, 0, window.max(8) - 1)?;
        if head.len() < 8 {
            return Err(Error::malformed(
                &url,
                format!(
                    "not a safetensors file: {} bytes, fewer than the 8-byte header length",
                    total
                ),
            ));
        }
        let mut n8 = [0u8; 8];
        n8.copy_from_slice(&head[..8]);
        let n = u64::from_le_bytes(n8);
        if n > MAX_SAFETENSORS_HEADER {
            return Err(Error::malformed(
                &url,
                format!(
                    "safetensors header length {n} is larger than the 100 MB the format allows"
                ),
            ));
        }
        let end = 8 + n;
        if end > total {
            return Err(Error::malformed(
                &url,
                format!(
                    "safetensors header length {n} runs past the end of the file ({total} bytes)"
                ),
            ));
        }
        let got = head.len() as u64;
        if end > got {
            let (rest, total2) = self.range(id, commit, &url, got, end - 1)?;
            if total2 != total {
                return Err(Error::refused(
                    &url,
                    format!("the file's size changed between two requests ({total} then {total2} bytes)"),
                ));
            }
            head.extend(rest);
        }
        head.truncate(end as usize);
        Ok((head, total))
    }

    /// A GGUF file's bytes up to its tensor data, and its size: reads that double what is at
    /// hand until the header parses.
    fn gguf_header(&self, id: &HubId, commit: &str, file: &str) -> Result<(Vec<u8>, u64)> {
        let url = self.resolve_url(id, commit, file);
        let (mut head, total) = self.range(id, commit, &url, 0, GGUF_WINDOW - 1)?;
        let label = PathBuf::from(&url);
        loop {
            if let Some(g) = super::gguf::parse_prefix(&label, &head, total)? {
                head.truncate(g.data_start.min(head.len() as u64) as usize);
                return Ok((head, total));
            }
            let got = head.len() as u64;
            if got >= total {
                return Err(Error::malformed(
                    &url,
                    format!("the file ({total} bytes) ends inside its GGUF header"),
                ));
            }
            if got >= MAX_GGUF_HEADER {
                return Err(Error::malformed(
                    &url,
                    format!("the GGUF header goes on past {MAX_GGUF_HEADER} bytes"),
                ));
            }
            let end = (2 * got).min(MAX_GGUF_HEADER).min(total) - 1;
            let (more, total2) = self.range(id, commit, &url, got, end)?;
            if total2 != total {
                return Err(Error::refused(
                    &url,
                    format!("the file's size changed between two requests ({total} then {total2} bytes)"),
                ));
            }
            head.extend(more);
        }
    }
}

/// The first window for each shard a sharded index names: its header estimated from the names of
/// the tensors the index puts there (an entry is its name and about 100 bytes of dtype, shape
/// and offsets), half again for safety, at least 16 KiB and at most [`SAFETENSORS_WINDOW`]. A
/// 70B checkpoint's 30 shards hold about 5 KB of header each: 30 windows of 100 KB would be
/// 3 MB, these are 0.5 MB. An estimate too small costs the second request, never a wrong answer.
fn shard_windows(index: &[u8]) -> std::collections::HashMap<String, u64> {
    let mut est = std::collections::HashMap::new();
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(index) else {
        return est;
    };
    if let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) {
        for (tensor, shard) in map {
            if let Some(shard) = shard.as_str() {
                *est.entry(shard.to_string()).or_insert(0u64) += tensor.len() as u64 + 100;
            }
        }
    }
    for w in est.values_mut() {
        *w = (*w * 3 / 2 + 1024).clamp(16 * 1024, SAFETENSORS_WINDOW);
    }
    est
}

/// A weight file's header bytes and the whole file's size.
type Header = (Vec<u8>, u64);

/// The weight files of a checkpoint as the repo lists them, after the index is read: the
/// sharded index's shards, `model.safetensors`, or the one other safetensors file.
fn weights(
    hub: &Hub,
    id: &HubId,
    commit: &str,
    files: &[String],
    fetched: &mut Fetched,
) -> Result<Vec<String>> {
    let top: Vec<&String> = files.iter().filter(|f| !f.contains('/')).collect();
    let indexes: Vec<&&String> = top
        .iter()
        .filter(|f| f.ends_with(".safetensors.index.json"))
        .collect();
    let singles: Vec<&&String> = top.iter().filter(|f| f.ends_with(".safetensors")).collect();
    let index = if top.iter().any(|f| *f == "model.safetensors.index.json") {
        Some("model.safetensors.index.json".to_string())
    } else if top.iter().any(|f| *f == "model.safetensors") {
        return Ok(vec!["model.safetensors".into()]);
    } else {
        match (indexes.as_slice(), singles.as_slice()) {
            ([one], _) => Some(one.to_string()),
            ([], [one]) => return Ok(vec![one.to_string()]),
            _ => None,
        }
    };
    let Some(index) = index else {
        return Err(no_weights(id, commit, files));
    };
    let bytes = hub.whole(id, commit, &index)?;
    let tmp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let local = tmp.path().join(&index);
    std::fs::write(&local, &bytes).map_err(|e| Error::io(&local, e))?;
    let shards = super::safetensors::shard_names(&local)
        .map_err(|e| Error::malformed(hub.resolve_url(id, commit, &index), e.to_string()))?;
    fetched.windows = shard_windows(&bytes);
    fetched.whole.push((index.clone(), bytes));
    if shards.is_empty() {
        return Err(Error::malformed(
            hub.resolve_url(id, commit, &index),
            "the index has an empty or missing weight_map",
        ));
    }
    let missing: Vec<&String> = shards.iter().filter(|s| !files.contains(s)).collect();
    if let Some(first) = missing.first() {
        return Err(Error::refused(
            format!("{}@{}", id.repo(), super::hub::short(commit)),
            format!(
                "{index} names shard '{first}'{}, which the repo does not hold",
                match missing.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                }
            ),
        ));
    }
    Ok(shards)
}

/// The weight files of a diffusers pipeline or a sentence-transformers model
/// (`load::pipeline`): its listing, the root's and each component's `config.json` whole, each
/// component's sharded index whole, and the weight files (`folder/file`) whose headers to fetch.
fn pipeline_weights(
    hub: &Hub,
    id: &HubId,
    commit: &str,
    files: &[String],
    fetched: &mut Fetched,
) -> Result<Vec<String>> {
    use super::pipeline;
    let listed = |n: &str| files.iter().any(|f| f == n);
    let Some(kind) = pipeline::detect_by(listed) else {
        return Err(no_weights(id, commit, files));
    };
    let listing = hub.whole(id, commit, kind.file())?;
    let comps = pipeline::components(kind, &listing)
        .map_err(|m| Error::malformed(hub.resolve_url(id, commit, kind.file()), m))?;
    fetched.whole.push((kind.file().to_string(), listing));
    for name in ["config.json", "config_sentence_transformers.json"] {
        if listed(name) {
            let bytes = hub.whole(id, commit, name)?;
            fetched.whole.push((name.to_string(), bytes));
        }
    }
    let mut weights = Vec::new();
    for c in &comps {
        let prefix = if c.folder.is_empty() {
            String::new()
        } else {
            format!("{}/", c.folder)
        };
        let here: Vec<&str> = files
            .iter()
            .filter_map(|f| f.strip_prefix(&prefix))
            .filter(|n| !n.contains('/'))
            .collect();
        if !prefix.is_empty() && here.contains(&"config.json") {
            let name = format!("{prefix}config.json");
            let bytes = hub.whole(id, commit, &name)?;
            fetched.whole.push((name, bytes));
        }
        let file = pipeline::weights_file(&here).map_err(|m| {
            Error::refused(
                format!("{}@{}/{}", id.repo(), super::hub::short(commit), c.folder),
                m,
            )
        })?;
        let Some(file) = file else { continue };
        let name = format!("{prefix}{file}");
        if !super::safetensors::is_index(std::path::Path::new(&file)) {
            weights.push(name);
            continue;
        }
        let bytes = hub.whole(id, commit, &name)?;
        let tmp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let local = tmp.path().join(&file);
        std::fs::write(&local, &bytes).map_err(|e| Error::io(&local, e))?;
        let shards = super::safetensors::shard_names(&local)
            .map_err(|e| Error::malformed(hub.resolve_url(id, commit, &name), e.to_string()))?;
        for (shard, w) in shard_windows(&bytes) {
            fetched.windows.insert(format!("{prefix}{shard}"), w);
        }
        fetched.whole.push((name.clone(), bytes));
        for shard in shards {
            let full = format!("{prefix}{shard}");
            if !files.contains(&full) {
                return Err(Error::refused(
                    format!("{}@{}", id.repo(), super::hub::short(commit)),
                    format!("{name} names shard '{shard}', which the repo does not hold"),
                ));
            }
            weights.push(full);
        }
    }
    if weights.is_empty() {
        return Err(no_weights(id, commit, files));
    }
    Ok(weights)
}

/// "No safetensors weights", saying what the repo holds instead.
fn no_weights(id: &HubId, commit: &str, files: &[String]) -> Error {
    let ggufs: Vec<&String> = files
        .iter()
        .filter(|f| f.to_ascii_lowercase().ends_with(".gguf"))
        .collect();
    let pickles: Vec<&String> = files
        .iter()
        .filter(|f| f.ends_with(".bin") || f.ends_with(".pt") || f.ends_with(".pth"))
        .collect();
    let why = if let Some(g) = ggufs.first() {
        format!(
            "holds GGUF files and no safetensors checkpoint: name one, as {}/{g}",
            id.repo()
        )
    } else if let Some(p) = pickles.first() {
        format!("holds {p} (a pickle) but no safetensors weights: nnlint reads safetensors headers only")
    } else {
        let shown: Vec<&str> = files.iter().take(6).map(String::as_str).collect();
        format!(
            "has no safetensors weights or GGUF files (it holds {}{})",
            if shown.is_empty() {
                "nothing".to_string()
            } else {
                shown.join(", ")
            },
            if files.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        )
    };
    Error::refused(format!("{}@{}", id.repo(), super::hub::short(commit)), why)
}

/// Fetches what `id` at `revision` needs, headers only: the repo's commit and file list, the
/// small files whole, each weight file's header (shards `WORKERS` at a time). `progress` sees
/// one step per weight file.
pub fn fetch(hub: &Hub, id: &HubId, revision: &str, progress: &dyn Progress) -> Result<Fetched> {
    let (commit, files) = hub.info(id, revision)?;
    if super::hub::is_commit(revision) && commit != revision {
        return Err(Error::refused(
            format!("{}@{revision}", id.target()),
            format!("the Hub ({}) answered commit {commit} for it", hub.endpoint),
        ));
    }
    let mut fetched = Fetched {
        commit: commit.clone(),
        endpoint: hub.endpoint.clone(),
        ..Fetched::default()
    };
    let weights = match &id.file {
        Some(f) => {
            if !files.contains(f) {
                let ggufs: Vec<&str> = files
                    .iter()
                    .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
                    .take(4)
                    .map(String::as_str)
                    .collect();
                return Err(Error::refused(
                    format!("{}@{revision}", id.target()),
                    format!(
                        "the repo has no file {f}{}",
                        if ggufs.is_empty() {
                            String::new()
                        } else {
                            format!(" (its GGUF files: {})", ggufs.join(", "))
                        }
                    ),
                ));
            }
            vec![f.clone()]
        }
        None if super::pipeline::detect_by(|n| files.iter().any(|f| f == n)).is_some() => {
            pipeline_weights(hub, id, &commit, &files, &mut fetched)?
        }
        None => {
            if !files.iter().any(|f| f == "config.json") {
                return Err(no_config(id, &commit, &files));
            }
            for name in [
                "config.json",
                "generation_config.json",
                "preprocessor_config.json",
            ] {
                if files.iter().any(|f| f == name) {
                    let bytes = hub.whole(id, &commit, name)?;
                    fetched.whole.push((name.to_string(), bytes));
                }
            }
            weights(hub, id, &commit, &files, &mut fetched)?
        }
    };
    let windows = std::mem::take(&mut fetched.windows);
    progress.start("fetching headers", weights.len() as u64);
    progress.message(&format!("{} from {}", id.repo(), hub.endpoint));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Header>>>> =
        Mutex::new((0..weights.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(weights.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = weights.get(i) else { break };
                let r = if name.to_ascii_lowercase().ends_with(".gguf") {
                    hub.gguf_header(id, &commit, name)
                } else {
                    let window = windows.get(name).copied().unwrap_or(SAFETENSORS_WINDOW);
                    hub.safetensors_header(id, &commit, name, window)
                };
                let failed = r.is_err();
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
                progress.advance(1);
                if failed {
                    // the others stop at their next file
                    next.store(weights.len(), Ordering::Relaxed);
                }
            });
        }
    });
    progress.finish();
    let results = results.into_inner().unwrap_or_default();
    for (name, r) in weights.iter().zip(results) {
        match r {
            Some(Ok((bytes, total))) => fetched.headers.push((name.clone(), bytes, total)),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    if fetched.headers.len() != weights.len() {
        return Err(Error::refused(
            format!("{}@{revision}", id.target()),
            "some weight headers were not fetched",
        ));
    }
    fetched.requests = hub.requests();
    fetched.bytes = hub.bytes();
    Ok(fetched)
}

/// "No config.json", pointing at GGUF files when the repo holds them.
fn no_config(id: &HubId, commit: &str, files: &[String]) -> Error {
    let label = format!("{}@{}", id.repo(), super::hub::short(commit));
    if let Some(g) = files
        .iter()
        .find(|f| f.to_ascii_lowercase().ends_with(".gguf"))
    {
        return Error::refused(
            label,
            format!(
                "has no config.json; it holds GGUF files: name one, as {}/{g}",
                id.repo()
            ),
        );
    }
    match no_weights(id, commit, files) {
        Error::Refused { message, .. } if !files.iter().any(|f| f.ends_with(".safetensors")) => {
            Error::refused(label, format!("has no config.json and {message}"))
        }
        _ => Error::refused(
            label,
            "has no config.json: nnlint reads Hugging Face checkpoints (config.json and safetensors weights) and GGUF files",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_endpoint_and_the_token_are_read_as_huggingface_hub_reads_them() {
        assert_eq!(endpoint(&env(&[])), DEFAULT_ENDPOINT);
        assert_eq!(
            endpoint(&env(&[("HF_ENDPOINT", "http://m.example/hf//")])),
            "http://m.example/hf"
        );
        assert_eq!(token(&env(&[("HF_TOKEN", " t1\n")])).as_deref(), Some("t1"));
        assert_eq!(
            token(&env(&[("HUGGING_FACE_HUB_TOKEN", "t2")])).as_deref(),
            Some("t2")
        );
        assert_eq!(
            token(&env(&[
                ("HF_TOKEN", "t1"),
                ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
            ])),
            None
        );
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("token"), "from-file\n").unwrap();
        let home = t.path().to_string_lossy().into_owned();
        let var = move |k: &str| (k == "HF_HOME").then(|| OsString::from(&home));
        assert_eq!(token(&var).as_deref(), Some("from-file"));
    }

    #[test]
    fn revisions_and_files_are_percent_encoded_and_redirects_joined() {
        assert_eq!(encode("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(encode("sub dir/a+b.gguf", true), "sub%20dir/a%2Bb.gguf");
        let base = "http://h:1/hf/o/n/resolve/x/config.json";
        assert_eq!(
            join(base, "/api/resolve-cache/a").unwrap(),
            "http://h:1/api/resolve-cache/a"
        );
        assert_eq!(join(base, "https://cdn/x").unwrap(), "https://cdn/x");
        assert_eq!(join(base, "//cdn/x").unwrap(), "http://cdn/x");
        assert_eq!(
            join(base, "y.json").unwrap(),
            "http://h:1/hf/o/n/resolve/x/y.json"
        );
        assert_eq!(
            origin_of("HTTPS://Hub.example/x"),
            Some(("https".into(), "hub.example".into(), 443))
        );
        assert_ne!(
            origin_of("http://127.0.0.1:1/"),
            origin_of("http://127.0.0.1:2/")
        );
        assert_eq!(content_range("bytes 0-99/1000"), Some((0, 99, 1000)));
        assert_eq!(content_range("bytes 0-99/*"), None);
    }

    #[test]
    fn the_tree_apis_next_page_is_read_off_its_link_header() {
        let hub = "https://huggingface.co/api/models/o/n/tree/main?recursive=true&cursor=abc";
        assert_eq!(next_link(&format!("<{hub}>; rel=\"next\"")), Some(hub));
        assert_eq!(
            next_link("</p?c=1>; rel=\"prev\", </p?c=3>; rel=next"),
            Some("/p?c=3")
        );
        assert_eq!(next_link("</p?c=1>; rel=\"prev last\""), None);
        assert_eq!(
            next_link("</p?c=2>; title=\"x\"; rel=\"last next\""),
            Some("/p?c=2")
        );
        for bad in ["", "<", "<a", "next", "<a>", "<a>; rel", "; rel=next"] {
            assert_eq!(next_link(bad), None, "{bad}");
        }
    }
}
