//! Hugging Face Hub IDs (`org/name`, `org/name@revision`, `org/name/file.gguf`) read from the local
//! Hugging Face cache, laid out as huggingface_hub lays it out (`constants.py`,
//! `file_download.py`): the cache root from `HF_HUB_CACHE`, `HF_HOME` or `XDG_CACHE_HOME`; per repo
//! `models--{org}--{name}/` with `refs/{revision}` (a file holding the commit sha),
//! `snapshots/{sha}/` (relative links) and `blobs/` (the content). A snapshot that holds what the
//! checkpoint needs is read as a local folder; nothing here touches the network (`hub_net` does,
//! and `hub_store` keeps what it fetched).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The revision an ID without `@revision` names, as huggingface_hub's.
pub const DEFAULT_REVISION: &str = "main";

/// Longest repo name (and namespace) huggingface_hub's `validate_repo_id` accepts.
const MAX_PART: usize = 96;

/// Longest revision accepted: a git ref is a path, and this one becomes a path in the cache.
const MAX_REVISION: usize = 255;

/// A model on the Hub: its repo, optionally one GGUF file of it, optionally a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubId {
    pub org: String,
    pub name: String,
    /// One file of the repo (`org/name/sub/file.gguf` names `sub/file.gguf`).
    pub file: Option<String>,
    /// `@revision`: a branch, a tag or a commit sha.
    pub revision: Option<String>,
}

impl HubId {
    /// Parses `org/name[/path/file.gguf][@revision]`. The revision comes last, after the first
    /// `@` (repo names and GGUF file names have none), so that one with slashes (`refs/pr/1`)
    /// reads as written. The repo is checked with huggingface_hub's `validate_repo_id` rules,
    /// the revision and the file so that neither can leave the repo's folder in the cache.
    pub fn parse(s: &str) -> std::result::Result<HubId, String> {
        let (target, revision) = match s.split_once('@') {
            Some((t, r)) => (t, Some(r)),
            None => (s, None),
        };
        if let Some(r) = revision {
            validate_revision(r)?;
        }
        let parts: Vec<&str> = target.split('/').collect();
        let (org, name, file) = match parts.as_slice() {
            [org, name] => (*org, *name, None),
            [org, name, rest @ ..] => {
                let file = rest.join("/");
                validate_file(&file)?;
                (*org, *name, Some(file))
            }
            _ => return Err("a Hub ID is org/name (an organisation or user, and a repo)".into()),
        };
        validate_part(org, "organisation")?;
        validate_part(name, "repo name")?;
        if name.ends_with(".git") {
            return Err(format!("a repo name cannot end in '.git' ('{name}')"));
        }
        Ok(HubId {
            org: org.to_string(),
            name: name.to_string(),
            file,
            revision: revision.map(str::to_string),
        })
    }

    /// `org/name`.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.org, self.name)
    }

    /// `org/name`, or `org/name/file.gguf`: the ID without its revision.
    pub fn target(&self) -> String {
        match &self.file {
            Some(f) => format!("{}/{f}", self.repo()),
            None => self.repo(),
        }
    }

    /// The repo's folder in the cache, as huggingface_hub's `repo_folder_name` names it.
    pub fn folder(&self) -> String {
        format!("models--{}--{}", self.org, self.name)
    }
}

/// One part of a repo ID, as huggingface_hub's `REPO_ID_REGEX` and `validate_repo_id` accept it:
/// 1 to 96 of `[A-Za-z0-9._-]`, starting and ending with a letter, digit or `_`, without `--` or
/// `..` (`--` separates the parts of the cache's folder name).
fn validate_part(part: &str, what: &str) -> std::result::Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if part.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    if part.len() > MAX_PART {
        return Err(format!(
            "the {what} is {} characters long, more than the Hub's {MAX_PART}",
            part.len()
        ));
    }
    if let Some(c) = part.chars().find(|&c| !(word(c) || c == '-' || c == '.')) {
        return Err(format!(
            "the {what} '{}' holds {c:?}: a Hub ID uses letters, digits, '-', '_' and '.'",
            part.escape_debug()
        ));
    }
    if !part.starts_with(word) || !part.ends_with(word) {
        return Err(format!(
            "the {what} '{part}' starts or ends with '-' or '.', which the Hub does not allow"
        ));
    }
    if part.contains("--") || part.contains("..") {
        return Err(format!(
            "the {what} '{part}' holds '--' or '..', which the Hub does not allow"
        ));
    }
    Ok(())
}

