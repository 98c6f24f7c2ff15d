//! Repos of several models: a diffusers pipeline (`model_index.json` naming its components, each
//! a subfolder with its own `config.json` and safetensors weights) and a sentence-transformers
//! model (`modules.json` listing its modules: the transformer at the root or in a subfolder,
//! `1_Pooling/`, maybe `2_Dense/` with weights of its own). Read as one weights-only listing: each
//! component's tensors, their names prefixed with the component's, headers only; except a
//! sentence-transformers model whose transformer module is a checkpoint (`config.json`): that
//! checkpoint, with the later modules' tensors added ([`transformer_checkpoint`]). Component
//! folders come from a file in the repo and are untrusted: one plain path component each, and
//! nothing (folder, weight file, shard) may resolve outside the model's folder.

use std::path::{Path, PathBuf};

use super::safetensors::{self, Declared, WeightTensor, Weights};
use crate::error::{Error, Result};

/// The kind of multi-model repo, by the file that describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Diffusers,
    SentenceTransformers,
}

impl Kind {
    /// The file at the repo's root that lists the components.
    pub fn file(self) -> &'static str {
        match self {
            Kind::Diffusers => "model_index.json",
            Kind::SentenceTransformers => "modules.json",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Diffusers => "diffusers pipeline",
            Kind::SentenceTransformers => "sentence-transformers model",
        }
    }
}

/// The kind of repo whose root holds the files `has` says are there: `model_index.json` first
/// (diffusers), then `modules.json` (sentence-transformers); `None` for anything else.
pub fn detect_by(has: impl Fn(&str) -> bool) -> Option<Kind> {
    [Kind::Diffusers, Kind::SentenceTransformers]
        .into_iter()
        .find(|k| has(k.file()))
}

/// [`detect_by`] on a folder.
pub fn detect(dir: &Path) -> Option<Kind> {
    detect_by(|n| dir.join(n).is_file())
}

/// One component: the name its tensors are prefixed with, and its folder relative to the repo
/// (empty: the root, as a sentence-transformers transformer usually is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub folder: String,
    /// The class the listing names (`UNet2DConditionModel`, `sentence_transformers.models.Pooling`).
    pub class: String,
}

/// Whether a folder name from a listing is one plain path component.
fn safe_folder(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && !s.starts_with('.')
        && !s.contains(['/', '\\', '\0', ':'])
        && s.len() <= 255
}

/// The components a listing names. `Err` says what is wrong with it (the caller names the file).
pub fn components(kind: Kind, bytes: &[u8]) -> std::result::Result<Vec<Component>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut out: Vec<Component> = Vec::new();
    match kind {
        Kind::Diffusers => {
            let obj = v.as_object().ok_or("is not a JSON object")?;
            for (key, value) in obj {
                if key.starts_with('_') {
                    continue;
                }
                // a component is `[library, class]`; `[null, null]` is an absent one, anything
                // else (a flag, a string) is a setting
                let Some([lib, class]) = value.as_array().map(Vec::as_slice) else {
                    continue;
                };
                let (Some(_), Some(class)) = (lib.as_str(), class.as_str()) else {
                    continue;
                };
                if !safe_folder(key) {
                    return Err(format!(
                        "names component '{}', which is not a folder of the repo (one plain name, no '..', no '/')",
                        key.escape_debug()
                    ));
                }
                out.push(Component {
                    name: key.clone(),
                    folder: key.clone(),
                    class: class.to_string(),
                });
            }
        }
        Kind::SentenceTransformers => {
            let list = v.as_array().ok_or("is not a JSON array of modules")?;
            for (i, m) in list.iter().enumerate() {
                let path = m.get("path").and_then(|p| p.as_str()).ok_or_else(|| {
                    format!("module {i} has no \"path\" (the module's folder, \"\" for the root)")
                })?;
                let class = m
                    .get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_string();
                let path = path.trim_end_matches('/');
                if !path.is_empty() && !safe_folder(path) {
                    return Err(format!(
                        "module {i} has path '{}', which is not a folder of the repo (one plain name, no '..', no '/')",
                        path.escape_debug()
                    ));
                }
                let name = if path.is_empty() {
                    // the transformer at the root: named after its class
                    let short = class.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
                    if short.is_empty() || !safe_folder(&short) {
                        format!("{i}")
                    } else {
                        short
                    }
                } else {
                    path.to_string()
                };
                out.push(Component {
                    name,
                    folder: path.to_string(),
                    class,
                });
            }
        }
    }
    if kind == Kind::Diffusers {
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("names a component twice".into());
    }
    Ok(out)
}

