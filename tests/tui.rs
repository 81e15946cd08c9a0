//! `--tui` on a pseudo-terminal, as a person sees it: the screen is rebuilt from what the
//! dashboard writes (cursor moves and cells), the keys are typed, and the terminal must be
//! put back afterwards. The last screen seen is kept in target/test-artifacts/tui-screen.txt,
//! the raw output in tui.txt.

mod common;

use std::process::Command;
use std::time::Duration;

use common::SPATE;
use spate::serve;

/// `spate ARGS` on a pseudo-terminal of 80×24 (stdin, stdout and stderr): the child, the
/// master side to type into, and everything the child writes, as it comes.
struct Pty {
    child: std::process::Child,
    master: std::fs::File,
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    screen: Vec<u8>,
}

impl Pty {
    fn spawn(args: &[&str]) -> Pty {
        use std::io::Read;
        use std::os::fd::{FromRawFd, OwnedFd};
        let (mut master, mut slave) = (0, 0);
        let ws = libc::winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two fds we then own, and reads the winsize we pass.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &ws,
            )
        };
        assert_eq!(rc, 0, "openpty");
        let slave = unsafe { OwnedFd::from_raw_fd(slave) };
        let master = unsafe { std::fs::File::from_raw_fd(master) };
        let child = Command::new(SPATE)
            .args(args)
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .unwrap();
        let mut reader = master.try_clone().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends when the child's side closes (EIO) — the tests wait for the child.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Pty {
            child,
            master,
            rx,
            screen: Vec::new(),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// The 80×24 screen as the dashboard left it, one string per row: ratatui writes only
    /// the cells that change, between cursor moves, so the raw output is no picture of it.
    /// Follows cursor positioning and the clearing of the screen and of lines, skips other
    /// escapes, and stops where the alternate screen is left.
    fn rows(&self) -> Vec<String> {
        let mut grid = vec![vec![' '; 80]; 24];
        let (mut row, mut col) = (0usize, 0usize);
        let text = self.text();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\x1b' => {
                    if chars.peek() != Some(&'[') {
                        chars.next();
                        continue;
                    }
                    chars.next();
                    let mut params = String::new();
                    let fin = loop {
                        match chars.next() {
                            Some(c) if ('@'..='~').contains(&c) => break c,
                            Some(c) => params.push(c),
                            None => break ' ',
                        }
                    };
                    match (fin, params.as_str()) {
                        ('H', p) => {
                            let mut it = p.split(';').map(|n| n.parse::<usize>().unwrap_or(1));
                            row = it.next().unwrap_or(1).saturating_sub(1);
                            col = it.next().unwrap_or(1).saturating_sub(1);
                        }
                        ('J', "2") => grid = vec![vec![' '; 80]; 24],
                        ('J', "" | "0") => {
                            for (y, r) in grid.iter_mut().enumerate().skip(row) {
                                let from = if y == row { col.min(80) } else { 0 };
                                r[from..].fill(' ');
                            }
                        }
                        ('K', "" | "0" | "2") if row < 24 => {
                            let from = if params == "2" { 0 } else { col.min(80) };
                            grid[row][from..].fill(' ');
                        }
                        ('l', "?1049") => break,
                        _ => {}
                    }
                }
                '\r' => col = 0,
                '\n' => row += 1,
                c if !c.is_control() => {
                    if row < 24 && col < 80 {
                        grid[row][col] = c;
                    }
                    col += 1;
                }
                _ => {}
            }
        }
        grid.into_iter().map(|r| r.into_iter().collect()).collect()
    }

    /// Reads until the screen shows everything in `want`, or 30 s; the screen's rows.
    fn wait_for(&mut self, want: &[&str]) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(b) = self.rx.recv_timeout(Duration::from_millis(200)) {
                self.screen.extend(b);
            }
            let rows = self.rows();
            let s = rows.join("\n");
            if want.iter().all(|w| s.contains(w)) {
                return rows;
            }
        }
        panic!("never saw all of {want:?}:\n{}", self.rows().join("\n"));
    }

    fn type_keys(&self, keys: &[u8]) {
        use std::io::Write;
        (&self.master).write_all(keys).unwrap();
    }

    /// Waits for the child to end (50 s at most), then reads what it wrote last.
    fn wait(&mut self, what: &str) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if started.elapsed() > Duration::from_secs(50) {
                let _ = self.child.kill();
                panic!("{what} did not stop the run");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(b) = self.rx.recv_timeout(Duration::from_millis(300)) {
            self.screen.extend(b);
        }
        status
    }

    /// The terminal was put back: the alternate screen left after it was last entered, the
    /// text summary after it, canonical mode and echo on again.
    fn assert_restored(&self) {
        use std::os::fd::AsRawFd;
        let text = self.text();
        let leave = text
            .rfind("\x1b[?1049l")
            .expect("left the alternate screen");
        assert!(leave > text.rfind("\x1b[?1049h").unwrap());
        assert!(text[leave..].contains("accepted"), "{:?}", &text[leave..]);
        // SAFETY: tcgetattr on the master reads the pty's settings into our struct.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut t) },
            0
        );
        assert!(t.c_lflag & libc::ICANON != 0, "canonical mode restored");
        assert!(t.c_lflag & libc::ECHO != 0, "echo restored");
    }
}

