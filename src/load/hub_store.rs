//! nnlint's own cache of what it fetched from the Hub (`hub_net`): per repo and commit, the
//! small files whole (`config.json`, `generation_config.json`, `preprocessor_config.json`, the
//! sharded index) and each weight file's header only (a safetensors file's `8 + n` first bytes, a
//! GGUF file's bytes up to its tensor data), with a manifest recording every weight file's real
//! size. The loaders read a header-only file against the size the manifest declares
//! (`safetensors::Declared`), never against its own length, and no file pretends to be whole.
//!
//! ```text
//! $NNLINT_CACHE/hub/models--{org}--{name}/
//!   refs/{revision}                  the commit a branch or tag named when it was fetched
//!   {sha}/config.json ...            whole
//!   {sha}/model-00001-of-00030.safetensors   header only
//!   {sha}/.nnlint-manifest.json      real sizes; written last: a commit without it is incomplete
//! ```
//!
//! Every file is written atomically (`util::fs`), the manifest after the files it describes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::hub::{self, HubId, Origin, Snapshot};
use crate::error::{Error, Result};

/// The manifest's name inside a commit's folder.
pub const MANIFEST: &str = ".nnlint-manifest.json";

/// Version of the manifest's layout: a different one is ignored (and refetched).
const VERSION: u32 = 1;

/// nnlint's cache root and the setting it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    pub dir: PathBuf,
    /// `NNLINT_CACHE`, `XDG_CACHE_HOME` or `HOME`.
    pub from: &'static str,
}

/// Where nnlint keeps its cache: `$NNLINT_CACHE`, else `$XDG_CACHE_HOME/nnlint`, else
/// `~/.cache/nnlint`; an empty variable counts as unset. `None` without any of them.
pub fn store(var: &dyn Fn(&str) -> Option<OsString>) -> Option<Store> {
    let get = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = get("NNLINT_CACHE") {
        return Some(Store {
            dir: d,
            from: "NNLINT_CACHE",
        });
    }
    if let Some(d) = get("XDG_CACHE_HOME") {
        return Some(Store {
            dir: d.join("nnlint"),
            from: "XDG_CACHE_HOME",
        });
    }
    get("HOME").map(|h| Store {
        dir: h.join(".cache").join("nnlint"),
        from: "HOME",
    })
}

/// One weight file in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// The whole file's size on the Hub.
    pub size: u64,
    /// The bytes kept (the header).
    pub stored: u64,
}

/// A commit's manifest.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub repo: String,
    pub commit: String,
    /// The endpoint it was fetched from.
    pub endpoint: String,
    /// Whether the checkpoint (config and every weight file) is here.
    #[serde(default)]
    pub checkpoint: bool,
    /// Header-only weight files, relative to the commit's folder.
    pub weights: BTreeMap<String, Entry>,
    /// Small files kept whole.
    #[serde(default)]
    pub whole: Vec<String>,
}

/// What one fetch brought: the files to keep, relative to the commit's folder.
#[derive(Debug, Default)]
pub struct Fetched {
    pub commit: String,
    pub endpoint: String,
    /// Small files, whole.
    pub whole: Vec<(String, Vec<u8>)>,
    /// Weight files: their header bytes and real size.
    pub headers: Vec<(String, Vec<u8>, u64)>,
    pub requests: u64,
    pub bytes: u64,
    /// The first Range window per shard (`hub_net`'s estimate from the index); not kept.
    pub windows: std::collections::HashMap<String, u64>,
}

impl Store {
    /// `{root}/hub/models--{org}--{name}`.
    pub fn repo_dir(&self, id: &HubId) -> PathBuf {
        self.dir.join("hub").join(id.folder())
    }

    /// The root as messages name it (`/x/nnlint, from XDG_CACHE_HOME`).
    pub fn describe(&self) -> String {
        match self.from {
            "HOME" => self.dir.display().to_string(),
            from => format!("{}, from {from}", self.dir.display()),
        }
    }

    /// The commit a revision names here: itself for a sha, else `refs/{revision}` as last fetched.
    pub fn commit(&self, id: &HubId, revision: &str) -> Result<Option<String>> {
        if hub::is_commit(revision) {
            return Ok(Some(revision.to_string()));
        }
        hub::validate_revision(revision).map_err(Error::Usage)?;
        hub::read_ref(&self.repo_dir(id).join("refs").join(revision))
    }

    /// The snapshot of `id` at `revision` when this cache holds all it needs (the checkpoint, or
    /// the GGUF file), each header-only file at least as long as the manifest says; `None`
    /// otherwise (nothing cached, an older layout, a file gone).
    pub fn find(&self, id: &HubId, revision: &str) -> Result<Option<Snapshot>> {
        let Some(commit) = self.commit(id, revision)? else {
            return Ok(None);
        };
        let dir = self.repo_dir(id).join(&commit);
        let Some(m) = read_manifest(&dir) else {
            return Ok(None);
        };
        let complete = match &id.file {
            Some(f) => m.weights.contains_key(f),
            None => m.checkpoint,
        };
        let present = m.weights.iter().all(|(name, e)| {
            std::fs::metadata(dir.join(name)).is_ok_and(|md| md.is_file() && md.len() >= e.stored)
        }) && m.whole.iter().all(|n| dir.join(n).is_file());
        if !complete || !present {
            return Ok(None);
        }
        Ok(Some(self.snapshot(
            id,
            revision,
            commit,
            &m,
            Origin::Stored,
        )))
    }

