//! XMPP over WebSocket (RFC 7395) against the embedded server: spate's client over ws://,
//! over wss:// mixed with TCP sessions, reconciled exactly with the server's counters; a
//! raw client for the handshake's refusals, pings and frames the server must refuse;
//! and a real browser's WebSocket (headless Chromium) that logs in, sends itself a
//! message and parses every message the server sent as a document of its own.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{run_tool_env, SPATE};
use serde_json::{json, Value};
use spate::serve::{self, Addrs, Config, Running, Users};
use spate::transport::websocket::{self as ws, Decoder};

const DOMAIN: &str = "example.test";

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        xmpp: Some(lo),
        xmpp_ws: Some(lo),
        xmpp_wss: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec![DOMAIN.to_string()];
    let users: String = (0..10)
        .map(|i| format!("user{i}@{DOMAIN} s3cret\n"))
        .collect();
    c.users = Users::parse(&users).unwrap();
    serve::start(c).await.unwrap()
}

/// `spate xmpp ARGS -q -o OUT`, which must succeed with nothing missing: its summary.
async fn load(args: &[&str], out: &Path) -> Value {
    let mut a: Vec<String> = vec!["xmpp".into()];
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["-q", "-o", out.to_str().unwrap()].map(String::from));
    let env = vec![("SPATE_PASSWORD".to_string(), "s3cret".to_string())];
    let o = run_tool_env(SPATE, a, env, Duration::from_secs(120)).await;
    assert!(o.ok, "exit {:?}\n{}\n{}", o.code, o.stdout, o.stderr);
    assert!(o.stdout.contains("missing 0"), "{}", o.stdout);
    common::summary(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spate_xmpp_over_websocket_and_mixed_with_tcp_reconciles_with_the_server() {
    let running = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let ws_url = format!("ws://{}/xmpp-websocket", running.addrs.xmpp_ws.unwrap());
    let wss_url = format!("wss://{}/", running.addrs.xmpp_wss.unwrap());
    let tcp = running.addrs.xmpp.unwrap().to_string();
    let pattern = "user{0..9}@example.test";
    let runs: [(&str, Vec<&str>, u64, u64); 2] = [
        // Every session over ws://, SCRAM.
        ("ws", vec![&ws_url], 10, 0),
        // Half over wss:// (TLS), half over TCP with STARTTLS.
        (
            "mixed",
            vec![
                &tcp,
                "--websocket",
                &wss_url,
                "--websocket-percent",
                "50",
                "--starttls",
            ],
            5,
            5,
        ),
    ];
    let mut before = running.stats.xmpp();
    for (name, target, over_ws, starttls) in runs {
        let mut args = target.clone();
        args.extend([
            "--user-pattern",
            pattern,
            "--users",
            "10",
            "-n",
            "200",
            "--ca",
            ca.to_str().unwrap(),
            "--server-name",
            DOMAIN,
            "--sasl",
            "scram-sha-256",
        ]);
        let s = load(&args, &dir.path().join(name)).await;
        let t = &s["totals"];
        assert_eq!(t["accepted"], 200, "{name}: {t}");
        assert_eq!(t["delivered"], 200, "{name}: {t}");
        assert_eq!(t["duplicates"], 0, "{name}: {t}");
        assert_eq!(t["connections"], 10, "{name}: {t}");
        assert_eq!(common::phase_count(&s, "websocket"), over_ws, "{name}");
        assert_eq!(common::phase_count(&s, "starttls"), starttls, "{name}");
        for p in ["auth", "bind", "presence"] {
            assert_eq!(common::phase_count(&s, p), 10, "{name}: phase {p}");
        }
        // Mixed: every delivery is also timed by its recipient's transport.
        let (tcp_in, ws_in) = (
            common::phase_count(&s, "tcp_arrival"),
            common::phase_count(&s, "ws_arrival"),
        );
        match name {
            "mixed" => {
                assert_eq!(tcp_in + ws_in, 200, "{name}");
                assert!(tcp_in > 0 && ws_in > 0, "{name}: {tcp_in} {ws_in}");
            }
            _ => assert_eq!((tcp_in, ws_in), (0, 0), "{name}"),
        }
        // TLS: the wss sessions' handshakes and the STARTTLS sessions' upgrades.
        let tls = if name == "mixed" { 10 } else { 0 };
        assert_eq!(t["tls_connections"], tls, "{name}: {t}");
        let after = common::xmpp_settled(&running).await;
        // As over TCP (tests/serve_xmpp.rs): 200 messages, 100 presence copies, 220
        // routed, 10 sessions, no bounce.
        let d = [
            after.message_deliveries - before.message_deliveries,
            after.presence_deliveries - before.presence_deliveries,
            after.stanzas_routed - before.stanzas_routed,
            after.sessions_total - before.sessions_total,
            after.bounces - before.bounces,
        ];
        assert_eq!(d, [200, 100, 220, 10, 0], "{name}: {after:?}");
        assert_eq!(after.stream_errors, before.stream_errors, "{name}");
        before = after;
    }
    running.shutdown().await;
}

/// Sends `request` raw, returns what came back within a second (at most 64 KiB).
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    got
}

