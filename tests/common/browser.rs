//! Headless Chromium driven over the DevTools protocol through a pipe
//! (`--remote-debugging-pipe`: no WebSocket client needed), with every host name but
//! 127.0.0.1 unresolvable, so nothing a page does can leave loopback.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use super::Kill;

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
pub struct Browser {
    _child: Kill,
    to: std::fs::File,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// Events seen while waiting for answers.
    pub events: Vec<Value>,
}

impl Browser {
    pub fn start(profile: &Path) -> Browser {
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
    pub fn call(&mut self, method: &str, params: Value) -> Value {
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
    pub fn pump(&mut self) {
        while let Ok(v) = self.from.try_recv() {
            self.answer_dialogs(&v);
            self.events.push(v);
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// Waits (at most 60 s) until `expr` is true in the page.
    pub fn wait_for(&mut self, expr: &str, why: &str) {
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
    pub fn click(&mut self, id: &str) {
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

    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Attaches to the browser's page, with its Page, Network and Runtime events on.
    pub fn attach_page(&mut self) {
        let targets = self.call("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page")["targetId"]
            .clone();
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
        for domain in ["Page", "Network", "Runtime"] {
            self.call(&format!("{domain}.enable"), json!({}));
        }
    }

    /// The value of an expression that gives a promise, once it settles: its value, or what it was rejected with as `{"rejected": ...}`.
    pub fn eval_async(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        match r.get("exceptionDetails") {
            Some(e) => json!({"rejected": e}),
            None => r["result"]["value"].clone(),
        }
    }
}
