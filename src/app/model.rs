//! What a MODEL argument names: a path on disk, which always wins, or a Hugging Face Hub ID
//! (`org/name[@revision]`, `org/name/file.gguf`) read from the local Hugging Face cache
//! (`load::hub`), else from nnlint's own cache of headers (`load::hub_store`), else fetched from
//! the Hub, headers only (`load::hub_net`). `mem`, `fit`, `report` and `lint` locate their
//! models here.

use std::path::{Path, PathBuf};

use super::cli::HubArgs;
use super::progress;
use crate::error::{Error, Result};
use crate::load::{self, hub, hub_net, hub_store, Loaded};

/// A located model.
#[derive(Debug)]
pub(crate) enum Model {
    /// A path as given (it may not exist: the loader says so).
    Path(PathBuf),
    /// A Hub ID's snapshot (the Hugging Face cache's, or nnlint's), holding what the model needs.
    Hub(Box<hub::Snapshot>),
}

/// The endings of the files nnlint reads: a missing argument ending in one is a path, never a
/// repo (`testdata/missing.onnx` is a missing file, not the repo `missing.onnx` of `testdata`).
const MODEL_FILES: &[&str] = &[
    ".onnx",
    ".safetensors",
    ".json",
    ".bin",
    ".pt",
    ".pth",
    ".gguf",
];

/// Whether an argument that is not on disk is meant as a path: it has no `/` (an ID has an
/// organisation), starts like a path (`/`, `.`, `~`), has a backslash, or names a model file by
/// its ending (unless it is an ID's GGUF file, `org/name/file.gguf`).
fn meant_as_path(arg: &str) -> bool {
    let target = arg.split('@').next().unwrap_or(arg).to_ascii_lowercase();
    let gguf_of_repo = target.split('/').count() > 2 && target.ends_with(".gguf");
    !arg.contains('/')
        || arg.starts_with(['/', '.', '~'])
        || arg.contains('\\')
        || (!gguf_of_repo && MODEL_FILES.iter().any(|e| target.ends_with(e)))
}

/// Locates a MODEL argument. A path that exists (or `-`) is read as it is; one that does not,
/// and looks like a path, is left to the loader's "no such file". Anything else must be a Hub
/// ID, resolved in this order: a complete snapshot in the Hugging Face cache (no request);
/// nnlint's cache for the commit the revision named when it was fetched (no request: a branch
/// that moved since needs `--refresh`); the Hub, headers only, kept in nnlint's cache. Offline,
/// what is missing is said in one line naming the caches. `--revision` and `@revision` must
/// agree.
pub(crate) fn locate(arg: &Path, opts: &HubArgs) -> Result<Model> {
    if arg == Path::new("-") || arg.symlink_metadata().is_ok() {
        if opts.revision.is_some() {
            return Err(Error::Usage(format!(
                "--revision picks a revision of a Hub ID, and {} is a path on disk (a path that exists wins over an ID)",
                arg.display()
            )));
        }
        return Ok(Model::Path(arg.to_path_buf()));
    }
    let Some(text) = arg.to_str().filter(|t| !meant_as_path(t)) else {
        return Ok(Model::Path(arg.to_path_buf()));
    };
    let id = hub::HubId::parse(text).map_err(|why| {
        Error::refused(
            arg,
            format!(
                "is neither a file nor a directory, nor a Hub ID (org/name[@revision], org/name/file.gguf): {why}"
            ),
        )
    })?;
    let revision = match (&id.revision, &opts.revision) {
        (Some(at), Some(flag)) if at != flag => {
            return Err(Error::Usage(format!(
                "{text} names revision '{at}' and --revision names '{flag}': give one"
            )))
        }
        (Some(at), _) => at.clone(),
        (None, Some(flag)) => {
            hub::validate_revision(flag)
                .map_err(|why| Error::Usage(format!("--revision: {why}")))?;
            flag.clone()
        }
        (None, None) => hub::DEFAULT_REVISION.to_string(),
    };
    let label = format!("{}@{revision}", id.target());
    let env = |k: &str| std::env::var_os(k);
    // 1. the Hugging Face cache: a complete snapshot is read with no request
    let hf = hub::cache_from_env();
    let mut local = Vec::new();
    let mut similar = None;
    match &hf {
        Some(cache) => match hub::find(&id, &revision, cache)? {
            hub::Lookup::Found(s) => return Ok(Model::Hub(s)),
            hub::Lookup::Missing(m) => {
                let message = m.describe(&id, &revision, cache);
                if Path::new(&id.org).is_dir() {
                    // `models/nothere` beside a folder `models`: most likely a path with a typo
                    return Err(Error::refused(
                        arg,
                        format!("no such file or directory; as a Hub ID, {label}: {message}"),
                    ));
                }
                if let hub::Missing::Files { gguf: Some(_), .. } = m {
                    // a repo of GGUF files named without one: the Hub would say the same
                    return Err(Error::refused(label, message));
                }
                if let hub::Missing::Repo { similar: Some(s) } = &m {
                    similar = Some(s.clone());
                }
                local.push(message);
            }
        },
        None => local.push(
            "no Hugging Face cache (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME are all unset)"
                .to_string(),
        ),
    }
    // 2. nnlint's cache of headers fetched earlier, by the commit the revision named then
    let store = hub_store::store(&env);
    if let Some(st) = &store {
        if !opts.refresh {
            if let Some(s) = st.find(&id, &revision)? {
                return Ok(Model::Hub(Box::new(s)));
            }
        }
        local.push(format!("not in nnlint's cache ({}) either", st.describe()));
    }
    // 3. the Hub
    if opts.offline || hub::offline(&env) {
        local.push("offline (--offline or HF_HUB_OFFLINE), so the Hub is not asked".into());
        if let Some(s) = similar {
            local.push(format!("did you mean '{s}'?"));
        }
        return Err(Error::refused(label, local.join("; ")));
    }
    let Some(store) = store else {
        return Err(Error::refused(
            label,
            "no cache to keep the Hub's headers in: NNLINT_CACHE, XDG_CACHE_HOME and HOME are all unset",
        ));
    };
    let hub = hub_net::Hub::from_env(&env);
    let fetched = hub_net::fetch(&hub, &id, &revision, &*progress::progress()).map_err(|e| {
        let hint = similar
            .as_ref()
            .map(|s| format!("; the Hugging Face cache has '{s}': did you mean it?"))
            .unwrap_or_default();
        let unreachable = hub_net::is_unreachable(&e);
        match e {
            // the network is down: say first what the caches lack
            Error::Refused { path, message } if unreachable => Error::refused(
                &label,
                format!("{}; {message} ({}){hint}", local.join("; "), path.display()),
            ),
            Error::Refused { path, message } if message.starts_with("repo ") => {
                Error::refused(path, format!("{message}{hint}"))
            }
            e => e,
        }
    })?;
    let snapshot = store.write(&id, &revision, &fetched)?;
    progress::note(&format!(
        "{label}: fetched {} in {} requests from {}, kept in {}",
        crate::util::units::bytes(fetched.bytes),
        fetched.requests,
        fetched.endpoint,
        snapshot.dir.display()
    ));
    Ok(Model::Hub(Box::new(snapshot)))
}

