//! A connection split into a read half and a write half: one task writes a long pipeline
//! of commands while another reads the replies as they come, over implicit TLS to the
//! embedded server, and every reply arrives in order.

use std::time::Duration;

use spate::proto::smtp::reply;
use spate::serve;
use spate::transport::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halves_send_and_receive_at_once_over_tls() {
    let mut cfg = serve::Config::loopback();
    cfg.listen.smtps = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtps.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &server.cert_pem).unwrap();
    let tls = spate::tls::client_config(&spate::tls::ClientOptions {
        ca: Some(ca.display().to_string()),
        ..Default::default()
    })
    .unwrap();
    let mut conn = Connection::connect(addr, None, Duration::from_secs(10))
        .await
        .unwrap();
    conn.start_tls(tls, spate::tls::server_name("127.0.0.1").unwrap())
        .await
        .unwrap();
    let (mut rx, mut tx) = conn.split();

    const NOOPS: usize = 500;
    let writer = tokio::spawn(async move {
        tx.send(b"EHLO split.test\r\n").await.unwrap();
        for _ in 0..NOOPS {
            tx.send(b"NOOP\r\n").await.unwrap();
        }
        tx.send(b"QUIT\r\n").await.unwrap();
        tx
    });
    let mut codes = Vec::new();
    for _ in 0..NOOPS + 3 {
        let raw = rx
            .read_frame(reply::MAX_REPLY + reply::MAX_LINE, reply::frame)
            .await
            .unwrap();
        codes.push(reply::framed(raw).code);
    }
    let tx = writer.await.unwrap();
    tx.shutdown().await;
    assert_eq!(codes[0], 220, "greeting");
    assert_eq!(codes[1], 250, "EHLO");
    assert!(codes[2..NOOPS + 2].iter().all(|&c| c == 250), "{codes:?}");
    assert_eq!(codes[NOOPS + 2], 221, "QUIT");
    server.shutdown().await;
}
