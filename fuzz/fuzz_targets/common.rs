//! Shared by the fuzz targets: the loaders take paths, so each input is written to a file in one
//! temporary directory (created once per process, overwritten on every run).

use std::path::PathBuf;
use std::sync::OnceLock;

static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();

/// Writes `data` to `name` in the process's temporary directory and returns its path.
pub fn write_input(name: &str, data: &[u8]) -> PathBuf {
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory"));
    let path = dir.path().join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create the input's folder");
    }
    std::fs::write(&path, data).expect("write fuzz input");
    path
}
