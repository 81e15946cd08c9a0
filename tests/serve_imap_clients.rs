//! Real IMAP clients read what `spate smtp` delivered to the embedded server, byte for
//! byte, over IMAP (plain and STARTTLS) and IMAPS: GNU mailutils (`frm`, `movemail`),
//! mutt (driven through a pseudo-terminal by `script`) and fetchmail. mbox conventions
//! (LF line ends, the `From ` separator, `>From` quoting, the Status/Content-Length/
//! X-UID headers mailers add) are undone before comparing.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{check_digests, have, run_tool_env, spate};
use spate::serve::{self, Config, Running, Users};

const N: usize = 4;

struct Bed {
    server: Running,
    dir: tempfile::TempDir,
    ca: String,
    /// The delivered messages as the store holds them, LF line ends.
    want: Vec<String>,
}

async fn bed() -> Bed {
    let mut config = Config::loopback();
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.smtp = any;
    config.listen.imap = any;
    config.listen.imaps = any;
    config.users = Users::parse("carol@example.test pw\n").unwrap();
    let server = serve::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let smtp = server.addrs.smtp.unwrap().to_string();
    let results = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &smtp,
        "-n",
        &N.to_string(),
        "--to",
        "carol@example.test",
        "-q",
        "-o",
        results.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(check_digests(&server), N);
    let want = server.store.with_mailbox("carol@example.test", |mb| {
        mb.messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.data).replace("\r\n", "\n"))
            .collect::<Vec<_>>()
    });
    assert_eq!(want.len(), N);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.cert_pem).unwrap();
    Bed {
        server,
        ca: ca.to_string_lossy().into_owned(),
        dir,
        want,
    }
}

/// The messages of an mbox file as they were before the mailer stored them.
fn mbox_messages(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let added = [
        "status:",
        "x-status:",
        "content-length:",
        "lines:",
        "x-imapbase:",
        "x-uid:",
    ];
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut in_header = false;
    let mut prev_empty = true;
    for line in text.split('\n') {
        if prev_empty && line.starts_with("From ") {
            out.push(Vec::new());
            in_header = true;
            prev_empty = false;
            continue;
        }
        prev_empty = line.is_empty();
        let Some(msg) = out.last_mut() else { continue };
        if in_header && line.is_empty() {
            in_header = false;
        }
        let lower = line.to_ascii_lowercase();
        if in_header && added.iter().any(|a| lower.starts_with(a)) {
            continue;
        }
        let unquoted = match line.strip_prefix('>') {
            Some(rest) if rest.trim_start_matches('>').starts_with("From ") => rest,
            _ => line,
        };
        msg.push(unquoted.to_string());
    }
    out.into_iter()
        .map(|mut lines| {
            // The blank line that separates messages (and the file's last newline).
            while lines.len() > 1 && lines.last().is_some_and(|l| l.is_empty()) {
                lines.pop();
            }
            lines.join("\n") + "\n"
        })
        .collect()
}

fn addr(b: &Bed, tls: bool) -> String {
    let a = if tls {
        b.server.addrs.imaps.unwrap()
    } else {
        b.server.addrs.imap.unwrap()
    };
    format!("127.0.0.1:{}", a.port())
}

