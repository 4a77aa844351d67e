//! TLS for `wss://`: rustls on ring (the workspace's one crypto provider),
//! trusting the system's roots plus an optional CA file (`--ca-file`, for a
//! home server with its own certificate authority).
//!
//! The TLS stream is ours; tungstenite only does the WebSocket handshake
//! over it, so it needs no TLS feature of its own.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::client::WaiterError;

/// A client configuration trusting the system roots and the certificates
/// in `ca_file` (PEM). Fails when the CA file has no certificate, or when
/// nothing at all is trusted.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, WaiterError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a system root certificate could not be loaded");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system root certificates");

    if let Some(path) = ca_file {
        let ca_error = |why: String| WaiterError::CaFile {
            path: path.to_owned(),
            why,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca_error(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca_error(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_error("it holds no PEM certificate".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| ca_error(format!("a certificate is not usable: {e}")))?;
        }
    }
    if roots.is_empty() {
        return Err(WaiterError::NoTrustedRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WaiterError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_an_error_naming_it() {
        let path = std::env::temp_dir().join(format!("waiter-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let result = client_config(Some(&path));
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(&result, Err(WaiterError::CaFile { path: p, .. }) if p == &path),
            "{result:?}"
        );
        let missing = client_config(Some(Path::new("/nonexistent/ca.pem")));
        assert!(matches!(missing, Err(WaiterError::CaFile { .. })));
    }
}
