//! TLS configuration for both sides, with the `ring` provider only.
//!
//! Client: certificates are verified against the system roots plus any `--ca` file;
//! `--insecure` is the only way to turn verification off. Server: a self-signed
//! certificate generated at start (for `spate serve`), or PEM files.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCert { path: String },
    #[error("{path}: no PEM private key found")]
    NoKey { path: String },
    #[error("{path}: the private key is encrypted; give it decrypted (openssl pkey -in {path} -out KEY.pem)")]
    EncryptedKey { path: String },
    #[error("{cert} and {key} are not a pair: the key does not match the certificate")]
    KeyMismatch { cert: String, key: String },
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Options the user controls for outgoing TLS.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ClientOptions {
    /// Extra trusted CA certificates (PEM file).
    pub ca: Option<String>,
    /// Skip certificate verification entirely (the user asked for it).
    pub insecure: bool,
    /// Client certificate chain and key (PEM files), for servers that want one.
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    /// Full handshakes only: no session tickets or IDs kept to resume with.
    #[serde(default)]
    pub no_resumption: bool,
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let data = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_string(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&data)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(Error::NoCert {
            path: path.to_string(),
        });
    }
    Ok(certs)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, Error> {
    let data = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_string(),
        source,
    })?;
    if data.windows(22).any(|w| w == b"-----BEGIN ENCRYPTED P")
        || data.windows(10).any(|w| w == b"Proc-Type:")
    {
        return Err(Error::EncryptedKey {
            path: path.to_string(),
        });
    }
    PrivateKeyDer::from_pem_slice(&data).map_err(|_| Error::NoKey {
        path: path.to_string(),
    })
}

/// Builds the client configuration once per run; every session shares it.
pub fn client_config(opts: &ClientOptions) -> Result<Arc<ClientConfig>, Error> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
    } else {
        let mut roots = RootCertStore::empty();
        // System roots are optional: a minimal container may have none, and a private
        // CA from --ca is then the only trust anchor.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        match &opts.ca {
            Some(ca) => {
                let given = read_certs(ca)?;
                for cert in &given {
                    roots.add(cert.clone())?;
                }
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                )
                .build()
                .map_err(|e| Error::Rustls(rustls::Error::General(e.to_string())))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(TrustGiven { webpki, given }))
            }
            None => builder.with_root_certificates(roots),
        }
    };
    let config = match (&opts.client_cert, &opts.client_key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => Error::KeyMismatch {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                e => Error::Rustls(e),
            })?,
        _ => builder.with_no_client_auth(),
    };
    let mut config = config;
    if opts.no_resumption {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// A server certificate and key, generated or loaded.
pub struct ServerIdentity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The certificate in PEM form, so clients (and tests) can trust it with `--ca`.
    pub cert_pem: String,
}

impl ServerIdentity {
    /// A self-signed certificate for `localhost`, 127.0.0.1 and ::1 (plus extra names).
    pub fn self_signed(extra_names: &[String]) -> Result<Self, Error> {
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        names.extend(extra_names.iter().cloned());
        let certified = rcgen::generate_simple_self_signed(names)?;
        let cert_pem = certified.cert.pem();
        let key = PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        Ok(ServerIdentity {
            certs: vec![certified.cert.der().clone()],
            key,
            cert_pem,
        })
    }

    pub fn from_pem_files(cert: &str, key: &str) -> Result<Self, Error> {
        let certs = read_certs(cert)?;
        let cert_pem = std::fs::read_to_string(cert).map_err(|source| Error::Read {
            path: cert.to_string(),
            source,
        })?;
        Ok(ServerIdentity {
            certs,
            key: read_key(key)?,
            cert_pem,
        })
    }

    /// As [`ServerIdentity::server_config`], but every client must present a
    /// certificate signed by a CA of the PEM file `ca`.
    pub fn server_config_with_client_ca(&self, ca: &str) -> Result<Arc<ServerConfig>, Error> {
        let mut roots = RootCertStore::empty();
        for cert in read_certs(ca)? {
            roots.add(cert)?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .map_err(|e| Error::Rustls(rustls::Error::General(e.to_string())))?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.certs.clone(), self.key.clone_key())?;
        Ok(Arc::new(config))
    }

    pub fn server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.certs.clone(), self.key.clone_key())?;
        Ok(Arc::new(config))
    }
}

/// The name to verify the server's certificate against: the host as the user wrote it.
pub fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|_| Error::Rustls(rustls::Error::General(format!("bad server name {host}"))))
}

/// The usual verification against the roots and `--ca`; in addition, a certificate the
/// user gave with `--ca` is accepted as the server's own when the server presents exactly
/// it (the common self-signed certificate made with `openssl req -x509` is marked as a
/// CA, which the usual path refuses as a server's certificate; curl and swaks accept it).
/// Expiry and names are still checked: only its being self-issued is forgiven.
#[derive(Debug)]
struct TrustGiven {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for TrustGiven {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError as C;
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(C::UnknownIssuer | C::Other(_)))
                if self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                Ok(ServerCertVerified::assertion())
            }
            r => r,
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

#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Loads a PEM file's certificates, for tests and for `--ca`.
pub fn load_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    read_certs(&path.to_string_lossy())
}
