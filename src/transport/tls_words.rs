//! TLS failures in words a user can act on: an untrusted or expired certificate, a name
//! it is not valid for, a client certificate the server refused.

/// What a certificate that no root or --ca vouches for is called (the summary's hint
/// looks for it).
pub const UNTRUSTED: &str =
    "server certificate not signed by a trusted CA (--ca FILE, or --insecure)";

/// A TLS failure in words a user can act on (rustls's own names in brackets).
pub fn tls_words(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let what = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => UNTRUSTED,
            // A self-signed certificate marked as a CA, not given with --ca.
            C::Other(o) if format!("{o:?}").contains("CaUsedAsEndEntity") => UNTRUSTED,
            C::Expired | C::ExpiredContext { .. } => "the server's certificate has expired",
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (check the clocks)"
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for the name connected to (give the name it carries with --server-name NAME)"
            }
            C::Revoked => "the server's certificate is revoked",
            C::BadSignature | C::BadEncoding => {
                "the server's certificate is malformed or badly signed"
            }
            _ => "the server's certificate was not accepted",
        },
        rustls::Error::AlertReceived(a) if client_certificate_refused(e) => {
            return format!("the server refused the client certificate ({a:?} alert): give one with --cert and --key, or check that its CA is the one the server trusts");
        }
        rustls::Error::AlertReceived(a @ rustls::AlertDescription::HandshakeFailure) => {
            return format!("the server ended the handshake with the alert {a:?}: under TLS 1.2 a server that requires a client certificate and got none says this (give one with --cert and --key); otherwise no cipher or version is common");
        }
        rustls::Error::AlertReceived(a) => {
            return format!("the server ended the handshake with the alert {a:?}");
        }
        other => return other.to_string(),
    };
    format!("{what} [{e}]")
}

/// Whether the server refused the client's certificate (or its absence): an alert that
/// names the certificate, access denied, or a decrypt error (the server could not verify
/// what the client signed with its key: a certificate of another CA with the same name).
pub fn client_certificate_refused(e: &rustls::Error) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        e,
        rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::DecryptError
        )
    )
}