/// Whether a revision is a commit sha as huggingface_hub recognises one (`REGEX_COMMIT_HASH`:
/// 40 lowercase hex digits), read as `snapshots/{sha}` without a ref.
pub fn is_commit(revision: &str) -> bool {
    revision.len() == 40
        && revision
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A revision is a git ref or a commit sha, and becomes `refs/{revision}` in the cache: its parts
/// are names (no empty part, no `.` or `..`, none starting with `.`), with none of the characters
/// git refuses in a ref.
pub fn validate_revision(rev: &str) -> std::result::Result<(), String> {
    if rev.is_empty() {
        return Err("the revision after '@' is empty: give a branch, a tag or a commit".into());
    }
    if rev.len() > MAX_REVISION {
        return Err(format!(
            "the revision is {} characters long, more than {MAX_REVISION}",
            rev.len()
        ));
    }
    if let Some(c) = rev.chars().find(|&c| {
        c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\' | '@')
    }) {
        return Err(format!(
            "the revision '{}' holds {c:?}, which a git ref cannot",
            rev.escape_debug()
        ));
    }
    if rev.split('/').any(|p| p.is_empty() || p.starts_with('.')) {
        return Err(format!(
            "the revision '{rev}' has an empty part or one starting with '.' (such as '..')"
        ));
    }
    Ok(())
}

/// A GGUF file of a repo: a relative path of names, ending in `.gguf`.
fn validate_file(file: &str) -> std::result::Result<(), String> {
    if !file.to_ascii_lowercase().ends_with(".gguf") {
        return Err(format!(
            "a Hub ID is org/name, or org/name/FILE.gguf for one GGUF file of a repo ('{}' is not a .gguf file)",
            file.escape_debug()
        ));
    }
    if let Some(c) = file.chars().find(|&c| c.is_control() || c == '\\') {
        return Err(format!("the file '{}' holds {c:?}", file.escape_debug()));
    }
    if file
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(format!(
            "the file '{file}' has an empty, '.' or '..' part: it must be a path inside the repo"
        ));
    }
    Ok(())
}

/// The cache root and the setting it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    pub dir: PathBuf,
    /// `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `HF_HOME`, `XDG_CACHE_HOME` or `HOME`.
    pub from: &'static str,
}

/// Where huggingface_hub keeps its cache (`constants.py`): `HF_HUB_CACHE`, else the legacy
/// `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
/// `~/.cache/huggingface/hub`. A leading `~` is the home folder, as Python's `expanduser` reads
/// it; an empty variable counts as unset. `var` reads the environment (a map in tests). `None`
/// when no variable is set and there is no `HOME`.
pub fn cache(var: &dyn Fn(&str) -> Option<OsString>) -> Option<Cache> {
    let get = |k: &str| var(k).filter(|v| !v.is_empty());
    let home = get("HOME").map(PathBuf::from);
    let expand = |v: OsString| -> PathBuf {
        let p = PathBuf::from(&v);
        match (p.strip_prefix("~"), &home) {
            (Ok(rest), Some(h)) => h.join(rest),
            _ => p,
        }
    };
    for (key, tail) in [
        ("HF_HUB_CACHE", &[][..]),
        ("HUGGINGFACE_HUB_CACHE", &[][..]),
        ("HF_HOME", &["hub"][..]),
        ("XDG_CACHE_HOME", &["huggingface", "hub"][..]),
    ] {
        if let Some(v) = get(key) {
            let mut dir = expand(v);
            dir.extend(tail);
            return Some(Cache { dir, from: key });
        }
    }
    home.map(|h| Cache {
        dir: h.join(".cache").join("huggingface").join("hub"),
        from: "HOME",
    })
}

/// [`cache`] from the process's environment.
pub fn cache_from_env() -> Option<Cache> {
    cache(&|k| std::env::var_os(k))
}

/// Whether the environment asks for no network, as huggingface_hub reads it: `HF_HUB_OFFLINE`
/// (or transformers' `TRANSFORMERS_OFFLINE`) set to 1, ON, YES or TRUE, in any case.
pub fn offline(var: &dyn Fn(&str) -> Option<OsString>) -> bool {
    let v = var("HF_HUB_OFFLINE")
        .filter(|v| !v.is_empty())
        .or_else(|| var("TRANSFORMERS_OFFLINE"));
    v.is_some_and(|v| {
        matches!(
            v.to_string_lossy().to_ascii_uppercase().as_str(),
            "1" | "ON" | "YES" | "TRUE"
        )
    })
}

