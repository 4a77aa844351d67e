//! Ctrl-C presses, each one seen.
//!
//! `tokio::signal::ctrl_c()` made afresh on every pass of a `select!`
//! misses a press that lands between two passes (while a frame or the
//! spinner is printed): a new listener starts with the signals already
//! seen marked as seen. And once tokio's handler is installed the
//! default action (ending the process) is gone for good, so a program
//! that stops listening ignores every later press. One listener per
//! command, kept for its whole run, sees them all.

/// The process's SIGINTs (Ctrl-C), from when this was made.
pub struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Starts listening.
    pub fn new() -> std::io::Result<Interrupts> {
        Ok(Interrupts {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    /// The next press.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        {
            // `None` only if the signal driver went away with the runtime.
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The exit code of a program ended by an interrupt, as shells report it
/// (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;