/// The weight file of a component folder holding the files `names` (names directly in it): a
/// sharded index or a single file, `model.*` and diffusers' `diffusion_pytorch_model.*` first.
/// `Ok(None)`: no safetensors (a scheduler, a tokenizer, a pooling layer); `Err`: several
/// candidates and no way to choose.
pub fn weights_file(names: &[&str]) -> std::result::Result<Option<String>, String> {
    for preferred in [
        "model.safetensors.index.json",
        "diffusion_pytorch_model.safetensors.index.json",
        "model.safetensors",
        "diffusion_pytorch_model.safetensors",
    ] {
        if names.contains(&preferred) {
            return Ok(Some(preferred.to_string()));
        }
    }
    let mut indexes: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.ends_with(".safetensors.index.json"))
        .collect();
    let mut singles: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    indexes.sort_unstable();
    singles.sort_unstable();
    match (indexes.as_slice(), singles.as_slice()) {
        ([one], _) => Ok(Some(one.to_string())),
        ([], [one]) => Ok(Some(one.to_string())),
        ([], []) => Ok(None),
        (_, _) => Err(format!(
            "holds {} safetensors files ({}) and no model.safetensors or diffusion_pytorch_model.safetensors",
            indexes.len() + singles.len(),
            indexes
                .iter()
                .chain(&singles)
                .take(4)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The names of the regular files (or links to them) directly in `dir`.
fn file_names(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_unstable();
    Ok(names)
}

/// Refuses `path` when it resolves outside `root` (canonical) through a link.
fn inside(path: &Path, root: &Path, top: &Path) -> Result<()> {
    let c = path.canonicalize().map_err(|e| Error::io(path, e))?;
    if c.starts_with(root) {
        Ok(())
    } else {
        Err(Error::refused(
            path,
            format!(
                "resolves outside the model's folder ({}) through a link",
                top.display()
            ),
        ))
    }
}

/// One component's weights and their file (relative to the repo), `None` for a component without
/// safetensors (a scheduler, a pooling layer; pickled weights are said in `warnings`).
fn component_weights(
    dir: &Path,
    c: &Component,
    root: &Path,
    bound: &Path,
    declared: Option<&Declared>,
    kind: Kind,
    warnings: &mut Vec<String>,
) -> Result<Option<(Weights, PathBuf)>> {
    let folder = if c.folder.is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(&c.folder)
    };
    if !folder.is_dir() {
        if folder.symlink_metadata().is_ok() {
            inside(&folder, root, bound)?;
        }
        // what the Hub's copy holds of a weightless component (a scheduler) is not fetched
        return Ok(None);
    }
    inside(&folder, root, bound)?;
    let names = file_names(&folder)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let file = weights_file(&refs).map_err(|m| Error::refused(&folder, m))?;
    let Some(file) = file else {
        if names.iter().any(|n| n.ends_with(".bin")) {
            warnings.push(format!(
                "{}: component {} holds pickled weights (.bin) and no safetensors: not counted",
                kind.file(),
                c.name
            ));
        }
        return Ok(None);
    };
    let path = folder.join(&file);
    inside(&path, root, bound)?;
    let w = safetensors::load_declared(&path, Some(bound), declared)?;
    Ok(Some((w, Path::new(&c.folder).join(&file))))
}

/// The listing of the repo at `dir` (which must not lead outside `bound`) and its components,
/// with `bound` made canonical for the checks of the component folders.
fn read_listing(dir: &Path, kind: Kind, bound: &Path) -> Result<(PathBuf, Vec<Component>)> {
    let listing = dir.join(kind.file());
    let root = bound.canonicalize().map_err(|e| Error::io(bound, e))?;
    inside(&listing, &root, bound)?;
    let bytes = std::fs::read(&listing).map_err(|e| Error::io(&listing, e))?;
    let comps = components(kind, &bytes).map_err(|m| Error::malformed(&listing, m))?;
    Ok((root, comps))
}

/// Whether a sentence-transformers module is its transformer (`sentence_transformers.models.Transformer`).
fn is_transformer(c: &Component) -> bool {
    c.class.rsplit('.').next() == Some("Transformer")
}

/// A sentence-transformers model whose transformer module is a Hugging Face checkpoint (its
/// folder holds a `config.json`): that checkpoint, estimated as usual, with the weights of the
/// modules after it (`2_Dense`) added as `{module}.{tensor}` and named in
/// [`hf::Checkpoint::modules`]. `Ok(None)`: another kind of repo (read by [`load_declared`]).
pub fn transformer_checkpoint(
    dir: &Path,
    links_within: Option<&Path>,
    declared: Option<&Declared>,
) -> Result<Option<super::hf::Checkpoint>> {
    if detect(dir) != Some(Kind::SentenceTransformers) {
        return Ok(None);
    }
    let bound = links_within.unwrap_or(dir);
    let (root, comps) = read_listing(dir, Kind::SentenceTransformers, bound)?;
    let Some(t) = comps.iter().position(is_transformer) else {
        return Ok(None);
    };
    let folder = if comps[t].folder.is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(&comps[t].folder)
    };
    let config = folder.join("config.json");
    if !config.is_file() {
        return Ok(None);
    }
    inside(&folder, &root, bound)?;
    inside(&config, &root, bound)?;
    let mut ck = super::hf::load_declared(&folder, Some(bound), declared)?;
    let mut rows: Vec<String> = Vec::new();
    let mut weightless: Vec<String> = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        if i == t {
            continue;
        }
        let Some((w, rel)) = component_weights(
            dir,
            c,
            &root,
            bound,
            declared,
            Kind::SentenceTransformers,
            &mut ck.weights.warnings,
        )?
        else {
            weightless.push(c.name.clone());
            continue;
        };
        let (mut params, offset) = (0u64, ck.weights.shards.len());
        for x in &w.tensors {
            params = params.saturating_add(x.numel());
        }
        ck.weights.shards.extend(w.shards);
        ck.weights
            .tensors
            .extend(w.tensors.into_iter().map(|x| WeightTensor {
                name: format!("{}.{}", c.name, x.name),
                shard: x.shard + offset,
                ..x
            }));
        ck.weights
            .warnings
            .extend(w.warnings.into_iter().map(|m| format!("{}: {m}", c.name)));
        rows.push(format!(
            "{} ({}, {params} parameters, {})",
            c.name,
            c.class.rsplit('.').next().unwrap_or(&c.class),
            rel.display()
        ));
        let class = c.class.rsplit('.').next().unwrap_or("");
        let class = if class.is_empty() { "Module" } else { class };
        ck.modules.push((c.name.clone(), class.to_string()));
    }
    ck.weights.notes.push(format!(
        "sentence-transformers model (modules.json): its transformer ({}) is estimated as a checkpoint{}{}",
        if comps[t].folder.is_empty() { "the folder's root" } else { comps[t].folder.as_str() },
        if rows.is_empty() {
            String::new()
        } else {
            format!(
                "; {} run once per sequence on the pooled vector, rows of their own (their parameters, outputs and MACs; what they keep for backward, a few values per sequence, is not on the training tape)",
                rows.join(", ")
            )
        },
        if weightless.is_empty() {
            String::new()
        } else {
            format!("; without weights: {}", weightless.join(", "))
        }
    ));
    ck.weights.path = dir.to_path_buf();
    ck.dir = dir.to_path_buf();
    Ok(Some(ck))
}

