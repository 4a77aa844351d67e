#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! HTTPS over real loopback: custom CA certificates and `SSL_CERT_FILE`.
//!
//! Each test makes a throwaway CA and a server certificate signed by it
//! (for `localhost` and `127.0.0.1`), and serves one canned OpenAI SSE
//! answer over TLS on `127.0.0.1:0`. The server counts what happened on
//! each connection (TCP accepted, handshake completed or failed, request
//! read), so "rejected at the handshake" is told apart from "rejected after
//! the request was sent".
//!
//! `SSL_CERT_FILE` is tested without touching this process's environment
//! (racy across test threads, and `unsafe` in edition 2024): the parent
//! test runs this very test binary again as a child, with the variable set
//! on the child only, and the `#[ignore]`d test `child_trusts_ssl_cert_file`
//! does the request there and prints a marker line the parent checks.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use homeagent_core::{CancellationToken, Message, StreamEvent};
use homeagent_llm::{
    ChatRequest, Endpoint, HttpProvider, Options, Protocol, ProviderError, SetupError,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The text the canned answer carries, written out by hand.
const ANSWER_TEXT: &str = "hello over tls";

/// An OpenAI Chat Completions stream: one text delta, a finish, `[DONE]`.
const OK_SSE: &str = concat!(
    "data: {\"id\":\"chatcmpl-tls1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"role\":\"assistant\",\"content\":\"hello over tls\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-tls1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
    "\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// Set on the child process only: the URL it must reach.
const CHILD_URL_VAR: &str = "HOMEAGENT_TLS_TEST_CHILD_URL";
/// The child prints this, then what happened, so the parent can tell that
/// the child really ran its request (and how it ended).
const CHILD_MARKER: &str = "homeagent-tls-child-outcome:";

// ---------------------------------------------------------------------------
// Certificates and temp files
// ---------------------------------------------------------------------------

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "homeagent-tls-{tag}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CA and a server certificate it signed.
struct Pki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key_der: Vec<u8>,
    server_key_pem: String,
}

fn make_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("HomeAgent test CA {name}"));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A CA named `name`, and a leaf for `localhost` and `127.0.0.1` signed by
/// it (rcgen turns a SAN string that parses as an IP into an IP SAN).
fn make_pki(name: &str) -> Pki {
    let ca = make_ca(name);
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    let leaf = params.signed_by(&key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        server_chain: vec![leaf.der().clone(), ca.der().clone()],
        server_key_der: key.serialize_der(),
        server_key_pem: key.serialize_pem(),
    }
}

// ---------------------------------------------------------------------------
// The HTTPS server
// ---------------------------------------------------------------------------

/// What the server saw, connection by connection.
#[derive(Default)]
struct Counts {
    tcp_accepted: AtomicUsize,
    handshakes_completed: AtomicUsize,
    handshakes_failed: AtomicUsize,
    requests_read: AtomicUsize,
}

struct TlsServer {
    port: u16,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsServer {
    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}/v1", self.port)
    }

    fn get(&self, pick: impl Fn(&Counts) -> &AtomicUsize) -> usize {
        pick(&self.counts).load(Ordering::SeqCst)
    }

    /// Waits (a bounded number of polls) until the server has recorded a
    /// failed handshake: the client's error can come back before the
    /// server's side of the handshake has ended.
    async fn wait_for_failed_handshake(&self) {
        for _ in 0..500 {
            if self.get(|c| &c.handshakes_failed) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the server never saw a failed handshake");
    }
}

/// Serves [`OK_SSE`] over TLS with `pki`'s server certificate, to any
/// number of connections, one request each.
async fn serve(pki: &Pki) -> TlsServer {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server_key_der.clone()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(pki.server_chain.clone(), key)
    .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts = Arc::new(Counts::default());
    let task_counts = Arc::clone(&counts);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            task_counts.tcp_accepted.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let counts = Arc::clone(&task_counts);
            tokio::spawn(async move {
                let mut tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(_) => {
                        counts.handshakes_failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                counts.handshakes_completed.fetch_add(1, Ordering::SeqCst);
                if read_request(&mut tls).await.is_none() {
                    return;
                }
                counts.requests_read.fetch_add(1, Ordering::SeqCst);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            connection: close\r\n\r\n";
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(OK_SSE.as_bytes()).await;
                // close_notify: the body ends cleanly, not with a TLS EOF error.
                let _ = tls.shutdown().await;
            });
        }
    });
    TlsServer { port, counts, task }
}

