//! `spate rr` over TLS against `serve --rrs --rr-client-ca`: a client certificate given
//! (accepted, its subject named in every decision) or not (the server's alert classified
//! as `tls-client-cert`), `--identities` taken per connection in turn (the server sees
//! each subject), and session resumption on and off.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use serde_json::Value;
use spate::proto::rr::Frame;
use spate::serve::{self, Addrs, Config, Running};

use common::{spate, summary};

/// A CA, and client certificates signed by it written as DIR/NAME.crt + DIR/NAME.key.
struct Pki {
    ca_pem: String,
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "spate test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        ca_cert,
        ca_key,
    }
}

impl Pki {
    fn client(&self, dir: &Path, name: &str, ext: &str) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec![format!("{name}.test")]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        let cert = p.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        std::fs::write(dir.join(format!("{name}.{ext}")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

/// `serve --rrs` requiring client certificates of `ca`; (server, address, its cert PEM file).
async fn server(ca: &Path, dir: &Path) -> (Running, String, String) {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        rrs: Some(lo),
        ..Addrs::default()
    };
    c.rr.frame = Frame::Line;
    c.rr.client_ca = Some(ca.to_path_buf());
    let running = serve::start(c).await.unwrap();
    let addr = running.addrs.rrs.unwrap().to_string();
    let server_ca = dir.join("server.pem");
    std::fs::write(&server_ca, &running.cert_pem).unwrap();
    (running, addr, server_ca.to_str().unwrap().to_string())
}

async fn rr(args: &[&str], out: &Path) -> (Option<i32>, Value, String) {
    let mut all = vec!["rr"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let o = spate(&all).await;
    assert!(
        out.join("summary.json").exists(),
        "{}\n{}",
        o.stdout,
        o.stderr
    );
    (o.code, summary(out), o.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_given_and_not_given() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    pki.client(tmp.path(), "alice", "crt");
    let (server, addr, server_ca) = server(&ca, tmp.path()).await;
    let cert = tmp.path().join("alice.crt");
    let key = tmp.path().join("alice.key");
    let (code, s, out) = rr(
        &[
            &addr,
            "--tls",
            "--ca",
            &server_ca,
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--template",
            "CHECK {identity} {n}",
            "--expect",
            "^ALLOW subject=alice ",
            "-n",
            "20",
        ],
        &tmp.path().join("with"),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(s["totals"]["accepted"], 20);
    assert_eq!(s["totals"]["tls_connections"], 1);
    assert_eq!(server.stats.rr().subjects, 1);

    let (code, s, _) = rr(
        &[
            &addr,
            "--tls",
            "--ca",
            &server_ca,
            "--template",
            "CHECK",
            "-n",
            "5",
        ],
        &tmp.path().join("without"),
    )
    .await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["failed"], 5);
    let errors = s["errors"].as_array().unwrap();
    assert!(
        !errors.is_empty() && errors.iter().all(|e| e["kind"] == "tls-client-cert"),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("refused the client certificate")),
        "the alert is named, not a bare reset: {errors:?}"
    );
    // TLS 1.3: the client's handshake is done before the server judges its certificate;
    // the verdict arrives with the first read, and is the handshake's failure.
    assert!(errors.iter().all(|e| e["phase"] == "tls"), "{errors:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_in_turn_and_resumption() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let ids = tmp.path().join("ids");
    std::fs::create_dir(&ids).unwrap();
    pki.client(&ids, "alice", "crt");
    pki.client(&ids, "bob", "pem");
    pki.client(&ids, "carol", "crt");
    let (server, addr, server_ca) = server(&ca, tmp.path()).await;
    let base = [
        addr.as_str(),
        "--tls",
        "--ca",
        &server_ca,
        "--identities",
        ids.to_str().unwrap(),
        "--per-request",
        "--template",
        "CHECK {identity}",
        "--expect",
        "^ALLOW subject=(alice|bob|carol) ",
        "-n",
        "30",
    ];
    let (code, s, out) = rr(&base, &tmp.path().join("ids-run")).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(s["totals"]["accepted"], 30);
    assert_eq!(
        server.stats.rr().subjects,
        3,
        "every identity was presented"
    );
    let x = &s["extra"]["rr"];
    assert_eq!(x["identities"], 3);
    assert_eq!(x["handshakes"], 30);
    assert!(
        x["resumed_handshakes"].as_u64().unwrap() > 0,
        "resumption is on by default: {x}"
    );
    // Three subjects, each asking the same thing: 3 misses, then hits.
    let r = server.stats.rr();
    assert_eq!((r.misses, r.hits), (3, 27));

    let no_resumption = [&base[..], &["--no-resumption"][..]].concat();
    let (code, s, _) = rr(&no_resumption, &tmp.path().join("full")).await;
    assert_eq!(code, Some(0));
    assert_eq!(s["extra"]["rr"]["handshakes"], 30);
    assert_eq!(s["extra"]["rr"]["resumed_handshakes"], 0);
    server.shutdown().await;
}

/// A server whose certificate names `svc.test` (signed by the test's CA), reached at
/// 127.0.0.1: the name check fails with a hint to --server-name, and --server-name
/// svc.test verifies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_name_verifies_a_name_other_than_the_address() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    pki.client(tmp.path(), "svc", "crt");
    let (crt, key) = (tmp.path().join("svc.crt"), tmp.path().join("svc.key"));
    let mut c = Config::loopback();
    c.listen = Addrs {
        rrs: Some("127.0.0.1:0".parse().unwrap()),
        ..Addrs::default()
    };
    c.rr.frame = Frame::Line;
    c.identity = Some(std::sync::Arc::new(
        spate::tls::ServerIdentity::from_pem_files(crt.to_str().unwrap(), key.to_str().unwrap())
            .unwrap(),
    ));
    let server = serve::start(c).await.unwrap();
    let addr = server.addrs.rrs.unwrap().to_string();
    let base = [
        "--tls",
        "--ca",
        ca.to_str().unwrap(),
        "--template",
        "x",
        "-n",
        "3",
    ];
    let mut args = vec![addr.as_str()];
    args.extend(base);
    let (code, s, _) = rr(&args, &tmp.path().join("by-address")).await;
    assert_eq!(code, Some(1));
    let e = &s["errors"][0];
    assert_eq!(e["kind"], "tls", "{}", s["errors"]);
    assert!(
        e["sample"].as_str().unwrap().contains("--server-name"),
        "{}",
        s["errors"]
    );
    args.extend(["--server-name", "svc.test"]);
    let (code, s, out) = rr(&args, &tmp.path().join("by-name")).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(s["totals"]["accepted"], 3);
    server.shutdown().await;
}

/// --identities with one the server does not trust: its connections fail as refused
/// client certificates in the handshake, and the refused identity is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_identity_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki();
    let rogue = self::pki();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let ids = tmp.path().join("ids");
    std::fs::create_dir(&ids).unwrap();
    pki.client(&ids, "alice", "crt");
    rogue.client(&ids, "mallory", "crt");
    let (server, addr, server_ca) = server(&ca, tmp.path()).await;
    let (code, s, out) = rr(
        &[
            &addr,
            "--tls",
            "--ca",
            &server_ca,
            "--identities",
            ids.to_str().unwrap(),
            "--per-request",
            "--template",
            "CHECK {identity}",
            "-n",
            "4",
        ],
        &tmp.path().join("run"),
    )
    .await;
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(s["totals"]["accepted"], 2, "{out}");
    assert_eq!(s["totals"]["failed"], 2, "{out}");
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors.iter().all(|e| e["kind"] == "tls-client-cert"
            && e["phase"] == "tls"
            && e["sample"].as_str().unwrap().contains("(identity mallory)")),
        "{errors:?}"
    );
    server.shutdown().await;
}
