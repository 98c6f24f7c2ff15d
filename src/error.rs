//! Typed errors. Every variant names the file it is about and, where there is one, the node or tensor,
//! so that the one-line message the CLI prints is enough to find the problem.

use std::path::PathBuf;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while loading or analysing a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, mapped or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not a well-formed model of the expected format.
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },

    /// The file is well-formed but uses something nnlint refuses (an escaping external-data path, ...).
    #[error("{path}: {message}")]
    Refused { path: PathBuf, message: String },

    /// The graph cannot be analysed (a cycle, a value with two producers, ...).
    #[error("{path}: {message}")]
    Graph { path: PathBuf, message: String },

    /// The command line asks for something the model cannot give (an unknown dim name, ...).
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// Names `path` in a usage error about that model (an estimate that overflows at the asked
    /// batch, say), so that its one line names the file like every other error; others unchanged.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Self {
        match self {
            Error::Usage(message) => Error::Refused {
                path: path.into(),
                message,
            },
            e => e,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn malformed(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Malformed {
            path: path.into(),
            message: message.into(),
        }
    }

    pub fn refused(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Refused {
            path: path.into(),
            message: message.into(),
        }
    }

    pub fn graph(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Graph {
            path: path.into(),
            message: message.into(),
        }
    }
}