/// Loads a pipeline folder as one weights listing: every component's tensors, named
/// `{component}.{tensor}`, with notes giving each component's parameters and bytes and saying
/// that nothing beyond the parameters is estimated. `links_within` bounds where links may lead
/// (a cache snapshot's repo folder; `None`: `dir` itself); `declared` as for
/// [`safetensors::load_declared`].
pub fn load_declared(
    dir: &Path,
    links_within: Option<&Path>,
    declared: Option<&Declared>,
) -> Result<Weights> {
    let kind = detect(dir).ok_or_else(|| {
        Error::refused(
            dir,
            "has neither model_index.json nor modules.json: not a pipeline",
        )
    })?;
    let bound = links_within.unwrap_or(dir);
    let (root, comps) = read_listing(dir, kind, bound)?;
    let mut all = Weights {
        path: dir.to_path_buf(),
        shards: Vec::new(),
        tensors: Vec::new(),
        warnings: Vec::new(),
        notes: Vec::new(),
    };
    let mut lines: Vec<String> = Vec::new();
    let mut weightless: Vec<String> = Vec::new();
    for c in &comps {
        let Some((w, rel)) =
            component_weights(dir, c, &root, bound, declared, kind, &mut all.warnings)?
        else {
            weightless.push(c.name.clone());
            continue;
        };
        let offset = all.shards.len();
        let (mut params, mut bytes) = (0u64, 0u64);
        for t in &w.tensors {
            params += t.numel();
            bytes += t.bytes();
        }
        all.shards.extend(w.shards);
        all.tensors
            .extend(w.tensors.into_iter().map(|t| WeightTensor {
                name: format!("{}.{}", c.name, t.name),
                shard: t.shard + offset,
                ..t
            }));
        all.warnings
            .extend(w.warnings.into_iter().map(|m| format!("{}: {m}", c.name)));
        lines.push(format!(
            "{}{}: {} elements, {} bytes ({})",
            c.name,
            if c.class.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.class.rsplit('.').next().unwrap_or(&c.class))
            },
            params,
            bytes,
            rel.display()
        ));
    }
    if lines.is_empty() {
        return Err(Error::refused(
            dir,
            format!(
                "is a {} ({}) whose components hold no safetensors weights",
                kind.label(),
                kind.file()
            ),
        ));
    }
    all.notes.push(format!(
        "{} ({}): {} component{} with weights, tensors named component.tensor",
        kind.label(),
        kind.file(),
        lines.len(),
        if lines.len() == 1 { "" } else { "s" }
    ));
    all.notes.extend(lines);
    if !weightless.is_empty() {
        all.notes
            .push(format!("without weights: {}", weightless.join(", ")));
    }
    all.notes.push(format!(
        "parameters only: activations, MACs and the inference or training memory of a {} are out of scope",
        kind.label()
    ));
    Ok(all)
}