/// A snapshot in the cache that holds what the ID needs: read as a local folder (or file).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub id: HubId,
    /// The revision asked for (`main` by default).
    pub revision: String,
    /// The commit it names: the snapshot's folder name.
    pub commit: String,
    pub cache: Cache,
    /// `{cache}/models--{org}--{name}`: a snapshot's links may lead anywhere inside it.
    pub repo_dir: PathBuf,
    /// `{repo_dir}/snapshots/{commit}`.
    pub dir: PathBuf,
    /// What the loaders read: `dir` for a checkpoint, `dir/{file}` for a GGUF file.
    pub path: PathBuf,
    /// Which cache holds it, and what fetching it cost.
    pub origin: Origin,
    /// The real sizes of the header-only weight files in nnlint's cache (`hub_store`); `None` in
    /// the Hugging Face cache, whose files are whole.
    pub declared: Option<super::safetensors::Declared>,
}

/// Where a snapshot was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The Hugging Face cache: whole files, no request made.
    HfCache,
    /// nnlint's own cache of headers, filled by an earlier run: no request made.
    Stored,
    /// Fetched from the Hub by this run (and kept in nnlint's cache).
    Fetched {
        endpoint: String,
        requests: u64,
        bytes: u64,
    },
}

impl Snapshot {
    /// The model's name in reports: `org/name@main (snapshot 0123abcd)`, or `org/name@{sha}`
    /// when the revision is the commit.
    pub fn display(&self) -> String {
        if self.revision == self.commit {
            format!("{}@{}", self.id.target(), self.commit)
        } else {
            format!(
                "{}@{} (snapshot {})",
                self.id.target(),
                self.revision,
                short(&self.commit)
            )
        }
    }
}

pub(crate) fn short(commit: &str) -> &str {
    &commit[..commit.len().min(8)]
}

/// What a lookup in the cache found.
#[derive(Debug)]
pub enum Lookup {
    Found(Box<Snapshot>),
    Missing(Missing),
}

/// Why an ID cannot be read from the cache: what a download would have to bring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No `models--{org}--{name}` folder; `similar` is the closest cached repo, if one is close.
    Repo { similar: Option<String> },
    /// No `refs/{revision}`; `known` lists the refs the cache has.
    Revision { known: Vec<String> },
    /// The commit has no `snapshots/{commit}` folder.
    Snapshot { commit: String },
    /// The snapshot lacks files the checkpoint needs (relative to the snapshot); `gguf` is a
    /// GGUF file it holds when the ID names none (a repo of GGUF files has no `config.json`).
    Files {
        commit: String,
        missing: Vec<String>,
        gguf: Option<String>,
    },
}

impl Missing {
    /// Whether the message points at what was most likely meant (a cached repo of a close name,
    /// a GGUF file of the repo), which a download would not change.
    pub fn points_elsewhere(&self) -> bool {
        matches!(
            self,
            Missing::Repo { similar: Some(_) } | Missing::Files { gguf: Some(_), .. }
        )
    }

    /// One line saying what is missing and where nnlint looked, after `{id}@{revision}: `.
    pub fn describe(&self, id: &HubId, revision: &str, cache: &Cache) -> String {
        let root = format!(
            "{}{}",
            cache.dir.display(),
            match cache.from {
                "HOME" => String::new(),
                from => format!(", from {from}"),
            }
        );
        match self {
            Missing::Repo { similar } => format!(
                "not in the Hugging Face cache ({root}){}",
                similar
                    .as_ref()
                    .map(|s| format!(": did you mean '{s}'?"))
                    .unwrap_or_default()
            ),
            Missing::Revision { known } => format!(
                "the Hugging Face cache ({root}) has {} but no revision '{revision}' (no refs/{revision}{})",
                id.repo(),
                if known.is_empty() {
                    String::new()
                } else {
                    format!("; it has {}", known.join(", "))
                }
            ),
            Missing::Snapshot { commit } if commit == revision => format!(
                "the Hugging Face cache ({root}) has no snapshot {commit} of {}",
                id.repo()
            ),
            Missing::Snapshot { commit } => format!(
                "refs/{revision} names commit {commit}, whose snapshot is not in the Hugging Face cache ({root})"
            ),
            Missing::Files {
                commit,
                missing,
                gguf,
            } => {
                let shown: Vec<&str> = missing.iter().take(3).map(String::as_str).collect();
                format!(
                    "snapshot {} in the Hugging Face cache ({root}) lacks {}{}{}",
                    short(commit),
                    shown.join(", "),
                    match missing.len() - shown.len() {
                        0 => String::new(),
                        n => format!(" and {n} more files"),
                    },
                    gguf.as_ref()
                        .map(|g| format!(
                            "; it holds GGUF files: name one, as {}/{g}",
                            id.repo()
                        ))
                        .unwrap_or_default()
                )
            }
        }
    }
}