/// Reads a request head and its `content-length` body; `None` if the
/// connection ends first.
async fn read_request(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let body_len: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    while buf.len() < head_end + body_len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

// ---------------------------------------------------------------------------
// The client side
// ---------------------------------------------------------------------------

fn provider(url: &str, extra_ca_pem: Vec<PathBuf>) -> Result<HttpProvider, SetupError> {
    HttpProvider::new(
        Protocol::Openai,
        Endpoint {
            base_url: url.to_owned(),
            api_key: Some("sk-tls-test-not-a-real-key".into()),
        },
        Options {
            extra_ca_pem,
            // Generous: only a hang would hit it, and then the test fails
            // with IdleTimeout instead of hanging.
            stream_idle_timeout: Duration::from_secs(30),
            ..Options::default()
        },
    )
}

fn chat() -> ChatRequest {
    ChatRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![Message::user("say hello")],
        tools: Vec::new(),
        max_tokens: 64,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

fn text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Streams one chat request to `url`, and returns its text.
async fn stream_text(provider: &HttpProvider) -> Result<String, ProviderError> {
    let stream = provider.stream(&chat(), CancellationToken::new()).await?;
    Ok(text(&stream.collect().await?))
}

/// The `Connect` detail of a request that must fail to connect.
async fn expect_connect_error(provider: &HttpProvider) -> String {
    match provider.stream(&chat(), CancellationToken::new()).await {
        Err(ProviderError::Connect { detail }) => detail,
        Err(other) => panic!("expected ProviderError::Connect, got {other:?}"),
        Ok(stream) => panic!(
            "expected ProviderError::Connect, got a stream: {:?}",
            stream.collect().await
        ),
    }
}

// ---------------------------------------------------------------------------
// Tests: extra_ca_pem
// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_ca_is_refused_at_the_handshake() {
    let pki = make_pki("unknown");
    let server = serve(&pki).await;
    let provider = provider(&server.url("127.0.0.1"), Vec::new()).unwrap();

    let detail = expect_connect_error(&provider).await;
    println!("refused as expected: {detail}");
    assert!(
        detail.to_ascii_lowercase().contains("certificate"),
        "the detail should say it is about the certificate: {detail}"
    );
    server.wait_for_failed_handshake().await;
    assert!(server.get(|c| &c.tcp_accepted) >= 1);
    assert_eq!(server.get(|c| &c.handshakes_completed), 0);
    assert_eq!(server.get(|c| &c.requests_read), 0);
}

#[tokio::test]
async fn a_configured_ca_file_is_trusted() {
    let pki = make_pki("configured");
    let dir = TempDir::new("configured");
    let ca = dir.write("ca.pem", &pki.ca_pem);
    let server = serve(&pki).await;

    // Both SANs of the leaf: the IP and the name.
    for host in ["127.0.0.1", "localhost"] {
        let provider = provider(&server.url(host), vec![ca.clone()]).unwrap();
        let got = stream_text(&provider).await.unwrap();
        assert_eq!(got, ANSWER_TEXT, "via {host}");
    }
    assert_eq!(server.get(|c| &c.handshakes_completed), 2);
    assert_eq!(server.get(|c| &c.requests_read), 2);
    assert_eq!(server.get(|c| &c.handshakes_failed), 0);
}

#[tokio::test]
async fn a_ca_file_of_another_ca_does_not_help() {
    let pki = make_pki("real");
    let other = make_ca("other");
    let dir = TempDir::new("other");
    let other_ca = dir.write("other-ca.pem", &other.pem());
    let server = serve(&pki).await;
    let provider = provider(&server.url("127.0.0.1"), vec![other_ca]).unwrap();

    let detail = expect_connect_error(&provider).await;
    println!("refused as expected: {detail}");
    server.wait_for_failed_handshake().await;
    assert_eq!(server.get(|c| &c.requests_read), 0);
}

#[test]
fn a_missing_or_empty_ca_file_is_a_setup_error_naming_it() {
    let pki = make_pki("setup");
    let dir = TempDir::new("setup");
    let missing = dir.0.join("no-such-ca.pem");
    let not_pem = dir.write("not-pem.pem", "this is not a certificate\n");
    let empty = dir.write("empty.pem", "");
    let key_only = dir.write("key-only.pem", &pki.server_key_pem);

    for path in [missing, not_pem, empty, key_only] {
        let err = provider("https://127.0.0.1:9/v1", vec![path.clone()]).unwrap_err();
        println!("{}: {err}", path.display());
        match &err {
            SetupError::CaFile { path: named, .. } => assert_eq!(named, &path),
            other => panic!("expected SetupError::CaFile for {path:?}, got {other:?}"),
        }
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "the message should name the file: {err}"
        );
    }
}

