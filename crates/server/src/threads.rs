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
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

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

/// Serves the connections handed through `connections` until `stop`
/// fires and they have closed.
async fn serve_handed(
    mut connections: mpsc::UnboundedReceiver<Handed>,
    app: Router,
    stop: CancellationToken,
    head_timeout: Duration,
) -> io::Result<()> {
    let mut served = JoinSet::new();
    loop {
        let handed = tokio::select! {
            () = stop.cancelled() => break,
            handed = connections.recv() => handed,
        };
        // The acceptor has stopped (shutdown): nothing more comes.
        let Some((stream, peer)) = handed else {
            break;
        };
        // On this thread's runtime, so its I/O is polled here.
        let tcp = match TcpStream::from_std(stream) {
            Ok(tcp) => tcp,
            Err(error) => {
                tracing::warn!(%peer, %error, "cannot serve a connection");
                continue;
            }
        };
        // Streamed answers (SSE) are many small writes; with Nagle's
        // algorithm each waits for the client's delayed ACK (~40 ms).
        let _ = tcp.set_nodelay(true);
        served.spawn(serve_connection(
            tcp,
            peer,
            app.clone(),
            stop.clone(),
            head_timeout,
        ));
        // Reap the connections that have closed, so the set holds only
        // open ones.
        while served.try_join_next().is_some() {}
    }
    while served.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection until it closes; once `stop` fires, it finishes
/// the request in flight (hyper's graceful shutdown) and closes.
///
/// A request head must arrive within `head_timeout`, counted from when the
/// server starts waiting for it (so an idle keep-alive connection closes
/// after that long too): without it a client that connects and sends
/// nothing, or a head one byte at a time, holds a task and a descriptor
/// forever. `axum::serve` gives hyper no timer, so no such timeout.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    stop: CancellationToken,
    head_timeout: Duration,
) {
    // What `ConnectInfo<SocketAddr>` extracts, as `axum::serve` would set.
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let mut app = app.clone();
        async move { tower_service::Service::call(&mut app, request).await }
    });
    // HTTP/1 only, as the server is built (no `http2` feature): hyper's
    // version-detecting builder would first wait, with no timeout, for the
    // bytes that tell the versions apart.
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades();
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
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
/// thread's connections have closed; a request head must arrive within
/// `head_timeout` (see `serve_connection`). The first thread is the caller's; the
/// others are started here, each with a runtime of one worker, which runs
/// on (for the tasks it started) until `release` fires.
pub(crate) async fn serve_on_threads(
    listener: TcpListener,
    app: Router,
    threads: ServeThreads,
    head_timeout: Duration,
    stop: CancellationToken,
    release: CancellationToken,
) -> io::Result<()> {
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
                    let served = serve_handed(rx, app, stop, head_timeout).await;
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
    serve_handed(here_rx, app, stop, head_timeout).await?;
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
