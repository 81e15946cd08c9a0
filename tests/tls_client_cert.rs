//! Certificates end to end against an SMTPS server written here on rustls:
//! - `--cert/--key`: a server that demands a client certificate from a private CA.
//!   Without one, every message fails with the error class `tls-client-cert` (the
//!   server's alert, not a bare reset); with the client's certificate, every message is
//!   accepted.
//! - `--ca` with the most common self-signed certificate (`openssl req -x509` marks it
//!   as a CA): accepted as the server's own; without `--ca`, the failed handshakes are
//!   failed connections and the summary says how to fix it.

mod common;

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use common::{spate, summary};

struct Pki {
    ca_pem: String,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    client_pem: (String, String),
    ca_der: CertificateDer<'static>,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca_cert, &ca_key)
            .unwrap();
        (cert, key)
    };
    let (srv, srv_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (cli, cli_key) = leaf(vec!["spate-client".into()]);
    Pki {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().clone(),
        server: (
            srv.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(srv_key.serialize_der())),
        ),
        client_pem: (cli.pem(), cli_key.serialize_pem()),
    }
}

/// SMTPS on a free loopback port with this certificate (a client certificate signed by
/// `client_ca` required, when given); returns its address and the count of messages it
/// accepted.
async fn server(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<CertificateDer<'static>>,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(vec![cert], key).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        // Bounded: the test makes a handful of connections.
        for _ in 0..50 {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = smtp(tls, &count).await;
                }
            });
        }
    });
    (addr, accepted)
}

/// Just enough SMTP for one client: every command is accepted, messages counted.
async fn smtp(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    count: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    let (r, mut w) = tokio::io::split(tls);
    let mut lines = BufReader::new(r).lines();
    w.write_all(b"220 test ESMTP\r\n").await?;
    let mut in_data = false;
    while let Some(line) = lines.next_line().await? {
        let reply: &[u8] = if in_data {
            if line != "." {
                continue;
            }
            in_data = false;
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            b"250 2.0.0 queued\r\n"
        } else {
            match line.get(..4).unwrap_or("").to_ascii_uppercase().as_str() {
                "EHLO" => b"250 test\r\n",
                "DATA" => {
                    in_data = true;
                    b"354 go on\r\n"
                }
                "QUIT" => {
                    w.write_all(b"221 bye\r\n").await?;
                    return w.shutdown().await;
                }
                _ => b"250 2.0.0 ok\r\n",
            }
        };
        w.write_all(reply).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_certificate_is_its_own_class_and_a_given_one_works() {
    let p = pki();
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca.pem");
    let (cert, key) = (tmp.path().join("client.pem"), tmp.path().join("client.key"));
    std::fs::write(&ca, &p.ca_pem).unwrap();
    std::fs::write(&cert, &p.client_pem.0).unwrap();
    std::fs::write(&key, &p.client_pem.1).unwrap();
    let (addr, accepted) = server(
        p.server.0.clone(),
        p.server.1.clone_key(),
        Some(p.ca_der.clone()),
    )
    .await;
    let target = addr.to_string();
    let ca = ca.display().to_string();

    let without = tmp.path().join("without");
    let o = spate(&[
        "smtp",
        &target,
        "--tls",
        "--ca",
        &ca,
        "-n",
        "3",
        "-q",
        "--timeout",
        "5s",
        "-o",
        without.to_str().unwrap(),
    ])
    .await;
    assert!(o.ended(), "{}", o.stderr);
    let s = summary(&without);
    assert_eq!(s["totals"]["failed"], 3, "{s}");
    let kinds: Vec<&str> = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tls-client-cert"], "{s}");

    let with = tmp.path().join("with");
    let o = spate(&[
        "smtp",
        &target,
        "--tls",
        "--ca",
        &ca,
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "-n",
        "3",
        "-q",
        "--timeout",
        "5s",
        "-o",
        with.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&with);
    assert_eq!(s["totals"]["accepted"], 3, "{s}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 3);

    // A --cert without its --key is bad input.
    let o = spate(&["smtp", &target, "--tls", "--cert", cert.to_str().unwrap()]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_ca_certificate_given_with_ca_is_trusted_and_without_it_says_how() {
    // What `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost` makes: one
    // self-signed certificate with basicConstraints CA:TRUE, used as the server's own.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let (addr, accepted) = server(cert.der().clone(), der, None).await;
    let tmp = tempfile::tempdir().unwrap();
    let pem = tmp.path().join("self.pem");
    std::fs::write(&pem, cert.pem()).unwrap();
    let target = addr.to_string();

    let out = tmp.path().join("trusted");
    let o = spate(&[
        "smtp",
        &target,
        "--tls",
        "--ca",
        pem.to_str().unwrap(),
        "-n",
        "3",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(summary(&out)["totals"]["accepted"], 3);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 3);

    // Without --ca: every handshake fails, each a failed connection, and a hint.
    let out = tmp.path().join("untrusted");
    let o = spate(&[
        "smtp",
        &target,
        "--tls",
        "-n",
        "3",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ended(), "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["failed"], 3, "{s}");
    assert_eq!(s["totals"]["connect_failures"], 3, "{s}");
    assert_eq!(s["totals"]["tls_connections"], 0, "{s}");
    let e = &s["errors"][0];
    assert_eq!(e["kind"], "tls", "{s}");
    assert!(e["sample"].as_str().unwrap().contains("--ca FILE"), "{e}");
    assert!(
        o.stdout
            .contains("hint: the server's certificate is not trusted"),
        "{}",
        o.stdout
    );
}
