//! Atomic file writes. Everything nnlint writes (rewritten models, their data files, baselines)
//! goes through a uniquely named temporary sibling from `tempfile` and a rename, so a reader never
//! sees half a file and a failed or interrupted write leaves nothing behind (the temporary file is
//! removed when it is dropped without being committed).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A file being written next to its destination, renamed into place by [`AtomicFile::commit`].
pub struct AtomicFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Creates the temporary sibling of `path` (in the same directory, so the rename is atomic).
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map_or("out".into(), |n| n.to_string_lossy().into_owned());
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".nnlint.tmp");
        #[cfg(unix)]
        {
            // what File::create would give (the umask applies); tempfile's default is 0600
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        // tempfile's error names its temporary file: say what the user can act on instead
        let tmp = builder.tempfile_in(dir).map_err(|e| {
            let why = match e.kind() {
                io::ErrorKind::NotFound => format!("its folder {} does not exist", dir.display()),
                io::ErrorKind::PermissionDenied => {
                    format!("its folder {} is not writable", dir.display())
                }
                _ => io::Error::new(e.kind(), e.to_string())
                    .to_string()
                    .split(" at path ")
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            };
            io::Error::new(e.kind(), format!("cannot be written: {why}"))
        })?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// The temporary file, to write to.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// The destination.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the finished file into place.
    pub fn commit(self) -> io::Result<()> {
        self.tmp.persist(&self.path).map(drop).map_err(|e| e.error)
    }
}

/// Writes `data` to `path` atomically.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create(path)?;
    f.file().write_all(data)?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_and_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_missing_folder_is_named_not_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/out.json");
        let e = write_atomically(&p, b"x").unwrap_err().to_string();
        assert!(e.contains("does not exist") && e.contains("no/such"), "{e}");
        assert!(!e.contains(".nnlint.tmp"), "{e}");
    }

    #[test]
    fn an_uncommitted_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        {
            let mut f = AtomicFile::create(&p).unwrap();
            use std::io::Write;
            f.file().write_all(b"half").unwrap();
        }
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_folder_is_an_error_about_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope/out.json");
        let e = write_atomically(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
