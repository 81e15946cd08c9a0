use super::*;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn configs() -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let id = crate::tls::ServerIdentity::self_signed(&[]).unwrap();
    let server = id.server_config().unwrap();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &id.cert_pem).unwrap();
    let client = crate::tls::client_config(&crate::tls::ClientOptions {
        ca: Some(ca.path().to_string_lossy().into_owned()),
        ..Default::default()
    })
    .unwrap();
    (client, server)
}

type Client = TlsIo<UnbufferedClientConnection, tokio::net::TcpStream>;
type Server = TlsIo<UnbufferedServerConnection, tokio::net::TcpStream>;

/// A client and a server over loopback TCP, both handshaken.
async fn pair(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> (Client, Server) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = server.clone();
    let accept = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let mut s = TlsIo::server(server, tcp).unwrap();
        std::future::poll_fn(|cx| s.poll_handshake(cx))
            .await
            .unwrap();
        s
    });
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = crate::tls::server_name("localhost").unwrap();
    let mut c = TlsIo::client(client.clone(), name, tcp).unwrap();
    std::future::poll_fn(|cx| c.poll_handshake(cx))
        .await
        .unwrap();
    (c, accept.await.unwrap())
}

/// Nothing is buffered: what a waiting connection holds is rustls' state alone.
fn holds_no_buffer<C: Side, IO>(t: &TlsIo<C, IO>) -> bool {
    t.incoming.capacity() == 0 && t.plain.capacity() == 0 && t.out.capacity() == 0
}

#[tokio::test]
async fn data_goes_both_ways_and_nothing_stays_buffered() {
    let (cc, sc) = configs();
    let (mut c, mut s) = pair(&cc, &sc).await;
    assert!(!c.resumed());
    c.write_all(b"EHLO x\r\n").await.unwrap();
    c.flush().await.unwrap();
    let mut got = [0u8; 8];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"EHLO x\r\n");
    // More than a record's worth, in both directions, as parts joined and alone.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let writer = tokio::spawn(async move {
        let parts = [io::IoSlice::new(b"DATA\r\n"), io::IoSlice::new(b"x: y\r\n")];
        let n = c.write_vectored(&parts).await.unwrap();
        assert_eq!(n, 12, "two small parts go as one");
        c.write_all(&big).await.unwrap();
        c.flush().await.unwrap();
        (c, big)
    });
    let mut head = [0u8; 12];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"DATA\r\nx: y\r\n");
    let mut all = vec![0u8; 200_000];
    s.read_exact(&mut all).await.unwrap();
    let (mut c, big) = writer.await.unwrap();
    assert_eq!(all, big);
    s.write_all(&big).await.unwrap();
    s.flush().await.unwrap();
    let mut back = vec![0u8; 200_000];
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(back, big);
    assert!(
        holds_no_buffer(&c),
        "the client keeps a buffer while it waits"
    );
    assert!(
        holds_no_buffer(&s),
        "the server keeps a buffer while it waits"
    );
    // A close is a clean end of the stream at the other side.
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

#[tokio::test]
async fn a_second_connection_resumes_the_first_ones_session() {
    let (cc, sc) = configs();
    let (mut c, mut s) = pair(&cc, &sc).await;
    // The tickets come after the handshake: a round trip takes them in.
    c.write_all(b"ping").await.unwrap();
    c.flush().await.unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).await.unwrap();
    s.write_all(b"pong").await.unwrap();
    s.flush().await.unwrap();
    c.read_exact(&mut b).await.unwrap();
    let (c2, s2) = pair(&cc, &sc).await;
    assert!(c2.resumed() && s2.resumed());
}

#[tokio::test]
async fn a_reader_waiting_on_one_half_hears_what_the_other_half_decrypted() {
    let (cc, sc) = configs();
    let (c, mut s) = pair(&cc, &sc).await;
    let (mut r, mut w) = tokio::io::split(c);
    let reader = tokio::spawn(async move {
        let mut b = [0u8; 5];
        r.read_exact(&mut b).await.unwrap();
        b
    });
    // The server's answer may be read by the reader, or taken in by the writer's next
    // write: either way the reader gets it.
    s.write_all(b"hello").await.unwrap();
    s.flush().await.unwrap();
    w.write_all(b"x").await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(&reader.await.unwrap(), b"hello");
}

#[tokio::test]
async fn a_server_with_the_wrong_name_is_refused_with_rustls_reason() {
    let (cc, sc) = configs();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let mut s = TlsIo::server(sc, tcp).unwrap();
        let _ = std::future::poll_fn(|cx| s.poll_handshake(cx)).await;
    });
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = crate::tls::server_name("not-this.example").unwrap();
    let mut c = TlsIo::client(cc, name, tcp).unwrap();
    let e = std::future::poll_fn(|cx| c.poll_handshake(cx))
        .await
        .unwrap_err();
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    assert!(
        matches!(inner, Some(rustls::Error::InvalidCertificate(_))),
        "{e:?}"
    );
}
