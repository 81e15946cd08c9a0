//! Where `spate serve` writes its certificate for clients' `--ca`: a generated one goes to
//! a directory of its own that nobody could have prepared (a symlink planted at the old
//! predictable name `spate-serve-PID.pem` is neither written through nor removed), and the
//! user's `--cert-out` never replaces what is not a previous serve's certificate.

mod common;

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, run_blocking, SPATE};

/// Starts `spate serve --smtps ADDR EXTRA..` through `sh`, which first runs `prepare`
/// with `$$` being serve's PID to come (`exec` keeps it), with TMPDIR set; returns the
/// child and the certificate path serve printed.
fn serve_in(tmp: &Path, prepare: &str, extra: &str) -> (common::Kill, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let script = format!("{prepare}; exec {SPATE} serve --smtps {addr} {extra}");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let child = common::Kill(child);
    let mut cert = None;
    for line in std::io::BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("spate serve: certificate ") {
            cert = Some(rest.split(' ').next().unwrap().to_string());
        }
        if line.contains("Ctrl-C stops") {
            break;
        }
    }
    (child, cert.expect("serve printed its certificate's path"))
}

fn stop(mut server: common::Kill) {
    // SAFETY: kill(2) on the PID of the server this test started (sh exec'd into it).
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let _ = server.0.wait();
}

#[test]
fn a_generated_certificate_goes_to_a_private_directory_and_nothing_planted_is_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "the user's own file\n").unwrap();
    // What an attacker on a shared host would plant at the name serve used to write.
    let plant = format!("ln -s {} \"$TMPDIR/spate-serve-$$.pem\"", victim.display());
    let (server, cert) = serve_in(tmp.path(), &plant, "");
    let cert = Path::new(&cert);
    let dir = cert.parent().unwrap();
    assert_eq!(dir.parent().unwrap(), tmp.path(), "{}", cert.display());
    assert!(
        std::fs::read_to_string(cert)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----"),
        "{}",
        cert.display()
    );
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    stop(server);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the user's own file\n",
        "written through the planted symlink"
    );
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Its own directory is gone; the user's file and the planted link stay.
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().any(|n| n == "victim.txt"), "{left:?}");
    assert!(left.iter().any(|n| n.ends_with(".pem")), "{left:?}");
}

#[test]
fn cert_out_replaces_only_a_previous_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("notes.txt");
    std::fs::write(&mine, "not a certificate\n").unwrap();
    let link = tmp.path().join("link.pem");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    for (path, want) in [
        (&mine, "holds something other than one PEM certificate"),
        (&link, "is a symbolic link"),
    ] {
        let addr = format!("127.0.0.1:{}", free_port());
        let o = run_blocking(
            SPATE,
            &[
                "serve",
                "--smtps",
                &addr,
                "--cert-out",
                path.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(30),
        );
        assert_eq!(o.code, Some(2), "{o:?}");
        assert!(o.stderr.contains(want), "{}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
        assert_eq!(
            std::fs::read_to_string(&mine).unwrap(),
            "not a certificate\n"
        );
    }
    // A new path is written and stays; a second serve replaces its certificate.
    let out = tmp.path().join("ca.pem");
    let arg = format!("--cert-out {}", out.display());
    let (server, cert) = serve_in(tmp.path(), "true", &arg);
    assert_eq!(cert, out.to_str().unwrap());
    let first = std::fs::read_to_string(&out).unwrap();
    stop(server);
    let (server, _) = serve_in(tmp.path(), "true", &arg);
    let second = std::fs::read_to_string(&out).unwrap();
    stop(server);
    assert!(second.starts_with("-----BEGIN CERTIFICATE-----"));
    assert_ne!(
        first, second,
        "a new serve's certificate replaced the old one"
    );
    assert!(out.exists(), "the user's --cert-out stays after exit");
}

/// An address serve cannot bind is an error, said once, and no "listens on" warning for
/// a server that never listened.
#[test]
fn an_address_that_cannot_be_bound_is_not_announced() {
    // 192.0.2.1 (TEST-NET-1) is never an address of this machine: nothing is sent to it.
    let o = run_blocking(
        SPATE,
        &["serve", "--smtp", "192.0.2.1:2525"],
        &[],
        Duration::from_secs(30),
    );
    assert!(!o.ok, "{o:?}");
    assert!(
        o.stderr.contains("cannot listen on 192.0.2.1:2525"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("listens on"), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
}