/// The files a pipeline snapshot needs beyond the listing that are known from what is there: each
/// component folder's sharded index's shards (`folder/shard`). A snapshot missing a whole
/// component's weights is read without it, as a local folder would be.
pub fn needed(dir: &Path) -> Result<Vec<String>> {
    let Some(kind) = detect(dir) else {
        return Ok(Vec::new());
    };
    let mut out = vec![kind.file().to_string()];
    let Ok(bytes) = std::fs::read(dir.join(kind.file())) else {
        return Ok(out);
    };
    let Ok(comps) = components(kind, &bytes) else {
        return Ok(out);
    };
    for c in comps {
        let folder = dir.join(&c.folder);
        let Ok(names) = file_names(&folder) else {
            continue;
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        if let Ok(Some(file)) = weights_file(&refs) {
            let rel = |n: &str| {
                if c.folder.is_empty() {
                    n.to_string()
                } else {
                    format!("{}/{n}", c.folder)
                }
            };
            out.push(rel(&file));
            if safetensors::is_index(Path::new(&file)) {
                if let Ok(shards) = safetensors::shard_names(&folder.join(&file)) {
                    out.extend(
                        shards
                            .iter()
                            .filter(|s| {
                                Path::new(s)
                                    .components()
                                    .all(|c| matches!(c, std::path::Component::Normal(_)))
                            })
                            .map(|s| rel(s)),
                    );
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_name_their_components_and_hostile_names_are_refused() {
        let idx = br#"{"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
            "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
            "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [null, null],
            "requires_safety_checker": true}"#;
        let c = components(Kind::Diffusers, idx).unwrap();
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["scheduler", "unet", "vae"]);
        for bad in ["..", "../x", "/etc", "a/b", ".hidden", "a\\b", ""] {
            let j = serde_json::json!({ bad: ["diffusers", "X"] }).to_string();
            assert!(components(Kind::Diffusers, j.as_bytes()).is_err(), "{bad}");
        }
        let st = br#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#;
        let c = components(Kind::SentenceTransformers, st).unwrap();
        let got: Vec<(&str, &str)> = c
            .iter()
            .map(|c| (c.name.as_str(), c.folder.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("transformer", ""),
                ("1_Pooling", "1_Pooling"),
                ("2_Dense", "2_Dense")
            ]
        );
        for bad in ["..", "../../etc", "/abs", "a/b"] {
            let j = serde_json::json!([{ "path": bad, "type": "x" }]).to_string();
            assert!(
                components(Kind::SentenceTransformers, j.as_bytes()).is_err(),
                "{bad}"
            );
        }
        assert!(components(Kind::Diffusers, b"[1]").is_err());
        assert!(components(Kind::SentenceTransformers, b"{").is_err());
    }

    #[test]
    fn the_weight_file_of_a_component() {
        let f = |n: &[&str]| weights_file(n);
        assert_eq!(
            f(&["config.json", "diffusion_pytorch_model.safetensors"]).unwrap(),
            Some("diffusion_pytorch_model.safetensors".into())
        );
        assert_eq!(
            f(&[
                "diffusion_pytorch_model.safetensors.index.json",
                "diffusion_pytorch_model-00001-of-00002.safetensors"
            ])
            .unwrap(),
            Some("diffusion_pytorch_model.safetensors.index.json".into())
        );
        assert_eq!(f(&["config.json"]).unwrap(), None);
        assert!(f(&["a.safetensors", "b.safetensors"]).is_err());
    }
}
