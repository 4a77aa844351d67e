//! Why a bench could not run (as opposed to a correctness failure it
//! found, which is a row marked FAIL in the report).

/// A bench that could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or process operation failed.
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A child process did not come up.
    #[error("{what} did not start: {detail}")]
    Start { what: String, detail: String },
    /// A control endpoint (the mock's log, the agent's status) failed.
    #[error("cannot read {what}: {detail}")]
    Control { what: String, detail: String },
    /// The options make no sense.
    #[error("invalid bench option: {0}")]
    Options(String),
    /// Writing the report or a chart failed.
    #[error("cannot write {what}: {detail}")]
    Output { what: String, detail: String },
}
