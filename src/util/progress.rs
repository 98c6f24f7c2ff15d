//! Progress reporting. The library says where the time goes (checking rewrites, writing a model,
//! linting many files); the application layer draws it (indicatif, on a terminal only). The
//! library never depends on how, or whether, progress is shown.

/// Receives progress events. Implementations must tolerate calls from several threads.
pub trait Progress: Sync {
    /// A stage of `total` steps begins (`total` 0: unknown).
    fn start(&self, stage: &str, total: u64);
    /// What is being worked on now.
    fn message(&self, text: &str);
    /// `n` more steps are done.
    fn advance(&self, n: u64);
    /// The stage is over (a drawn bar is cleared).
    fn finish(&self);
}

/// Shows nothing: for tests, pipes, and library callers that do not care.
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: &str, _: u64) {}
    fn message(&self, _: &str) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}