/// Finds `id` at `revision` in the cache: `refs/{revision}` names the commit (a 40-hex revision
/// is the commit itself), `snapshots/{commit}` must hold what the loaders read (a checkpoint's
/// `config.json` and every weight file, or the GGUF file), and every file there that nnlint
/// reads must resolve inside the repo's folder. A missing piece is a [`Missing`]; a hostile or
/// broken layout (a ref that is not a sha, a link out of the repo) is an error.
pub fn find(id: &HubId, revision: &str, cache: &Cache) -> Result<Lookup> {
    validate_revision(revision).map_err(Error::Usage)?;
    let repo_dir = cache.dir.join(id.folder());
    if !repo_dir.is_dir() {
        return Ok(Lookup::Missing(Missing::Repo {
            similar: similar_repo(&cache.dir, id),
        }));
    }
    let commit = if is_commit(revision) {
        revision.to_string()
    } else {
        match read_ref(&repo_dir.join("refs").join(revision))? {
            Some(c) => c,
            None => {
                return Ok(Lookup::Missing(Missing::Revision {
                    known: refs(&repo_dir.join("refs")),
                }))
            }
        }
    };
    let dir = repo_dir.join("snapshots").join(&commit);
    if !dir.is_dir() {
        return Ok(Lookup::Missing(Missing::Snapshot { commit }));
    }
    let (path, needed) = match &id.file {
        Some(f) => (dir.join(f), vec![f.clone()]),
        None => (dir.clone(), needed(&dir)?),
    };
    let missing: Vec<String> = needed
        .iter()
        .filter(|n| !dir.join(n).is_file())
        .cloned()
        .collect();
    if !missing.is_empty() {
        let gguf = match id.file {
            Some(_) => None,
            None => first_gguf(&dir),
        };
        return Ok(Lookup::Missing(Missing::Files {
            commit,
            missing,
            gguf,
        }));
    }
    let root = repo_dir
        .canonicalize()
        .map_err(|e| Error::io(&repo_dir, e))?;
    // what the loaders read: the needed files, and the folder's other files (a generation or
    // preprocessor config, a projector beside a GGUF file)
    let folder = path.parent().filter(|_| id.file.is_some()).unwrap_or(&dir);
    let mut read: Vec<PathBuf> = needed.iter().map(|n| dir.join(n)).collect();
    read.extend(
        std::fs::read_dir(folder)
            .map_err(|e| Error::io(folder, e))?
            .filter_map(|e| e.ok().map(|e| e.path())),
    );
    for file in read {
        match file.canonicalize() {
            Ok(c) if !c.starts_with(&root) => {
                return Err(Error::refused(
                    &file,
                    format!(
                        "resolves outside its repo's folder in the Hugging Face cache ({}) through a link: a snapshot's files link into the repo's blobs/",
                        root.display()
                    ),
                ))
            }
            // a broken link nnlint does not need is not read
            _ => {}
        }
    }
    Ok(Lookup::Found(Box::new(Snapshot {
        id: id.clone(),
        revision: revision.to_string(),
        commit,
        cache: cache.clone(),
        repo_dir,
        dir,
        path,
        origin: Origin::HfCache,
        declared: None,
    })))
}

