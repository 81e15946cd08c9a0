//! The Debian package: `scripts/deb` builds it (from the debug build the tests use), it is
//! lintian-clean, it installs with `dpkg -i`, the installed `spate` runs (its version,
//! its manual page through `man -l`, a short demo), its completions and examples are where
//! Debian keeps them, and `dpkg -r` removes it again. A spate package that was installed
//! before is not this test's to replace: the test refuses to run then.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs `cmd` (bounded in time): whether it succeeded, and what it printed.
fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    let o = common::run_blocking(cmd, args, &[], Duration::from_secs(600));
    (o.ok, format!("{}{}", o.stdout, o.stderr))
}

/// Removes the package this test installed, whatever happens to the test.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["-r", "spate"]).output();
    }
}

#[test]
fn the_debian_package_installs_runs_and_removes() {
    for tool in ["cargo-deb", "dpkg", "lintian", "man"] {
        if !common::have(tool) {
            return;
        }
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        common::cannot_run("installing a package needs root");
        return;
    }
    let (_, status) = run("dpkg-query", &["-W", "-f=${Status}", "spate"]);
    assert!(
        !status.contains("install ok installed"),
        "a spate package is installed on this machine: this test would replace and remove it"
    );
    assert!(
        !Path::new("/usr/bin/spate").exists(),
        "/usr/bin/spate is there already"
    );

    let tmp = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: made (cargo-deb alone wrote a file of its name).
    let out_dir = tmp.path().join("debs").join("new");
    let dir = out_dir.to_str().unwrap();
    let (ok, said) = run(
        "bash",
        &[
            &format!("{ROOT}/scripts/deb"),
            "--profile",
            "dev",
            "--output",
            dir,
        ],
    );
    assert!(ok, "scripts/deb: {said}");
    assert!(
        out_dir.is_dir(),
        "--output {dir} is not a directory: {said}"
    );
    let deb = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .unwrap_or_else(|| panic!("no .deb in {dir}: {said}"));
    let deb = deb.to_str().unwrap();

    // Lintian: no error or warning (the one override is explained in Cargo.toml).
    let (_, said) = run("lintian", &[deb]);
    let tags: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("W: "))
        .collect();
    assert!(tags.is_empty(), "lintian: {}", tags.join("\n"));

    let (ok, said) = run("dpkg", &["-i", deb]);
    let installed = Installed;
    assert!(ok, "dpkg -i: {said}");

    let (ok, version) = run("/usr/bin/spate", &["--version"]);
    assert!(ok, "{version}");
    assert!(
        version.starts_with(&format!("spate {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let (ok, page) = run(
        "man",
        &["-l", "-P", "cat", "/usr/share/man/man1/spate-smtp.1.gz"],
    );
    assert!(ok, "{page}");
    assert!(
        page.contains("spate-smtp") && page.contains("--users"),
        "{page}"
    );
    for f in [
        "/usr/share/man/man1/spate.1.gz",
        "/usr/share/bash-completion/completions/spate",
        "/usr/share/zsh/vendor-completions/_spate",
        "/usr/share/fish/vendor_completions.d/spate.fish",
        "/usr/share/doc/spate/copyright",
        "/usr/share/doc/spate/examples/scenarios/inject-embedded.toml",
        "/usr/share/doc/spate/examples/grafana/spate.json",
        "/usr/share/doc/spate/manual/getting-started.md",
    ] {
        assert!(Path::new(f).is_file(), "{f} is not installed");
    }
    let results = tempfile::tempdir().unwrap();
    let demo_out = results.path().join("demo");
    let (ok, said) = run(
        "/usr/bin/spate",
        &[
            "demo",
            "--seconds",
            "2",
            "-q",
            "-o",
            demo_out.to_str().unwrap(),
        ],
    );
    assert!(ok, "the installed spate's demo: {said}");
    assert!(demo_out.is_dir(), "{said}");

    drop(installed);
    assert!(
        !Path::new("/usr/bin/spate").exists(),
        "dpkg -r left /usr/bin/spate"
    );
    let (_, status) = run("dpkg-query", &["-W", "-f=${Status}", "spate"]);
    assert!(!status.contains("install ok installed"), "{status}");
}

/// The crate as `cargo package` (and so `cargo publish`) would pack it: the sources, the
/// manual and the examples, and none of the repository's benchmark results, fuzzing
/// workspace or CI files.
#[test]
fn the_crate_package_holds_the_sources_and_not_the_benchmark_results() {
    let (ok, said) = run(
        "cargo",
        &[
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "--manifest-path",
            &format!("{ROOT}/Cargo.toml"),
        ],
    );
    assert!(ok, "{said}");
    let files: Vec<&str> = said.lines().collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "build.rs",
        "src/main.rs",
        "src/lib.rs",
        "docs/SUMMARY.md",
        "examples/grafana/spate.json",
    ] {
        assert!(files.contains(&needed), "{needed} is not packed: {said}");
    }
    for f in &files {
        for not in [
            "bench/results/",
            "fuzz/",
            ".ci/",
            "target/",
            "spate-results/",
        ] {
            assert!(!f.starts_with(not), "{f} is packed");
        }
    }
}
