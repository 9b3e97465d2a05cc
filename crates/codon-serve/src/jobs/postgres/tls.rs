//! TLS for the PostgreSQL jobs store, as libpq's `sslmode` asks: rustls on ring, the server's
//! certificate unchecked under `prefer` and `require` (libpq's meaning: encrypted, the server not
//! authenticated), checked against the root certificates under `verify-ca`, and its name matched
//! to the host under `verify-full`.
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::target::SslMode;
use crate::jobs::StoreError;

/// The TLS connector for `mode`, with the root certificates of `root_cert` where they are read.
pub(super) fn connector(mode: SslMode, root_cert: Option<&Path>) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("TLS: {e}")))?;
    // libpq: `require` checks the certificate as verify-ca does when a root file exists.
    let verify = match mode {
        SslMode::VerifyCa | SslMode::VerifyFull => true,
        SslMode::Require => root_cert.is_some_and(Path::is_file),
        SslMode::Disable | SslMode::Prefer => false,
    };
    let config = if verify {
        let path = root_cert.ok_or_else(|| tls_error("no root certificates (sslrootcert)".into()))?;
        let roots = roots(path)?;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| tls_error(format!("the root certificates {}: {e}", path.display())))?;
        let verifier = Checked { webpki, match_name: mode == SslMode::VerifyFull };
        builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier)).with_no_client_auth()
    } else {
        let verifier = Unchecked(provider);
        builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier)).with_no_client_auth()
    };
    Ok(MakeRustlsConnect::new(config))
}

fn tls_error(reason: String) -> StoreError {
    StoreError::PostgresUrl { reason }
}

/// The certificates of a PEM file.
fn roots(path: &Path) -> Result<RootCertStore, StoreError> {
    let unreadable = |e: &dyn std::fmt::Display| tls_error(format!("the root certificates {}: {e}", path.display()));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
        roots.add(cert.map_err(|e| unreadable(&e))?).map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"no certificate in the file"));
    }
    Ok(roots)
}

/// The certificate checked against the roots; its name matched to the host only under
/// verify-full.
#[derive(Debug)]
struct Checked {
    webpki: Arc<WebPkiServerVerifier>,
    match_name: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.match_name => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// libpq's `prefer` and `require`: any certificate is taken (the handshake's signatures are
/// still checked), so the connection is encrypted but the server is not authenticated.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
