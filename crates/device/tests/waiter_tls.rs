#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! `wss://`: the waiter over TLS to a loopback server whose certificate is
//! signed by a CA made for the test. With `ca_file` naming that CA the link
//! binds and commands run; without it the handshake is refused before any
//! frame (and so before the token) is sent.

use crate::waiter_support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use homeagent_device::protocol::{CmdStatus, DeviceFrame, ServerFrame};
use homeagent_device::waiter::WaiterPolicy;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::Message;
use waiter_support::{TOKEN, fast_options, start_waiter, temp_dir};

struct Pki {
    ca_pem: String,
    acceptor: TlsAcceptor,
}

/// A CA, and a server certificate for 127.0.0.1 signed by it.
fn pki() -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "HomeAgent waiter test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone(), ca.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .unwrap();
    Pki {
        ca_pem: ca.pem(),
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

async fn next_frame<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> DeviceFrame
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("no frame within 20 s")
            .expect("the link closed")
            .unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_servers_ca_the_waiter_binds_over_wss_and_runs_commands() {
    let pki = pki();
    let dir = temp_dir("tls-ok");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("wss://{}", listener.local_addr().unwrap());
    let mut options = fast_options(&url);
    options.ca_file = Some(ca_file);
    let waiter = start_waiter(options, WaiterPolicy::default());

    let (tcp, _) = listener.accept().await.unwrap();
    let tls = pki.acceptor.accept(tcp).await.unwrap();
    let mut ws = tokio_tungstenite::accept_async(tls).await.unwrap();
    assert!(matches!(next_frame(&mut ws).await, DeviceFrame::Hello(_)));
    assert_eq!(
        next_frame(&mut ws).await,
        DeviceFrame::Bind {
            token: TOKEN.into()
        }
    );
    let bound = ServerFrame::Bound {
        device_id: "test-device".into(),
    };
    ws.send(Message::text(serde_json::to_string(&bound).unwrap()))
        .await
        .unwrap();
    let cmd = ServerFrame::Cmd {
        req_id: 1,
        argv: None,
        command: Some("echo over-tls".into()),
        timeout_ms: 10_000,
    };
    ws.send(Message::text(serde_json::to_string(&cmd).unwrap()))
        .await
        .unwrap();
    match next_frame(&mut ws).await {
        DeviceFrame::CmdResult {
            req_id,
            status,
            stdout,
            ..
        } => {
            assert_eq!(
                (req_id, status, stdout.as_str()),
                (1, CmdStatus::Ok, "over-tls\n")
            );
        }
        other => panic!("expected a cmd_result, got {other:?}"),
    }
    waiter.abort();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_servers_ca_the_handshake_fails_before_any_frame() {
    let pki = pki();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("wss://{}", listener.local_addr().unwrap());
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());
    // Every attempt (the waiter retries: the server may get a trusted
    // certificate) ends in a TLS failure on the server's side too.
    for _ in 0..2 {
        let (tcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the waiter did not connect")
            .unwrap();
        assert!(
            pki.acceptor.accept(tcp).await.is_err(),
            "a certificate from an unknown CA was accepted"
        );
    }
    waiter.abort();
}