impl Model {
    /// The cache snapshot, for a Hub ID.
    pub(crate) fn snapshot(&self) -> Option<&hub::Snapshot> {
        match self {
            Model::Path(_) => None,
            Model::Hub(s) => Some(s),
        }
    }

    /// The model's name in reports for a Hub ID (`org/name@main (snapshot 0123abcd)`); a path
    /// keeps the name the analysis gives it.
    pub(crate) fn rename(&self, name: &mut String) {
        if let Model::Hub(s) = self {
            *name = s.display();
        }
    }

    /// The line saying which file of a folder is read ([`load::resolve`]); a snapshot is read as
    /// a checkpoint folder or the GGUF file its ID names, so it has none.
    pub(crate) fn chosen(&self) -> Result<Option<String>> {
        match self {
            Model::Path(p) => load::resolve(p).map(|r| r.chosen),
            Model::Hub(_) => Ok(None),
        }
    }

    pub(crate) fn load(&self) -> Result<Loaded> {
        match self {
            Model::Path(p) => load::load(p),
            Model::Hub(s) => load::load_snapshot(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_paths_stay_paths_and_ids_are_ids() {
        for path in [
            "missing.onnx",
            "gpt2",
            "testdata/missing.onnx",
            "dir/model.safetensors",
            "dir/model.safetensors.index.json",
            "dir/model.gguf",
            "./org/name",
            "../org/name",
            "/abs/org/name",
            "~/models/x",
            "a\\b",
        ] {
            assert!(meant_as_path(path), "{path}");
        }
        for id in [
            "Qwen/Qwen3-32B",
            "org/name@refs/pr/1",
            "org/name/file.gguf",
            "org/name/sub/file.gguf@v1",
            "x/y/z",
            "org/name@v1.json",
        ] {
            assert!(!meant_as_path(id), "{id}");
        }
    }

    #[test]
    fn a_malformed_id_is_one_line() {
        let e = locate(Path::new("x/y/z"), &HubArgs::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "x/y/z: is neither a file nor a directory, nor a Hub ID (org/name[@revision], org/name/file.gguf): a Hub ID is org/name, or org/name/FILE.gguf for one GGUF file of a repo ('z' is not a .gguf file)"
        );
        let both = HubArgs {
            revision: Some("v2".into()),
            offline: false,
            refresh: false,
        };
        let e = locate(Path::new("o/n@v1"), &both).unwrap_err().to_string();
        assert!(
            e.contains("names revision 'v1' and --revision names 'v2'"),
            "{e}"
        );
        let bad = HubArgs {
            revision: Some("../x".into()),
            offline: false,
            refresh: false,
        };
        let e = locate(Path::new("o/n"), &bad).unwrap_err().to_string();
        assert!(e.starts_with("--revision: "), "{e}");
    }
}