/// The files a checkpoint folder needs, as `hf::load` reads it: `config.json` and the weights
/// (the sharded index and every shard it names, or `model.safetensors`; a folder with other
/// safetensors files or a pickle is left to the loader, which says what it makes of it).
fn needed(dir: &Path) -> Result<Vec<String>> {
    if super::pipeline::detect(dir).is_some() {
        return super::pipeline::needed(dir);
    }
    let mut needed = vec!["config.json".to_string()];
    let present = |n: &str| dir.join(n).symlink_metadata().is_ok();
    let index = "model.safetensors.index.json";
    let index = if present(index) {
        Some(index.to_string())
    } else if present("model.safetensors") {
        needed.push("model.safetensors".into());
        None
    } else {
        let names: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let indexes: Vec<&String> = names
            .iter()
            .filter(|n| n.ends_with(".safetensors.index.json"))
            .collect();
        let weights = |n: &String| {
            n.ends_with(".safetensors") || (n.starts_with("pytorch_model") && n.ends_with(".bin"))
        };
        match indexes.as_slice() {
            [one] => Some((*one).clone()),
            [] if !names.iter().any(weights) => {
                needed.push(
                    "model.safetensors (or model.safetensors.index.json and its shards)".into(),
                );
                None
            }
            _ => None,
        }
    };
    if let Some(index) = index {
        needed.push(index.clone());
        let path = dir.join(&index);
        if path.is_file() {
            // names that would leave the folder are the loader's to refuse
            needed.extend(
                super::safetensors::shard_names(&path)?
                    .into_iter()
                    .filter(|n| {
                        Path::new(n)
                            .components()
                            .all(|c| matches!(c, Component::Normal(_)))
                    }),
            );
        }
    }
    Ok(needed)
}

/// The first GGUF file (by name) at the top of a snapshot.
fn first_gguf(dir: &Path) -> Option<String> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .min()
}

/// The commit a ref file holds, `None` when there is no such ref. Read as huggingface_hub writes
/// it (the sha, no newline; surrounding whitespace is forgiven), and at most a few bytes of it:
/// a ref that is not a sha is an error, never a path.
pub(crate) fn read_ref(path: &Path) -> Result<Option<String>> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        _ => return Ok(None),
    }
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(128).read_to_end(&mut text))
        .map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8_lossy(&text);
    let sha = text.trim();
    if !is_commit(sha) {
        return Err(Error::malformed(
            path,
            format!(
                "holds '{}', not a commit sha (40 lowercase hex digits)",
                sha.chars().take(48).collect::<String>().escape_debug()
            ),
        ));
    }
    Ok(Some(sha.to_string()))
}

/// The refs a repo's cache holds (`main`, `refs/pr/1`), sorted, at most 8.
fn refs(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>, depth: usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => {
                    walk(&e.path(), &format!("{name}/"), out, depth + 1)
                }
                Ok(t) if t.is_file() => out.push(name),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out, 0);
    out.sort();
    out.truncate(8);
    out
}