// ---------------------------------------------------------------------------
// Tests: SSL_CERT_FILE, through a child process
// ---------------------------------------------------------------------------

/// Runs `child_trusts_ssl_cert_file` in a fresh copy of this test binary,
/// with `CHILD_URL_VAR=url` and the given `SSL_CERT_*` variables (each
/// `None` is removed from the child's environment, so the parent's own
/// settings do not leak in).
async fn run_child(url: &str, cert_file: Option<&Path>, cert_dir: Option<&Path>) -> Output {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            // libtest names it by its module path within tests/it.rs.
            &format!(
                "{}::child_trusts_ssl_cert_file",
                module_path!().trim_start_matches("it::")
            ),
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_URL_VAR, url);
    match cert_file {
        Some(path) => command.env("SSL_CERT_FILE", path),
        None => command.env_remove("SSL_CERT_FILE"),
    };
    match cert_dir {
        Some(path) => command.env("SSL_CERT_DIR", path),
        None => command.env_remove("SSL_CERT_DIR"),
    };
    // The server runs on this runtime: wait for the child off it.
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// The child's marker line, e.g. `ok hello over tls` or `connect-error ...`.
fn child_outcome(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(CHILD_MARKER))
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("the child did not run its test:\n{stdout}\n{stderr}"))
}

#[tokio::test]
async fn ssl_cert_file_is_honoured() {
    let pki = make_pki("env");
    let dir = TempDir::new("env");
    let ca = dir.write("ca.pem", &pki.ca_pem);
    let server = serve(&pki).await;
    let url = server.url("127.0.0.1");

    // SSL_CERT_FILE alone: the platform roots are replaced by the file.
    let output = run_child(&url, Some(&ca), None).await;
    let outcome = child_outcome(&output);
    println!("SSL_CERT_FILE set: {outcome}");
    assert!(output.status.success(), "{outcome}");
    assert_eq!(outcome, format!("ok {ANSWER_TEXT}"));
    assert_eq!(server.get(|c| &c.requests_read), 1);

    // The same, next to an SSL_CERT_DIR (as on machines that set both).
    let system_dir = Path::new("/etc/ssl/certs");
    if system_dir.is_dir() {
        let output = run_child(&url, Some(&ca), Some(system_dir)).await;
        let outcome = child_outcome(&output);
        println!("SSL_CERT_FILE and SSL_CERT_DIR set: {outcome}");
        assert!(output.status.success(), "{outcome}");
        assert_eq!(outcome, format!("ok {ANSWER_TEXT}"));
        assert_eq!(server.get(|c| &c.requests_read), 2);
    }

    // Without it, the same child is refused at the handshake: the success
    // above is the variable's doing.
    let before = server.get(|c| &c.requests_read);
    let output = run_child(&url, None, None).await;
    let outcome = child_outcome(&output);
    println!("SSL_CERT_FILE unset: {outcome}");
    assert!(!output.status.success(), "{outcome}");
    assert!(outcome.starts_with("connect-error "), "{outcome}");
    assert_eq!(server.get(|c| &c.requests_read), before);
}

/// The child half of `ssl_cert_file_is_honoured`: passes at once unless
/// that test started it (with `CHILD_URL_VAR` set).
#[tokio::test]
#[ignore = "run by ssl_cert_file_is_honoured in a child process"]
async fn child_trusts_ssl_cert_file() {
    let Some(url) = std::env::var_os(CHILD_URL_VAR) else {
        return;
    };
    let url = url.into_string().unwrap();
    // No extra_ca_pem: only the environment can make this server trusted.
    let provider = match provider(&url, Vec::new()) {
        Ok(provider) => provider,
        Err(err) => {
            println!("{CHILD_MARKER} setup-error {err}");
            panic!("{err}");
        }
    };
    match stream_text(&provider).await {
        Ok(text) => {
            println!("{CHILD_MARKER} ok {text}");
            assert_eq!(text, ANSWER_TEXT);
        }
        Err(ProviderError::Connect { detail }) => {
            println!("{CHILD_MARKER} connect-error {detail}");
            panic!("{detail}");
        }
        Err(other) => {
            println!("{CHILD_MARKER} other-error {other:?}");
            panic!("{other}");
        }
    }
}
