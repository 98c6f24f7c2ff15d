//! Baselines: the fingerprints of accepted findings, so that CI fails only on new ones
//! (`lint --write-baseline FILE`, then `--baseline FILE`).

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Finding;
use crate::error::{Error, Result};

/// The baseline file: a version and the fingerprints.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Baseline {
    pub version: u32,
    pub fingerprints: BTreeSet<String>,
}

impl Baseline {
    /// The baseline of these findings, by model.
    pub fn of<'a>(findings: impl IntoIterator<Item = (&'a str, &'a Finding)>) -> Baseline {
        Baseline {
            version: 1,
            fingerprints: findings
                .into_iter()
                .map(|(model, f)| fingerprint(model, f))
                .collect(),
        }
    }

    pub fn read(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        serde_json::from_str(&text)
            .map_err(|e| Error::malformed(path, format!("not an nnlint baseline: {e}")))
    }

    /// Writes the baseline atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self).expect("a baseline serialises");
        text.push('\n');
        crate::util::fs::write_atomically(path, text.as_bytes()).map_err(|e| Error::io(path, e))
    }

    pub fn contains(&self, model: &str, f: &Finding) -> bool {
        self.fingerprints.contains(&fingerprint(model, f))
    }
}

/// A stable fingerprint of a finding: rule, model file name and node (not the message, whose numbers
/// change with thresholds). FNV-1a, so it is the same on every platform and release.
pub fn fingerprint(model: &str, f: &Finding) -> String {
    let file = Path::new(model)
        .file_name()
        .map_or(model.into(), |n| n.to_string_lossy().into_owned());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{}\u{0}{file}\u{0}{}", f.code, f.node).bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
