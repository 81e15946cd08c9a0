//! The live view in a real browser: headless Chromium, driven over the DevTools protocol
//! (through a pipe: `--remote-debugging-pipe`), watches a run against `spate serve`: the
//! charts draw and are drawn again as the run goes on, no request leaves loopback, and
//! clicking pause, typing a rate and clicking stop change the run as its summary and
//! control.jsonl then show. Screenshots of the page at two moments are kept in
//! target/test-artifacts/ (their paths are in every failure message).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::browser::Browser;
use common::{serve_process, wait_bounded, Kill, SPATE};

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
    b.attach_page();
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