/// `--tui` on a pseudo-terminal: the dashboard draws (gauge, percentiles, histogram,
/// errors with their rate, in SMTP's words), `p` pauses and resumes drawing, `q` stops the
/// run cleanly before its planned end, the results are complete, and the terminal is put
/// back (alternate screen left, canonical mode and echo on again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tui_draws_quits_on_q_and_restores_the_terminal() {
    let mut cfg = serve::Config::loopback();
    cfg.faults
        .fails
        .push(serve::faults::parse_fail("rcpt:451:0.1").unwrap());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let started = std::time::Instant::now();
    let mut pty = Pty::spawn(&[
        "smtp",
        &addr,
        "--users",
        "2",
        "-d",
        "60s",
        "--tui",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Three seconds drawn, with the errors of the 451s.
    let rows = pty.wait_for(&["transaction", "451 4.3.0", "elapsed 0:00:03 of 0:01:00"]);
    let screen = rows.join("\n");
    std::fs::write(common::artifacts().join("tui-screen.txt"), &screen).unwrap();
    assert!(pty.text().contains("\x1b[?1049h"), "alternate screen");
    for want in [
        "spate — SMTP load on",
        "active sessions",
        "p99",
        "errors by class · error rate",
        "rcpt 451 4.3.0",
        "msg/s now",
        "messages: attempted",
        "▸ transaction",
        "transaction: histogram, log scale",
        "≤",
        "q stop  p pause  Tab/←→ phase  ? help  Ctrl-C interrupt",
    ] {
        assert!(screen.contains(want), "{want}:\n{screen}");
    }
    assert!(rows[1].contains('█'), "the gauge: {}", rows[1]);
    pty.type_keys(b"p");
    pty.wait_for(&["PAUSED"]);
    pty.type_keys(b"?");
    pty.wait_for(&["pause or resume drawing"]);
    pty.type_keys(b"?p");
    pty.wait_for(&["q stop  p pause"]);
    pty.type_keys(b"q");
    let status = pty.wait("q");
    std::fs::write(common::artifacts().join("tui.txt"), pty.text()).unwrap();
    // q stops the run as Ctrl-C does: interrupted, exit 130, everything written.
    assert_eq!(status.code(), Some(130), "{}", pty.text());
    pty.assert_restored();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["complete"], true);
    assert_eq!(s["interrupted"], true);
    assert_eq!(s["interrupted_by"], "q");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    assert!(s["totals"]["accepted"].as_u64().unwrap() > 0);
    assert!(out.join("report.html").is_file());
    server.shutdown().await;
}

/// Ctrl-C under `--tui` (a key in raw mode, not a signal from the terminal) interrupts the
/// run as it does without the dashboard: SIGINT, exit 130, the terminal put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tui_ctrl_c_interrupts_as_without_the_dashboard() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let mut pty = Pty::spawn(&[
        "smtp",
        &addr,
        "--users",
        "2",
        "-d",
        "60s",
        "--tui",
        "-o",
        out.to_str().unwrap(),
    ]);
    pty.wait_for(&["transaction", "elapsed 0:00:02"]);
    pty.type_keys(b"\x03");
    let status = pty.wait("Ctrl-C");
    assert_eq!(status.code(), Some(130), "{}", pty.text());
    pty.assert_restored();
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["interrupted_by"], "SIGINT");
    server.shutdown().await;
}