async fn tool(b: &Bed, program: &str, args: &[String]) -> common::Output {
    let env = vec![
        (
            "HOME".to_string(),
            b.dir.path().to_string_lossy().into_owned(),
        ),
        ("TERM".to_string(), "xterm".to_string()),
    ];
    run_tool_env(program, args.to_vec(), env, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailutils_frm_and_movemail_read_and_remove_the_mail() {
    if !have("frm") || !have("movemail") {
        return;
    }
    let b = bed().await;
    for tls in [false, true] {
        let scheme = if tls { "imaps" } else { "imap" };
        let url = format!("{scheme}://carol%40example.test:pw@{}/INBOX", addr(&b, tls));
        let o = tool(&b, "frm", std::slice::from_ref(&url)).await;
        let subjects: Vec<&str> = o.stdout.lines().collect();
        assert_eq!(subjects.len(), N, "{scheme}: {}\n{}", o.stdout, o.stderr);
        for (i, s) in subjects.iter().enumerate() {
            assert!(s.ends_with(&format!("spate test message {i}")), "{s}");
        }
        // movemail -p keeps the messages on the server.
        let mbox = b.dir.path().join(format!("{scheme}.mbox"));
        let args = vec![
            "-p".into(),
            url.clone(),
            mbox.to_string_lossy().into_owned(),
        ];
        let o = tool(&b, "movemail", &args).await;
        assert!(o.ok, "{scheme}: {}", o.stderr);
        assert_eq!(
            by_seq(mbox_messages(&mbox)),
            by_seq(b.want.clone()),
            "{scheme}"
        );
    }
    // Without -p, movemail deletes what it moved (STORE \Deleted, EXPUNGE).
    let url = format!("imap://carol%40example.test:pw@{}/INBOX", addr(&b, false));
    let mbox = b.dir.path().join("moved.mbox");
    let o = tool(&b, "movemail", &[url, mbox.to_string_lossy().into_owned()]).await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(by_seq(mbox_messages(&mbox)), by_seq(b.want.clone()));
    let left = b
        .server
        .store
        .with_mailbox("carol@example.test", |mb| mb.messages.len());
    assert_eq!(left, 0);
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutt_copies_every_message_intact() {
    if !have("mutt") || !have("script") {
        return;
    }
    let b = bed().await;
    let rc = b.dir.path().join("muttrc");
    std::fs::write(
        &rc,
        format!(
            "set imap_user=\"carol@example.test\"\nset imap_pass=\"pw\"\n\
             set certificate_file=\"{}\"\nset ssl_verify_host=no\nset mbox_type=mbox\n\
             set confirmappend=no\nset confirmcreate=no\nset move=no\nset header_cache=\"\"\n\
             set sort=mailbox-order\nset timeout=5\nset auto_tag=yes\n",
            b.ca
        ),
    )
    .unwrap();
    // Without ~/Mail mutt first asks whether to create it, and eats the keys below.
    std::fs::create_dir_all(b.dir.path().join("Mail")).unwrap();
    for tls in [false, true] {
        let scheme = if tls { "imaps" } else { "imap" };
        let mbox = b.dir.path().join(format!("mutt-{scheme}.mbox"));
        let keys = format!(
            "<tag-pattern>~A<enter><copy-message>{}<enter><quit>",
            mbox.display()
        );
        let cmd = format!(
            "mutt -n -F {} -f {scheme}://{}/INBOX -e 'push \"{keys}\"'",
            rc.display(),
            addr(&b, tls)
        );
        let o = tool(&b, "script", &["-qec".into(), cmd, "/dev/null".into()]).await;
        assert!(o.ok, "{scheme}: {}\n{}", o.stdout, o.stderr);
        assert_eq!(
            by_seq(mbox_messages(&mbox)),
            by_seq(b.want.clone()),
            "{scheme}"
        );
    }
    b.server.shutdown().await;
}

/// Messages in the order of their spate sequence numbers.
fn by_seq(mut v: Vec<String>) -> Vec<String> {
    v.sort_by_key(|m| {
        m.split("seq=")
            .nth(1)
            .and_then(|s| s.split(';').next())
            .and_then(|n| n.parse::<u64>().ok())
    });
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetchmail_delivers_every_message_intact() {
    if !have("fetchmail") {
        return;
    }
    let b = bed().await;
    // IMAPS, and plain IMAP upgraded with STARTTLS; both check the certificate.
    for (tls, ssl) in [(true, "ssl"), (false, "sslproto tls1.2+")] {
        let out = b.dir.path().join(format!("fetchmail-{tls}"));
        std::fs::create_dir_all(&out).unwrap();
        let port = addr(&b, tls).rsplit(':').next().unwrap().to_string();
        let rc = b.dir.path().join(format!("fetchmailrc-{tls}"));
        std::fs::write(
            &rc,
            format!(
                "set no syslog\npoll 127.0.0.1 with proto IMAP port {port}\n  \
                 user \"carol@example.test\" there with password \"pw\" is \"carol\" here\n  \
                 options fetchall keep no rewrite {ssl} sslcertck sslcertfile \"{ca}\" \
                 sslcommonname \"localhost\"\n  mda \"/bin/sh -c 'cat > {dir}/$$'\"\n",
                ca = b.ca,
                dir = out.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&rc, std::fs::Permissions::from_mode(0o600)).unwrap();
        let args = vec![
            "-f".into(),
            rc.to_string_lossy().into_owned(),
            "--invisible".into(),
            "--pidfile".into(),
            b.dir.path().join("fm.pid").to_string_lossy().into_owned(),
        ];
        let o = tool(&b, "fetchmail", &args).await;
        assert!(o.ok, "tls={tls}: {}\n{}", o.stdout, o.stderr);
        let got: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        assert_eq!(by_seq(got), by_seq(b.want.clone()), "tls={tls}");
    }
    b.server.shutdown().await;
}