/// The cached repo whose ID is closest to `id` (the same ignoring case first), for "did you
/// mean".
fn similar_repo(cache: &Path, id: &HubId) -> Option<String> {
    let repos: Vec<String> = std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let (org, name) = n.strip_prefix("models--")?.split_once("--")?;
            Some(format!("{org}/{name}"))
        })
        .collect();
    let want = id.repo();
    if let Some(same) = repos.iter().find(|r| r.eq_ignore_ascii_case(&want)) {
        return Some(same.clone());
    }
    let known: Vec<&str> = repos.iter().map(String::as_str).collect();
    crate::util::suggest::closest(&want, &known).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn id(s: &str) -> HubId {
        HubId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn refused(s: &str) -> String {
        match HubId::parse(s) {
            Ok(i) => panic!("{s} parsed as {i:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn ids_with_revisions_and_files_parse() {
        let q = id("Qwen/Qwen3-32B");
        assert_eq!((q.org.as_str(), q.name.as_str()), ("Qwen", "Qwen3-32B"));
        assert_eq!((&q.file, &q.revision), (&None, &None));
        assert_eq!(q.folder(), "models--Qwen--Qwen3-32B");
        assert_eq!(id("a/b@v1.0").revision.as_deref(), Some("v1.0"));
        // a revision with slashes reads as written: the first '@' splits
        assert_eq!(id("a/b@refs/pr/1").revision.as_deref(), Some("refs/pr/1"));
        let g = id("unsloth/Qwen3-8B-GGUF/Q4_K_M/Qwen3-8B-Q4_K_M.gguf@main");
        assert_eq!(g.file.as_deref(), Some("Q4_K_M/Qwen3-8B-Q4_K_M.gguf"));
        assert_eq!(
            g.target(),
            "unsloth/Qwen3-8B-GGUF/Q4_K_M/Qwen3-8B-Q4_K_M.gguf"
        );
        assert_eq!(g.revision.as_deref(), Some("main"));
        // huggingface_hub's valid examples
        for ok in [
            "foo/bar",
            "123/456",
            "Foo-BAR_foo/Foo-BAR_foo.bar123",
            "_a/_b_",
        ] {
            id(ok);
        }
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert!(is_commit(sha));
        assert!(!is_commit(&sha.to_uppercase()) && !is_commit(&sha[1..]));
    }

    #[test]
    fn hostile_and_malformed_ids_are_refused() {
        let long = "a".repeat(97);
        for (bad, why) in [
            ("gpt2", "org/name"),
            ("a/b/c", "not a .gguf"),
            ("a/b/c.onnx", "not a .gguf"),
            ("/b", "empty"),
            ("a/", "empty"),
            ("a//b.gguf", "empty"),
            ("a/b@", "empty"),
            ("../b", "starts or ends"),
            ("a/..", "starts or ends"),
            ("a/.b", "starts or ends"),
            ("a/b-", "starts or ends"),
            ("a--x/b", "'--'"),
            ("a/b..c", "'..'"),
            ("a/b.git", ".git"),
            ("a/b c", "holds ' '"),
            ("a/b\\c", "holds '\\\\'"),
            ("a/bé", "holds 'é'"),
            ("a/b\0", "holds"),
            (&format!("a/{long}"), "97 characters"),
            ("a/b/../../x.gguf", "'..' part"),
            ("a/b/./x.gguf", "'.' or '..' part"),
            ("a/b/x\n.gguf", "holds"),
            ("a/b@..", "starting with '.'"),
            ("a/b@../../etc", "starting with '.'"),
            ("a/b@refs/../x", "starting with '.'"),
            ("a/b@/abs", "empty part"),
            ("a/b@main/", "empty part"),
            ("a/b@x//y", "empty part"),
            ("a/b@a b", "holds ' '"),
            ("a/b@x\\y", "holds"),
            ("a/b@x:y", "holds ':'"),
            ("a/b@x@y", "holds '@'"),
            ("a/b@x\u{7}", "holds"),
        ] {
            let e = refused(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(refused(&format!("a/b@{}", "x".repeat(256))).contains("256 characters"));
        // 96 is the limit, not past it
        id(&format!("a/{}", "a".repeat(96)));
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn the_cache_root_follows_huggingface_hubs_order() {
        let all = [
            ("HF_HUB_CACHE", "/hc"),
            ("HUGGINGFACE_HUB_CACHE", "/legacy"),
            ("HF_HOME", "/hh"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        let root = |n: usize| {
            let c = cache(&env(&all[n..])).unwrap();
            (c.dir.display().to_string(), c.from)
        };
        assert_eq!(root(0), ("/hc".into(), "HF_HUB_CACHE"));
        assert_eq!(root(1), ("/legacy".into(), "HUGGINGFACE_HUB_CACHE"));
        assert_eq!(root(2), ("/hh/hub".into(), "HF_HOME"));
        assert_eq!(root(3), ("/xdg/huggingface/hub".into(), "XDG_CACHE_HOME"));
        assert_eq!(root(4), ("/home/u/.cache/huggingface/hub".into(), "HOME"));
        assert_eq!(cache(&env(&[])), None);
        // empty is unset; '~' is the home folder
        let c = cache(&env(&[
            ("HF_HUB_CACHE", ""),
            ("HF_HOME", "~/hf"),
            ("HOME", "/h"),
        ]))
        .unwrap();
        assert_eq!(c.dir, PathBuf::from("/h/hf/hub"));
    }

    #[test]
    fn offline_is_read_as_huggingface_hub_reads_it() {
        for v in ["1", "ON", "yes", "True"] {
            assert!(offline(&env(&[("HF_HUB_OFFLINE", v)])), "{v}");
        }
        for v in ["0", "", "no", "off"] {
            assert!(!offline(&env(&[("HF_HUB_OFFLINE", v)])), "{v}");
        }
        assert!(offline(&env(&[("TRANSFORMERS_OFFLINE", "1")])));
        assert!(!offline(&env(&[])));
    }

    /// A repo folder with refs and snapshot files (contents, not links: `find` reads names).
    fn repo(root: &Path, files: &[&str]) -> (Cache, String) {
        let sha = "aa".repeat(20);
        let repo = root.join("models--o--n");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), &sha).unwrap();
        let snap = repo.join("snapshots").join(&sha);
        std::fs::create_dir_all(&snap).unwrap();
        for f in files {
            let p = snap.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "{}").unwrap();
        }
        (
            Cache {
                dir: root.to_path_buf(),
                from: "HF_HUB_CACHE",
            },
            sha,
        )
    }

    fn missing(l: Lookup) -> Missing {
        match l {
            Lookup::Missing(m) => m,
            Lookup::Found(s) => panic!("found {}", s.dir.display()),
        }
    }

    #[test]
    fn a_lookup_says_what_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let (c, sha) = repo(t.path(), &["config.json"]);
        let m = |s: &str, rev: &str| missing(find(&id(s), rev, &c).unwrap());
        assert_eq!(
            m("o/N", "main"),
            Missing::Repo {
                similar: Some("o/n".into())
            }
        );
        assert_eq!(m("x/y", "main"), Missing::Repo { similar: None });
        assert_eq!(
            m("o/n", "v2"),
            Missing::Revision {
                known: vec!["main".into()]
            }
        );
        let other = "bb".repeat(20);
        assert_eq!(
            m("o/n", &other),
            Missing::Snapshot {
                commit: other.clone()
            }
        );
        let Missing::Files { missing, .. } = m("o/n", "main") else {
            panic!()
        };
        assert_eq!(
            missing[0],
            "model.safetensors (or model.safetensors.index.json and its shards)"
        );
        assert!(m("o/n/x.gguf", "main")
            .describe(&id("o/n"), "main", &c)
            .contains(&format!(
                "snapshot {} in the Hugging Face cache ({}, from HF_HUB_CACHE) lacks x.gguf",
                &sha[..8],
                t.path().display()
            )));
        // an index names its shards; the first missing ones are named
        let idx = r#"{"weight_map": {"a": "s-1.safetensors", "b": "s-2.safetensors", "c": "../up.safetensors"}}"#;
        std::fs::write(
            c.dir.join(format!(
                "models--o--n/snapshots/{sha}/model.safetensors.index.json"
            )),
            idx,
        )
        .unwrap();
        std::fs::write(
            c.dir
                .join(format!("models--o--n/snapshots/{sha}/s-1.safetensors")),
            "",
        )
        .unwrap();
        assert_eq!(
            m("o/n", "main"),
            Missing::Files {
                commit: sha.clone(),
                missing: vec!["s-2.safetensors".into()],
                gguf: None,
            }
        );
    }

    #[test]
    fn a_ref_that_is_not_a_sha_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let (c, _) = repo(t.path(), &["config.json", "model.safetensors"]);
        std::fs::write(t.path().join("models--o--n/refs/main"), "../../../etc").unwrap();
        let e = find(&id("o/n"), "main", &c).unwrap_err().to_string();
        assert!(e.contains("not a commit sha"), "{e}");
        // a ref's sha with a trailing newline is forgiven
        let sha = "aa".repeat(20);
        std::fs::write(t.path().join("models--o--n/refs/main"), format!("{sha}\n")).unwrap();
        assert!(matches!(
            find(&id("o/n"), "main", &c).unwrap(),
            Lookup::Found(_)
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_link_out_of_the_repo_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (c, sha) = repo(t.path(), &["config.json"]);
        let outside = t.path().join("elsewhere.safetensors");
        std::fs::write(&outside, "").unwrap();
        let snap = t.path().join(format!("models--o--n/snapshots/{sha}"));
        std::os::unix::fs::symlink(&outside, snap.join("model.safetensors")).unwrap();
        let e = find(&id("o/n"), "main", &c).unwrap_err().to_string();
        assert!(e.contains("resolves outside its repo's folder"), "{e}");
        // a link into the repo's blobs is what the cache holds
        let blobs = t.path().join("models--o--n/blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::write(blobs.join("b1"), "").unwrap();
        std::fs::remove_file(snap.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink("../../blobs/b1", snap.join("model.safetensors")).unwrap();
        assert!(matches!(
            find(&id("o/n"), "main", &c).unwrap(),
            Lookup::Found(_)
        ));
    }
}
