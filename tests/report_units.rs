//! Reports say what was counted: a POP3 run's report speaks of visits and bytes read, not
//! messages sent; comparing an SMTP run with a POP3 run says that they count different
//! units; the headline has an error rate.

mod common;

use common::spate;
use spate::serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_follow_the_protocol() {
    let mut cfg = serve::Config::loopback();
    cfg.listen.pop3 = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = serve::start(cfg).await.unwrap();
    let smtp = server.addrs.smtp.unwrap().to_string();
    let pop3 = server.addrs.pop3.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (inject, visits) = (tmp.path().join("smtp"), tmp.path().join("pop3"));
    let o = spate(&[
        "smtp",
        &smtp,
        "-n",
        "20",
        "--to",
        "user{0..1}@example.test",
        "-q",
        "-o",
        inject.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    std::env::set_var("SPATE_PASSWORD", "x");
    let o = spate(&[
        "pop3",
        &pop3,
        "--user-pattern",
        "user{0..1}@example.test",
        "-d",
        "2s",
        "-q",
        "-o",
        visits.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);

    let page = std::fs::read_to_string(visits.join("report.html")).unwrap();
    for want in [
        "visits/s accepted",
        "visits accepted",
        ">read<",
        "visits per second",
        "error rate",
    ] {
        assert!(page.contains(want), "missing {want:?}");
    }
    assert!(!page.contains("messages/s accepted"));
    let page = std::fs::read_to_string(inject.join("report.html")).unwrap();
    assert!(page.contains("messages/s accepted") && page.contains(">sent<"));

    let o = spate(&[
        "compare",
        inject.to_str().unwrap(),
        visits.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("count different units"), "{}", o.stdout);
    server.shutdown().await;
}
