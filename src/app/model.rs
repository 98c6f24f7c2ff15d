//! What a MODEL argument names: a path on disk, which always wins, or a Hugging Face Hub ID
//! (`org/name[@revision]`, `org/name/file.gguf`) read from the local Hugging Face cache
//! (`load::hub`). `mem`, `fit`, `report` and `lint` locate their models here.

use std::path::{Path, PathBuf};

use super::cli::HubArgs;
use crate::error::{Error, Result};
use crate::load::{self, hub, Loaded};

/// A located model.
#[derive(Debug)]
pub(crate) enum Model {
    /// A path as given (it may not exist: the loader says so).
    Path(PathBuf),
    /// A Hub ID's snapshot in the local cache, holding what the model needs.
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
/// ID: it is looked up in the Hugging Face cache, and what is missing there is said in one line
/// naming the cache. `--revision` and `@revision` must agree.
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
    let Some(cache) = hub::cache_from_env() else {
        return Err(Error::refused(
            label,
            "no Hugging Face cache to look in: HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME are all unset",
        ));
    };
    match hub::find(&id, &revision, &cache)? {
        hub::Lookup::Found(s) => Ok(Model::Hub(s)),
        hub::Lookup::Missing(m) => {
            let mut message = m.describe(&id, &revision, &cache);
            if Path::new(&id.org).is_dir() {
                // `models/nothere` beside a folder `models`: most likely a path with a typo
                return Err(Error::refused(
                    arg,
                    format!("no such file or directory; as a Hub ID, {label}: {message}"),
                ));
            }
            if !m.points_elsewhere() {
                if opts.offline || hub::offline(&|k| std::env::var_os(k)) {
                    message.push_str(
                        "; offline (--offline or HF_HUB_OFFLINE), so the Hub is not asked",
                    );
                } else {
                    message.push_str(&format!(
                        "; nnlint does not download from the Hub yet (`hf download {}{}{}` does)",
                        id.repo(),
                        id.file
                            .as_ref()
                            .map(|f| format!(" {f}"))
                            .unwrap_or_default(),
                        if revision == hub::DEFAULT_REVISION {
                            String::new()
                        } else {
                            format!(" --revision {revision}")
                        }
                    ));
                }
            }
            Err(Error::refused(label, message))
        }
    }
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
        };
        let e = locate(Path::new("o/n@v1"), &both).unwrap_err().to_string();
        assert!(
            e.contains("names revision 'v1' and --revision names 'v2'"),
            "{e}"
        );
        let bad = HubArgs {
            revision: Some("../x".into()),
            offline: false,
        };
        let e = locate(Path::new("o/n"), &bad).unwrap_err().to_string();
        assert!(e.starts_with("--revision: "), "{e}");
    }
}