fn upgrade(key: &str, protocol: &str) -> String {
    format!(
        "GET /xmpp-websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
}

/// The payloads of the server's frames in `bytes` after its answer's head.
fn payloads(bytes: &[u8]) -> (String, String) {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let mut rest = bytes[end..].to_vec();
    let (n, _) = Decoder::new(false).decode(&mut rest, 0).unwrap();
    (head, String::from_utf8_lossy(&rest[..n]).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_is_checked_pings_are_answered_and_bad_frames_end_the_stream() {
    let running = start().await;
    let addr = running.addrs.xmpp_ws.unwrap();
    // Not an upgrade, and no xmpp subprotocol: HTTP refusals, no stream.
    let plain = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        plain.starts_with(b"HTTP/1.1 426 "),
        "{}",
        String::from_utf8_lossy(&plain)
    );
    let key = ws::new_key();
    let other = exchange(addr, upgrade(&key, "chat").as_bytes());
    assert!(
        other.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&other)
    );
    assert!(String::from_utf8_lossy(&other).contains("xmpp subprotocol"));

    // A ping before the stream is answered with its payload; <open/> gets the server's
    // <open/> and features that declare their namespace.
    let mut req = upgrade(&key, "xmpp").into_bytes();
    req.extend(ws::frame(ws::OP_PING, b"are you there", Some([9, 8, 7, 6])));
    let open =
        format!("<open xmlns='urn:ietf:params:xml:ns:xmpp-framing' to='{DOMAIN}' version='1.0'/>");
    req.extend(ws::frame(ws::OP_TEXT, open.as_bytes(), Some([1, 2, 3, 4])));
    let got = exchange(addr, &req);
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    assert_eq!(ws::check_answer(&head, &key, "xmpp"), Ok(()), "{head}");
    let mut rest = got[end..].to_vec();
    let mut d = Decoder::new(false);
    let (n, controls) = d.decode(&mut rest, 0).unwrap();
    assert!(
        controls.is_empty(),
        "a server sends no ping or close here: {controls:?}"
    );
    let text = String::from_utf8_lossy(&rest[..n]).into_owned();
    assert!(
        text.starts_with("<open xmlns='urn:ietf:params:xml:ns:xmpp-framing'"),
        "{text}"
    );
    assert!(
        text.contains("<stream:features xmlns:stream='http://etherx.jabber.org/streams'>"),
        "{text}"
    );
    // The pong came back, unmasked, with the ping's payload.
    let pong = ws::frame(ws::OP_PONG, b"are you there", None);
    assert!(got[end..].windows(pong.len()).any(|w| w == pong), "no pong");

    // An unmasked frame from a client is a protocol error: the stream ends, no session.
    let mut req = upgrade(&key, "xmpp").into_bytes();
    req.extend(ws::frame(ws::OP_TEXT, open.as_bytes(), None));
    let (_, text) = payloads(&exchange(addr, &req));
    assert!(!text.contains("features"), "{text}");
    assert_eq!(running.stats.xmpp().sessions_total, 0);
    running.shutdown().await;
}

#[test]
fn a_browsers_websocket_logs_in_and_every_message_is_a_document_of_its_own() {
    if !common::have("chromium") {
        return;
    }
    let (_server, addr) = common::serve_process("--xmpp-ws", &[]);
    let profile = tempfile::tempdir().unwrap();
    let mut b = common::browser::Browser::start(profile.path());
    b.attach_page();
    let script = format!(
        r#"(async () => {{
  const F = "urn:ietf:params:xml:ns:xmpp-framing";
  const sock = new WebSocket("ws://{addr}/xmpp-websocket", "xmpp");
  const got = [], docs = [], waiting = [];
  sock.onmessage = (e) => {{ got.push(e.data); (waiting.shift() || (() => {{}}))(); }};
  await new Promise((ok, no) => {{ sock.onopen = ok; sock.onerror = () => no("no connection"); }});
  const next = async (want, what) => {{
    const until = Date.now() + 20000;
    for (;;) {{
      const i = got.findIndex(want);
      if (i >= 0) {{
        const text = got.splice(i, 1)[0];
        const doc = new DOMParser().parseFromString(text, "text/xml");
        if (doc.getElementsByTagName("parsererror").length) throw "not a document: " + text;
        docs.push(text);
        return doc.documentElement;
      }}
      if (Date.now() > until) throw "no " + what + " in " + JSON.stringify(got);
      await new Promise((r) => {{ waiting.push(r); setTimeout(r, 200); }});
    }}
  }};
  const open = () => sock.send('<open xmlns="' + F + '" to="{DOMAIN}" version="1.0"/>');
  open();
  const opened = await next((t) => t.startsWith("<open"), "open");
  const features = await next((t) => t.includes("features"), "features");
  sock.send('<auth xmlns="urn:ietf:params:xml:ns:xmpp-sasl" mechanism="PLAIN">' + btoa("\0web\0any") + "</auth>");
  await next((t) => t.includes("success"), "success");
  open();
  await next((t) => t.startsWith("<open"), "second open");
  await next((t) => t.includes("features"), "second features");
  sock.send('<iq xmlns="jabber:client" type="set" id="b1"><bind xmlns="urn:ietf:params:xml:ns:xmpp-bind"><resource>browser</resource></bind></iq>');
  const bound = await next((t) => t.startsWith("<iq"), "bind result");
  const jid = bound.getElementsByTagName("jid")[0].textContent;
  sock.send('<message xmlns="jabber:client" to="' + jid + '" id="m1"><body>over a WebSocket</body></message>');
  const echo = await next((t) => t.startsWith("<message"), "message");
  sock.send('<close xmlns="' + F + '"/>');
  const closed = await next((t) => t.startsWith("<close"), "close");
  return {{
    open: [opened.localName, opened.namespaceURI],
    features: [features.localName, features.namespaceURI],
    jid,
    message: [echo.namespaceURI, echo.getElementsByTagName("body")[0].textContent, echo.getAttribute("from")],
    close: closed.namespaceURI,
    messages: docs.length,
  }};
}})()"#
    );
    let r = b.eval_async(&script);
    assert!(r.get("rejected").is_none(), "{r}");
    assert_eq!(
        r["open"],
        json!(["open", "urn:ietf:params:xml:ns:xmpp-framing"]),
        "{r}"
    );
    assert_eq!(
        r["features"],
        json!(["features", "http://etherx.jabber.org/streams"]),
        "{r}"
    );
    let jid = r["jid"].as_str().unwrap();
    assert!(jid.starts_with("web@") && jid.ends_with("/browser"), "{r}");
    assert_eq!(
        r["message"],
        json!(["jabber:client", "over a WebSocket", jid]),
        "{r}"
    );
    assert_eq!(r["close"], "urn:ietf:params:xml:ns:xmpp-framing", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spate_ping_over_wss_times_the_upgrade_and_its_round_trips() {
    let running = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let target = format!(
        "xmpp+wss://{}/xmpp-websocket",
        running.addrs.xmpp_wss.unwrap()
    );
    let args = [
        "ping",
        &target,
        "--user",
        "user3@example.test",
        "-c",
        "3",
        "-w",
        "10ms",
        "--ca",
        ca.to_str().unwrap(),
    ];
    let env = vec![("SPATE_PASSWORD".to_string(), "s3cret".to_string())];
    let o = run_tool_env(
        SPATE,
        args.map(String::from).to_vec(),
        env.clone(),
        Duration::from_secs(60),
    )
    .await;
    assert!(o.ok, "exit {:?}\n{}\n{}", o.code, o.stdout, o.stderr);
    let login = o
        .stdout
        .lines()
        .find(|l| l.starts_with("login "))
        .unwrap_or_default();
    for phase in [
        "connect",
        "tls",
        "websocket",
        "stream",
        "auth",
        "bind",
        "presence",
    ] {
        assert!(
            login.contains(&format!(" {phase}=")),
            "{phase}: {}",
            o.stdout
        );
    }
    // Over WebSocket there is no STARTTLS: two streams (before and after SASL).
    assert_eq!(login.matches(" stream=").count(), 2, "{login}");
    assert!(
        o.stdout.contains("3 sent, 3 received, 0 lost, 0 failed"),
        "{}",
        o.stdout
    );
    // --tls means nothing over WebSocket: refused, as bad input.
    let mut bad = args.map(String::from).to_vec();
    bad.push("--tls".into());
    let o = run_tool_env(SPATE, bad, env, Duration::from_secs(60)).await;
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("xmpp+wss://"), "{o:?}");
    running.shutdown().await;
}
