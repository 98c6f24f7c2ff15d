//! Exit statuses, as a type: what a command found ([`Verdict`]) decides the status in one place.

/// The process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: the command did what was asked and found nothing that fails it.
    Success,
    /// 1: lint findings at `--fail-on` or above, or a `verify` whose check failed.
    Failure,
    /// 2: a tool error (an unreadable, malformed or hostile file, a bad argument).
    Error,
    /// 3: `verify` found the output changed, as the rewrites' declared safety (approximate or
    /// lossy) says it may: not a bug, but not the same model either.
    Changed,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Error => 2,
            ExitStatus::Changed => 3,
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(s: ExitStatus) -> Self {
        std::process::ExitCode::from(s.code())
    }
}

/// What a command found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing that fails the run.
    Clean,
    /// Lint findings at or above `--fail-on`.
    Findings,
    /// A numeric check failed (`verify`).
    CheckFailed,
    /// A numeric check found the output changed, as lossy rewrites declared (`verify`).
    Changed,
    /// Some input could not be processed although the command went on (a file `lint` could not
    /// read among others).
    InputErrors,
}

impl From<Verdict> for ExitStatus {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Clean => ExitStatus::Success,
            Verdict::Findings | Verdict::CheckFailed => ExitStatus::Failure,
            Verdict::InputErrors => ExitStatus::Error,
            Verdict::Changed => ExitStatus::Changed,
        }
    }
}

/// A command's result: what it writes on standard output, lines for standard error, and its
/// verdict.
#[derive(Debug)]
pub struct Outcome {
    pub body: Body,
    pub stderr: Vec<String>,
    pub verdict: Verdict,
}

/// What a command writes on standard output.
pub enum Body {
    Text(String),
    /// Written as it is rendered (the rows of a 100,000-layer table go out one by one); it owns
    /// what it renders.
    Stream(Writer),
}

/// A command's output written to standard output as it is rendered.
pub type Writer = Box<dyn FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send>;

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Body::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

impl Outcome {
    pub fn new(text: String, verdict: Verdict) -> Outcome {
        Outcome {
            body: Body::Text(text),
            stderr: Vec::new(),
            verdict,
        }
    }

    /// Output written as it is rendered, and nothing that fails.
    pub fn streamed(
        write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send + 'static,
    ) -> Outcome {
        Outcome {
            body: Body::Stream(Box::new(write)),
            stderr: Vec::new(),
            verdict: Verdict::Clean,
        }
    }

    /// Writes the output to `out`.
    pub fn write_body(self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self.body {
            Body::Text(t) => out.write_all(t.as_bytes()),
            Body::Stream(write) => write(out),
        }
    }

    /// The output as text (embedders and tests; `nnlint` itself writes it as it comes).
    pub fn text(self) -> String {
        crate::util::written(|out| self.write_body(out))
    }

    /// Output and nothing that fails.
    pub fn clean(text: String) -> Outcome {
        Outcome::new(text, Verdict::Clean)
    }

    /// Says which file of a folder was read ([`crate::load::resolve`]), on standard error.
    pub fn chosen(mut self, note: Option<String>) -> Outcome {
        self.stderr.extend(note.map(|n| format!("nnlint: {n}")));
        self
    }

    /// Adds the model's warnings (a missing external-data file, say) to standard error, where a
    /// script that reads the JSON on standard output still sees them.
    pub fn warn(mut self, model: &std::path::Path, warnings: &[String]) -> Outcome {
        self.stderr.extend(
            warnings
                .iter()
                .map(|w| format!("nnlint: warning: {}: {w}", model.display())),
        );
        self
    }
}
