//! Connections served on more than one thread.
//!
//! # Why
//!
//! The agent's runtime has one worker (`[runtime] worker_threads`): an
//! input that comes alone runs without a wake-up between threads, which
//! made it about a quarter faster than with two workers. But under many
//! sessions at once that one worker is the limit: the bench's blast of
//! 240 sessions kept it busy while the second core idled. A second tokio
//! worker shares every task, and its work stealing moves a turn's tasks
//! between the threads, which cost inputs that come alone up to a third
//! more time (docs/BENCHMARKS.md).
//!
//! # How
//!
//! One task accepts connections and hands each to one of
//! [`ServeThreads::threads`] serving threads in turn: the one it runs on
//! and `threads - 1` more, each with a runtime of one worker of its own.
//! Everything a connection starts — its requests, the turns they run, the
//! model streams and tools of those turns — is spawned on the thread that
//! serves it, so one input still never changes threads, while connections
//! on different threads run side by side. Shared state (scheduler, store,
//! event hub) is the same for all of them, as it was for several workers.
//!
//! # Shutdown
//!
//! Every thread stops accepting when the server's shutdown token fires and
//! ends once its connections have closed; [`crate::serve`] then waits for
//! all of them, as it waits for one.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::IntoMakeServiceWithConnectInfo;
use axum::serve::{Listener, ListenerExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use homeagent_core::CancellationToken;

/// How many threads serve connections (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeThreads {
    /// Threads serving connections, the caller's included (at least 1).
    pub threads: usize,
    /// Blocking threads at most for each runtime this starts (the store's
    /// calls, file tools; see `[runtime] blocking_threads`).
    pub blocking_threads: usize,
}

impl Default for ServeThreads {
    /// One thread: the caller's.
    fn default() -> Self {
        ServeThreads {
            threads: 1,
            blocking_threads: 8,
        }
    }
}

/// An accepted connection on its way to the thread that serves it.
type Handed = (std::net::TcpStream, SocketAddr);

/// The connections handed to one serving thread, as a listener its
/// `axum::serve` accepts from.
struct HandedListener {
    connections: mpsc::UnboundedReceiver<Handed>,
    local: SocketAddr,
}

impl Listener for HandedListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Some((stream, peer)) = self.connections.recv().await else {
                // The acceptor has stopped (shutdown): nothing more comes,
                // and the server's graceful shutdown ends this thread.
                return std::future::pending().await;
            };
            // On this thread's runtime, so its I/O is polled here.
            match TcpStream::from_std(stream) {
                Ok(stream) => return (stream, peer),
                Err(error) => tracing::warn!(%peer, %error, "cannot serve a connection"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

type App = IntoMakeServiceWithConnectInfo<Router, SocketAddr>;

/// Serves the connections handed through `connections` until `stop`
/// fires and they have closed.
async fn serve_handed(
    connections: mpsc::UnboundedReceiver<Handed>,
    local: SocketAddr,
    app: App,
    stop: CancellationToken,
) -> io::Result<()> {
    let listener = HandedListener { connections, local }.tap_io(|tcp: &mut TcpStream| {
        // Streamed answers (SSE) are many small writes; with Nagle's
        // algorithm each waits for the client's delayed ACK (~40 ms).
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// Accepts on `listener` until `stop` fires, handing the connections to
/// `threads` in turn.
async fn accept(
    listener: TcpListener,
    threads: Vec<mpsc::UnboundedSender<Handed>>,
    stop: CancellationToken,
) {
    let mut next = 0;
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                if let Some(pause) = pause_after(&error) {
                    tracing::error!(%error, "accepting connections failed; trying again in 1 s");
                    tokio::time::sleep(pause).await;
                }
                continue;
            }
        };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%peer, %error, "cannot hand a connection over");
                continue;
            }
        };
        // A thread that has ended (its runtime failed) takes no more; its
        // connection goes to the next one.
        let mut handed = Some((stream, peer));
        for _ in 0..threads.len() {
            let thread = &threads[next % threads.len()];
            next = next.wrapping_add(1);
            let Some(connection) = handed.take() else {
                break;
            };
            match thread.send(connection) {
                Ok(()) => break,
                Err(mpsc::error::SendError(back)) => handed = Some(back),
            }
        }
        if handed.is_some() {
            tracing::error!("no thread is left to serve connections");
            return;
        }
    }
}

/// How long to wait before accepting again after `error`: nothing when
/// only that one connection failed (it was reset or refused before it was
/// taken), a second when the process is out of descriptors or memory, to
/// let some connections close first (as axum's own listener does).
fn pause_after(error: &io::Error) -> Option<Duration> {
    let one_connection = matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    );
    (!one_connection).then_some(Duration::from_secs(1))
}

/// Serves `app` on `listener` with `threads` until `stop` fires and every
/// thread's connections have closed. The first thread is the caller's; the
/// others are started here, each with a runtime of one worker, which runs
/// on (for the tasks it started) until `release` fires.
pub(crate) async fn serve_on_threads(
    listener: TcpListener,
    app: App,
    threads: ServeThreads,
    stop: CancellationToken,
    release: CancellationToken,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    let (here_tx, here_rx) = mpsc::unbounded_channel();
    let mut senders = vec![here_tx];
    let mut others: Vec<oneshot::Receiver<io::Result<()>>> = Vec::new();
    for index in 1..threads.threads {
        // Built here, so a runtime that cannot start fails the server at
        // once instead of leaving a thread that serves nothing.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(threads.blocking_threads.max(1))
            .thread_name(format!("homeagent-serve-{index}"))
            .enable_all()
            .build()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let app = app.clone();
        let stop = stop.clone();
        let release = release.clone();
        std::thread::Builder::new()
            .name(format!("homeagent-serve-{index}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let served = serve_handed(rx, local, app, stop).await;
                    let _ = done_tx.send(served);
                    // Tasks this thread started (a turn whose client left)
                    // keep running until the server is done with them.
                    release.cancelled().await;
                });
                // The runtime is dropped here, outside any async context.
            })?;
        senders.push(tx);
        others.push(done_rx);
    }
    tokio::spawn(accept(listener, senders, stop.clone()));
    serve_handed(here_rx, local, app, stop).await?;
    for other in others {
        match other.await {
            Ok(served) => served?,
            Err(_) => return Err(io::Error::other("a serving thread panicked")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_error_of_the_whole_listener_pauses_accepting() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
        ] {
            assert_eq!(pause_after(&io::Error::from(kind)), None, "{kind:?}");
        }
        // EMFILE: the process is out of file descriptors.
        let out_of_descriptors = io::Error::from_raw_os_error(24);
        assert_eq!(
            pause_after(&out_of_descriptors),
            Some(Duration::from_secs(1))
        );
    }
}
