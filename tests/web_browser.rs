//! The live view in a real browser: headless Chromium, driven over the DevTools protocol
//! (through a pipe: `--remote-debugging-pipe`), watches a run against `spate serve`: the
//! charts draw and are drawn again as the run goes on, no request leaves loopback, and
//! clicking pause, typing a rate and clicking stop change the run as its summary and
//! control.jsonl then show. Screenshots of the page at two moments are kept in
//! target/test-artifacts/ (their paths are in every failure message).

mod common;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use common::{serve_process, wait_bounded, Kill, SPATE};

/// A pipe whose ends are closed on exec (the child gets its end by dup2).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into an array of two.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both were just made and are owned here alone.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Chromium under the DevTools protocol: commands out on its fd 3, answers and events
/// in from its fd 4, NUL-separated JSON.
struct Browser {
    _child: Kill,
    to: std::fs::File,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// Events seen while waiting for answers.
    events: Vec<Value>,
}

impl Browser {
    fn start(profile: &Path) -> Browser {
        use std::os::fd::AsRawFd;
        let (child_reads, we_write) = pipe();
        let (we_read, child_writes) = pipe();
        let (r, w) = (child_reads.as_raw_fd(), child_writes.as_raw_fd());
        let mut cmd = Command::new("chromium");
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--remote-debugging-pipe",
            // Nothing resolves: no request can leave loopback even by mistake.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--window-size=1280,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = Kill(cmd.spawn().expect("start chromium"));
        drop((child_reads, child_writes));
        let (tx, rx) = mpsc::channel();
        let mut input = std::fs::File::from(we_read);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                let n = match input.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice(&msg[..msg.len() - 1]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Browser {
            _child: child,
            to: std::fs::File::from(we_write),
            from: rx,
            next_id: 1,
            session: None,
            events: Vec::new(),
        }
    }

    /// Sends a command (to the attached page, once there is one) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            self.answer_dialogs(&v);
            self.events.push(v);
        }
    }

    /// A `confirm()` the page opens is accepted, as a user would click OK.
    fn answer_dialogs(&mut self, v: &Value) {
        if v["method"] == "Page.javascriptDialogOpening" {
            let id = self.next_id;
            self.next_id += 1;
            let msg = json!({"id": id, "method": "Page.handleJavaScriptDialog",
                "params": {"accept": true}, "sessionId": v["sessionId"]});
            let mut bytes = serde_json::to_vec(&msg).unwrap();
            bytes.push(0);
            self.to.write_all(&bytes).unwrap();
        }
    }

    /// Takes in the events that came meanwhile.
    fn pump(&mut self) {
        while let Ok(v) = self.from.try_recv() {
            self.answer_dialogs(&v);
            self.events.push(v);
        }
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// Waits (at most 60 s) until `expr` is true in the page.
    fn wait_for(&mut self, expr: &str, why: &str) {
        let t0 = Instant::now();
        while self.eval(expr) != json!(true) {
            if t0.elapsed() > Duration::from_secs(60) {
                let url = self.eval("location.href");
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!("{why}: {expr}\nthe page at {url} says: {text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A mouse click in the middle of the element with this id, as a user's.
    fn click(&mut self, id: &str) {
        let r = self.eval(&format!(
            "(() => {{ const r = document.getElementById('{id}').getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        let (x, y) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}

#[test]
fn the_live_view_draws_updates_and_steers_the_run_in_chromium() {
    if !common::have("chromium") {
        return;
    }
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let mut run = Kill(
        Command::new(SPATE)
            .args(["smtp", &target, "--rate", "30/s", "--duration", "180s"])
            .args(["--web", "127.0.0.1:0", "-o", dir.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(tmp.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(tmp.path().join("stderr")).unwrap())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    let addr = loop {
        let web = std::fs::read_to_string(dir.join("web.json")).unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<Value>(&web) {
            break v["address"].as_str().unwrap().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no web.json");
        std::thread::sleep(Duration::from_millis(20));
    };

    let profile = tempfile::tempdir().unwrap();
    let mut b = Browser::start(profile.path());
    let targets = b.call("Target.getTargets", json!({}));
    let page = targets["targetInfos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "page")
        .expect("a page")["targetId"]
        .clone();
    let attached = b.call(
        "Target.attachToTarget",
        json!({"targetId": page, "flatten": true}),
    );
    b.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    b.call("Page.enable", json!({}));
    b.call("Network.enable", json!({}));
    b.call("Runtime.enable", json!({}));
    b.call("Page.navigate", json!({"url": format!("http://{addr}/")}));

    let (first, second) = (
        common::artifacts().join("web-1.png"),
        common::artifacts().join("web-2.png"),
    );
    let evidence = format!("screenshots: {} {}", first.display(), second.display());
    // The charts draw, from the report's own code.
    b.wait_for(
        "document.querySelectorAll('#report svg').length >= 4",
        &format!("no charts ({evidence})"),
    );
    b.screenshot(&first);
    // And are drawn again as the run goes on: the clock in the bar moves, and the
    // throughput chart's data changes.
    let chart = "document.querySelector('#report svg').outerHTML";
    let before = b.eval(chart);
    let state = b.eval("document.getElementById('state').textContent");
    b.wait_for(
        &format!(
            "document.getElementById('state').textContent != {state} && \
             document.querySelector('#report svg').outerHTML != {}",
            serde_json::to_string(&before).unwrap()
        ),
        &format!("the page was not drawn again ({evidence})"),
    );
    b.screenshot(&second);

    // Pause with the button; the status says so.
    b.click("pause");
    b.wait_for(
        "document.getElementById('state').textContent.startsWith('paused')",
        &format!("not paused ({evidence})"),
    );
    b.wait_for(
        "document.getElementById('resume').disabled === false",
        "resume stays disabled",
    );
    b.click("resume");
    b.wait_for(
        "document.getElementById('said').textContent == 'resumed'",
        "not resumed",
    );
    // A rate typed into the box.
    b.click("value");
    b.call("Input.insertText", json!({"text": "60/s"}));
    b.click("set");
    b.wait_for(
        "document.getElementById('said').textContent.startsWith('rate 60/s')",
        "the rate was not set",
    );
    // Stop, confirmed in the dialog: the run ends as after SIGTERM, and the page keeps
    // its final report.
    b.click("stop");
    let code = wait_bounded(&mut run.0, Duration::from_secs(90)).and_then(|s| s.code());
    assert_eq!(code, Some(143), "{evidence}");
    b.wait_for(
        "document.getElementById('state').textContent.startsWith('finished')",
        "the page did not show the end",
    );
    let final_body = b.eval("document.getElementById('report').innerHTML");
    assert!(
        final_body
            .as_str()
            .unwrap()
            .contains("stopped from its live view"),
        "{evidence}"
    );

    let s = common::summary(&dir);
    common::assert_every_unit_counted(&dir, &s);
    let actions: Vec<String> = std::fs::read_to_string(dir.join("control.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert!(v["by"].as_str().unwrap().ends_with("web"), "{v}");
            v["action"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(actions, ["pause", "resume", "rate", "stop"]);

    // Every request the page made went to the live view.
    b.pump();
    let urls: Vec<String> = b
        .events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .map(|e| {
            e["params"]["request"]["url"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(!urls.is_empty());
    let ours = format!("http://{addr}/");
    for u in &urls {
        assert!(u.starts_with(&ours), "a request left the live view: {u}");
    }
    let errors: Vec<&Value> = b
        .events
        .iter()
        .filter(|e| e["method"] == "Runtime.exceptionThrown")
        .collect();
    assert!(errors.is_empty(), "script errors: {errors:?}");
    eprintln!("{evidence}");
}
