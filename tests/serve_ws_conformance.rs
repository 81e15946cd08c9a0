//! `spate serve`'s XMPP over WebSocket as a strict client (RFC 7395, RFC 6455) sees it:
//! no STARTTLS inside ws:// and a refused one ends cleanly, every end of a stream is a
//! `<close/>` and a WebSocket Close frame before TCP closes (never 1006), and the HTTP
//! refusals carry the fields RFC 6455 §4.4 and RFC 9110 want.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use spate::serve::{self, Addrs, Config, Running, Users};
use spate::transport::websocket::{self as ws, Control, Decoder};

const DOMAIN: &str = "example.test";
const FRAMING: &str = "urn:ietf:params:xml:ns:xmpp-framing";

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        xmpp_ws: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec![DOMAIN.to_string()];
    c.users = Users::parse(&format!("user0@{DOMAIN} s3cret\n")).unwrap();
    serve::start(c).await.unwrap()
}

/// Sends `request`, reads until the server closes the connection (a read that waits 10 s
/// fails the test: the server must close by itself).
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!(
                "the server did not close: {e}; got {}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

fn upgrade(key: &str) -> Vec<u8> {
    format!(
        "GET /xmpp-websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: xmpp\r\n\r\n"
    )
    .into_bytes()
}

/// A client's text frame (masked).
fn text(s: &str) -> Vec<u8> {
    ws::frame(ws::OP_TEXT, s.as_bytes(), Some([3, 1, 4, 1]))
}

fn open() -> Vec<u8> {
    text(&format!(
        "<open xmlns='{FRAMING}' to='{DOMAIN}' version='1.0'/>"
    ))
}

/// The server's text messages (concatenated) and control frames after its 101.
fn frames(bytes: &[u8]) -> (String, Vec<Control>) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer")
        + 4;
    assert!(
        bytes.starts_with(b"HTTP/1.1 101 "),
        "{}",
        String::from_utf8_lossy(bytes)
    );
    let mut rest = bytes[end..].to_vec();
    let (n, controls) = Decoder::new(false).decode(&mut rest, 0).unwrap();
    (String::from_utf8_lossy(&rest[..n]).into_owned(), controls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_offers_no_starttls_and_refuses_one_with_failure_close_and_close_frame() {
    let running = start().await;
    let addr = running.addrs.xmpp_ws.unwrap();
    let mut req = upgrade(&ws::new_key());
    req.extend(open());
    req.extend(text("<starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>"));
    let (text, controls) = frames(&exchange(addr, &req));
    assert!(text.contains("<stream:features"), "{text}");
    assert!(
        !text.contains("<starttls"),
        "starttls offered over ws://: {text}"
    );
    assert!(!text.contains("<proceed"), "{text}");
    assert!(
        text.contains("<failure xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>"),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("<close xmlns='{FRAMING}'/>")),
        "{text}"
    );
    assert!(
        matches!(controls.as_slice(), [Control::Close(Some(1000))]),
        "{controls:?}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_error_is_followed_by_close_and_a_close_frame() {
    let running = start().await;
    let addr = running.addrs.xmpp_ws.unwrap();
    let mut req = upgrade(&ws::new_key());
    req.extend(open());
    // A stanza before authentication: the stream error not-authorized.
    req.extend(text(
        "<iq xmlns='jabber:client' type='get' id='r1'><query xmlns='jabber:iq:roster'/></iq>",
    ));
    let (text, controls) = frames(&exchange(addr, &req));
    let error = text.find("<stream:error").expect("a stream error");
    assert!(text[error..].contains("not-authorized"), "{text}");
    assert!(
        text.ends_with(&format!("<close xmlns='{FRAMING}'/>")),
        "{text}"
    );
    assert!(
        matches!(controls.as_slice(), [Control::Close(Some(1000))]),
        "a Close frame before TCP closes, not 1006: {controls:?}"
    );
    assert_eq!(running.stats.xmpp().stream_errors, 1);

    // A client that breaks the framing (an unmasked frame) gets Close 1002.
    let mut req = upgrade(&ws::new_key());
    req.extend(ws::frame(ws::OP_TEXT, b"<open/>", None));
    let (_, controls) = frames(&exchange(addr, &req));
    assert!(
        matches!(controls.as_slice(), [Control::Close(Some(1002))]),
        "{controls:?}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_upgrade_and_the_version() {
    let running = start().await;
    let addr = running.addrs.xmpp_ws.unwrap();
    let head = |bytes: Vec<u8>| {
        let s = String::from_utf8_lossy(&bytes).into_owned();
        s[..s.find("\r\n\r\n").unwrap()].to_ascii_lowercase()
    };
    let plain = head(exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(plain.starts_with("http/1.1 426 "), "{plain}");
    assert!(plain.contains("\r\nupgrade: websocket"), "{plain}");
    assert!(plain.contains("\r\nconnection: upgrade"), "{plain}");
    let old = String::from_utf8(upgrade(&ws::new_key()))
        .unwrap()
        .replace("Version: 13", "Version: 8");
    let old = head(exchange(addr, old.as_bytes()));
    assert!(old.starts_with("http/1.1 426 "), "{old}");
    assert!(old.contains("\r\nsec-websocket-version: 13"), "{old}");
    let post = head(exchange(addr, b"POST / HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(post.starts_with("http/1.1 405 "), "{post}");
    assert!(post.contains("\r\nallow: get"), "{post}");
    running.shutdown().await;
}

/// @xmpp/client (the XMPP client library for Node.js and browsers) over ws://: a session
/// that ends cleanly, and a stream error that reaches it with `not-well-formed` and a
/// Close frame (code 1000, not 1006). scripts/test installs it in target/tools/js (npm
/// install @xmpp/client@0.14.0 ws@8); missing, the test fails through common::cannot_run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_xmpp_client_library_ends_cleanly_even_after_a_stream_error() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/js");
    if !common::have("node") || !dir.join("node_modules/@xmpp/client").is_dir() {
        common::cannot_run("@xmpp/client is not installed in target/tools/js");
        return;
    }
    let running = start().await;
    let url = format!("ws://{}/xmpp-websocket", running.addrs.xmpp_ws.unwrap());
    // Written next to its node_modules, so that its imports resolve there.
    let script = dir.join("xmpp-check.mjs");
    std::fs::write(&script, XMPP_CHECK).unwrap();
    let o = common::run_tool_env(
        "node",
        [script.to_str().unwrap(), &url, DOMAIN, "user0", "s3cret"]
            .map(String::from)
            .to_vec(),
        vec![],
        Duration::from_secs(60),
    )
    .await;
    assert!(
        o.ok && o.stdout.contains("\n0 failed"),
        "{}\n{}",
        o.stdout,
        o.stderr
    );
    running.shutdown().await;
}

const XMPP_CHECK: &str = r##"import { WebSocket } from "ws";
globalThis.WebSocket ??= WebSocket;
const { client, xml } = await import("@xmpp/client");
const [service, domain, user, password] = process.argv.slice(2);
const timer = setTimeout(() => { console.log("FAIL timeout"); process.exit(2); }, 30000);
let failed = 0;
const check = (ok, what) => { console.log(`${ok ? "ok  " : "FAIL"} ${what}`); if (!ok) failed++; };

// One session: log in, a message to itself, then the client closes.
function session(broken) {
  return new Promise((resolve) => {
    const xmpp = client({ service, domain, username: user, password, resource: broken ? "b" : "a" });
    xmpp.reconnect.stop();
    let condition = null;
    xmpp.on("error", (e) => { condition = e?.condition ?? String(e); });
    xmpp.on("disconnect", ({ clean, reason }) => {
      resolve({ clean, code: reason?.code, condition });
    });
    xmpp.on("stanza", async (st) => {
      if (st.is("message") && st.getChildText("body") === "ping") await xmpp.stop();
    });
    xmpp.on("online", async (jid) => {
      if (broken) {
        // Not well-formed: the server's stream error, <close/>, a Close frame.
        xmpp.socket.write("<message><body>x</message>");
      } else {
        await xmpp.send(xml("message", { to: jid.toString(), type: "chat" }, xml("body", {}, "ping")));
      }
    });
    xmpp.start().catch((e) => { condition = condition ?? String(e); });
  });
}
const a = await session(false);
check(a.clean && a.condition === null, `a session logs in and ends cleanly: ${JSON.stringify(a)}`);
const b = await session(true);
check(b.clean && b.code === 1000 && b.condition === "not-well-formed",
      `a stream error ends with a Close frame: ${JSON.stringify(b)}`);
clearTimeout(timer);
console.log(`${failed} failed`);
process.exit(failed ? 1 : 0);
"##;
