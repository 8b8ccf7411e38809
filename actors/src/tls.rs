//! TLS for a door or the host API (rustls with the ring provider): the server certificate chain
//! and private key, read from PEM files once at start.
//!
//! TLS is what lets a listener leave loopback: a door or host API bound to any other address
//! must have it, and a door must also require its token (`network.authentication: bearer`).
//! On loopback it is optional.

use capsule_protocol::Code;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub use tokio_rustls::TlsAcceptor;

/// The certificate and key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed as PEM.
    #[error("{code}: cannot read the TLS {what} {path}: {source} (fix: pass a readable PEM file)", code = Code::TlsRefused)]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{code}: {path} holds no PEM certificate (fix: pass the server's certificate chain, `-----BEGIN CERTIFICATE-----`)", code = Code::TlsRefused)]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the pair (a key that does not match the certificate, an unsupported key).
    #[error("{code}: the TLS certificate and key were refused: {source} (fix: pass the key that belongs to the certificate)", code = Code::TlsRefused)]
    Refused {
        /// The cause.
        #[source]
        source: rustls::Error,
    },
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |source| TlsError::Read { what: "certificate", path: path.to_path_buf(), source };
    let certs: Vec<_> = CertificateDer::pem_file_iter(path).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The acceptor for these files, or why they cannot serve TLS.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Read {
        what: "key",
        path: files.key.clone(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Refused { source })?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::Refused { source })?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Whether a listener on `ip` with these settings may open: loopback always; any other address
/// only with TLS, and (for a door) with its token required. `Err` says what is missing.
pub fn exposure_allowed(ip: std::net::IpAddr, tls: bool, token_required: bool) -> Result<(), &'static str> {
    match (ip.is_loopback(), tls, token_required) {
        (true, _, _) | (false, true, true) => Ok(()),
        (false, false, _) => Err("TLS (a certificate and key)"),
        (false, true, false) => Err("a token (network.authentication: bearer)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_tls_with_a_token_may_listen() {
        let public: std::net::IpAddr = "0.0.0.0".parse().expect("ip");
        let lo: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
        assert!(exposure_allowed(lo, false, false).is_ok());
        assert!(exposure_allowed(public, true, true).is_ok());
        assert!(exposure_allowed(public, false, true).is_err());
        assert!(exposure_allowed(public, true, false).is_err());
    }

    #[test]
    fn a_missing_or_empty_certificate_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let files = TlsFiles { cert: empty.clone(), key: dir.path().join("key.pem") };
        assert!(matches!(acceptor(&files), Err(TlsError::NoCertificate { path }) if path == empty));
        let files = TlsFiles { cert: dir.path().join("absent.pem"), key: empty };
        let e = acceptor(&files).err().expect("refused");
        assert!(e.to_string().contains("absent.pem") && e.to_string().starts_with("E-RUN-066"), "{e}");
    }
}