    fn snapshot(
        &self,
        id: &HubId,
        revision: &str,
        commit: String,
        m: &Manifest,
        origin: Origin,
    ) -> Snapshot {
        let repo_dir = self.repo_dir(id);
        let dir = repo_dir.join(&commit);
        let path = match &id.file {
            Some(f) => dir.join(f),
            None => dir.clone(),
        };
        let declared = m
            .weights
            .iter()
            .map(|(n, e)| (dir.join(n), e.size))
            .collect();
        Snapshot {
            id: id.clone(),
            revision: revision.to_string(),
            commit,
            cache: hub::Cache {
                dir: self.dir.clone(),
                from: self.from,
            },
            repo_dir,
            dir,
            path,
            origin,
            declared: Some(declared),
        }
    }

    /// Keeps what a fetch brought: the files first, each atomically, then the manifest (merged
    /// with an earlier one of the same commit, which may list other GGUF files), then the ref.
    pub fn write(&self, id: &HubId, revision: &str, f: &Fetched) -> Result<Snapshot> {
        if !hub::is_commit(&f.commit) {
            return Err(Error::malformed(
                self.repo_dir(id),
                format!(
                    "the Hub named commit '{}', not a sha",
                    f.commit.escape_debug()
                ),
            ));
        }
        let dir = self.repo_dir(id).join(&f.commit);
        let mut m = read_manifest(&dir).unwrap_or_default();
        m.version = VERSION;
        m.repo = id.repo();
        m.commit = f.commit.clone();
        m.endpoint = f.endpoint.clone();
        for (name, bytes) in &f.whole {
            put(&dir, name, bytes)?;
            if !m.whole.contains(name) {
                m.whole.push(name.clone());
            }
        }
        for (name, bytes, size) in &f.headers {
            put(&dir, name, bytes)?;
            m.weights.insert(
                name.clone(),
                Entry {
                    size: *size,
                    stored: bytes.len() as u64,
                },
            );
        }
        if id.file.is_none() {
            m.checkpoint = true;
        }
        let text =
            serde_json::to_vec_pretty(&m).map_err(|e| Error::malformed(&dir, e.to_string()))?;
        put(&dir, MANIFEST, &text)?;
        if revision != f.commit {
            put(
                &self.repo_dir(id).join("refs"),
                revision,
                f.commit.as_bytes(),
            )?;
        }
        Ok(self.snapshot(
            id,
            revision,
            f.commit.clone(),
            &m,
            Origin::Fetched {
                endpoint: f.endpoint.clone(),
                requests: f.requests,
                bytes: f.bytes,
            },
        ))
    }
}

/// A commit folder's manifest, `None` when absent, unreadable or of another version.
fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read(dir.join(MANIFEST)).ok()?;
    serde_json::from_slice::<Manifest>(&text)
        .ok()
        .filter(|m| m.version == VERSION)
}

/// Writes `dir/name` atomically, creating its folders. `name` is a relative path the Hub listed
/// (checked: no `..`, nothing absolute).
fn put(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let rel = Path::new(name);
    if name.is_empty()
        || !rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(Error::refused(
            dir,
            format!(
                "the Hub named a file '{}' outside the repo",
                name.escape_debug()
            ),
        ));
    }
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let mut out = crate::util::fs::AtomicFile::create(&path).map_err(|e| Error::io(&path, e))?;
    std::io::Write::write_all(out.file(), bytes).map_err(|e| Error::io(&path, e))?;
    out.commit().map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_follows_nnlint_cache_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let s = store(&env(&[("NNLINT_CACHE", "/n"), ("XDG_CACHE_HOME", "/x")])).unwrap();
        assert_eq!((s.dir, s.from), (PathBuf::from("/n"), "NNLINT_CACHE"));
        let s = store(&env(&[("NNLINT_CACHE", ""), ("XDG_CACHE_HOME", "/x")])).unwrap();
        assert_eq!(s.dir, PathBuf::from("/x/nnlint"));
        let s = store(&env(&[("HOME", "/h")])).unwrap();
        assert_eq!(s.dir, PathBuf::from("/h/.cache/nnlint"));
        assert!(store(&env(&[])).is_none());
    }

    #[test]
    fn a_commit_without_its_manifest_is_not_found_and_names_cannot_escape() {
        let t = tempfile::tempdir().unwrap();
        let s = Store {
            dir: t.path().into(),
            from: "NNLINT_CACHE",
        };
        let id = HubId::parse("o/n").unwrap();
        let sha = "ab".repeat(20);
        let f = Fetched {
            commit: sha.clone(),
            whole: vec![("config.json".into(), b"{}".to_vec())],
            headers: vec![("model.safetensors".into(), vec![0; 10], 1000)],
            ..Fetched::default()
        };
        let snap = s.write(&id, "main", &f).unwrap();
        assert_eq!(
            snap.declared.unwrap()[&snap.dir.join("model.safetensors")],
            1000
        );
        assert!(s.find(&id, "main").unwrap().is_some());
        std::fs::remove_file(s.repo_dir(&id).join(&sha).join(MANIFEST)).unwrap();
        assert!(s.find(&id, "main").unwrap().is_none());
        let bad = Fetched {
            commit: sha,
            whole: vec![("../x".into(), vec![])],
            ..Fetched::default()
        };
        assert!(s.write(&id, "main", &bad).is_err());
    }
}
