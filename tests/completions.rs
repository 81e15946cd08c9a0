//! `spate completions` and `spate man`: generated from the clap definitions, valid for
//! their shells and for groff, and they know the current option names.

mod common;

use std::process::Command;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn stdout(args: &[&str]) -> String {
    let o = Command::new(SPATE).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Runs a shell's syntax check on a script; the shell must be installed (scripts/test
/// installs zsh and fish).
fn syntax_ok(shell: &str, check: &[&str], script: &std::path::Path) {
    if !common::have(shell) {
        return;
    }
    let o = Command::new(shell)
        .args(check)
        .arg(script)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{shell}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn completions_are_valid_scripts_that_complete_current_names() {
    let d = tempfile::tempdir().unwrap();
    for (shell, check) in [
        ("bash", &["-n"][..]),
        ("zsh", &["-n"][..]),
        ("fish", &["--no-execute"][..]),
    ] {
        let text = stdout(&["completions", shell]);
        for name in [
            "smtp",
            "imap",
            "users-file",
            "dump-scenario",
            "max-in-flight",
        ] {
            assert!(text.contains(name), "{shell} lacks {name}");
        }
        let path = d.path().join(format!("spate.{shell}"));
        std::fs::write(&path, &text).unwrap();
        syntax_ok(shell, check, &path);
    }
    // bash really completes an option of the command being typed.
    let script = d.path().join("spate.bash");
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(spate imap --users-f); COMP_CWORD=2; \
             _spate spate --users-f imap; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "--users-file");
    let o = Command::new(SPATE)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn man_pages_render_for_every_command() {
    let page = stdout(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH spate 1"),
        "{page}"
    );
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let said = stdout(&["man", "--dir", dir]);
    assert!(said.starts_with("wrote 23 pages"), "{said}");
    for cmd in [
        "smtp",
        "pop3",
        "imap",
        "rr",
        "ping",
        "serve",
        "sweep",
        "verify",
        "merge",
        "run",
        "report",
        "ctl",
        "watch",
        "jmap",
        "population",
        "capacity",
    ] {
        let path = d.path().join(format!("spate-{cmd}.1"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!(".TH SPATE-{}", cmd.to_uppercase())),
            "{cmd}"
        );
        assert!(
            text.contains("\\fB\\-\\-dump\\-scenario\\fR")
                != matches!(cmd, "run" | "ctl" | "watch"),
            "{cmd}"
        );
        if !common::have("groff") {
            continue;
        }
        // -k: through preconv, as man does; -ww: every warning.
        let o = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let smtp = std::fs::read_to_string(d.path().join("spate-smtp.1")).unwrap();
    assert!(smtp.contains("users\\-file"), "{smtp}");
    let o = Command::new(SPATE)
        .args(["man", "--dir", "/nonexistent/spate-man"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
