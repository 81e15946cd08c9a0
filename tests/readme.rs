//! The documentation (README.md, the book in docs/, and the other Markdown files of the
//! repository) renders and reads as written: every code fence is closed, every link to a
//! file resolves inside the repository and every `#anchor` to a heading there, every
//! chapter is in the book's SUMMARY, every `spate` command in a shell block parses as
//! spate's own command line would parse it, and the reference chapter is what
//! `spate man --markdown` prints.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// Every Markdown file of the repository that a reader may open (not target/ or fuzz's
/// build directories).
fn docs() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut v = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for dir in ["docs", "scenarios", "bench", "fuzz", "scripts", "examples"] {
        walk(&root.join(dir), &mut v);
    }
    v.sort();
    v
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() && !matches!(name.as_str(), "target" | "corpus" | "artifacts" | "results") {
            walk(&p, out);
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// A file's lines with whether each is inside a code block, and the language of the
/// block for its lines (None outside).
fn blocks(text: &str) -> Vec<(&str, Option<String>)> {
    let mut open: Option<String> = None;
    let mut v = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            open = match open {
                None => Some(lang.trim().to_string()),
                Some(_) => None,
            };
            v.push((line, None));
        } else {
            v.push((line, open.clone()));
        }
    }
    v
}

#[test]
fn fences_are_closed() {
    let files = docs();
    assert!(files.len() >= 20, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut open: Option<usize> = None;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                open = match open {
                    None => Some(i + 1),
                    Some(_) => None,
                };
            }
            // A heading inside a code block is a sign of a fence left open above it.
            if let Some(at) = open {
                assert!(
                    !line.starts_with("## "),
                    "{}:{}: heading inside the code block opened at line {at}",
                    f.display(),
                    i + 1
                );
            }
        }
        assert!(
            open.is_none(),
            "{}: code fence opened at line {} is never closed",
            f.display(),
            open.unwrap()
        );
    }
}

/// The `](target)` links of a line outside code (inline code spans left out).
fn links(line: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            plain.push(c);
        }
    }
    let mut v = Vec::new();
    let mut rest = plain.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        v.push(after[..end].to_string());
        rest = &after[end..];
    }
    v
}

/// The anchors of a Markdown file's headings, as GitHub and mdBook make them.
fn anchors(text: &str) -> Vec<String> {
    blocks(text)
        .into_iter()
        .filter(|(_, code)| code.is_none())
        .filter_map(|(l, _)| {
            l.strip_prefix('#')
                .map(|h| h.trim_start_matches('#').trim())
        })
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn links_resolve_inside_the_repository() {
    let root = std::fs::canonicalize(ROOT).unwrap();
    let mut checked = 0;
    for f in docs() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, (line, code)) in blocks(&text).into_iter().enumerate() {
            if code.is_some() {
                continue;
            }
            for link in links(line) {
                let at = format!("{}:{}: ({link})", f.display(), n + 1);
                if link.starts_with("http://") || link.starts_with("https://") {
                    continue;
                }
                assert!(!link.is_empty(), "{at}: an empty link");
                let (path, anchor) = match link.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (link.as_str(), None),
                };
                let target = if path.is_empty() {
                    f.clone()
                } else {
                    f.parent().unwrap().join(path)
                };
                let Ok(target) = std::fs::canonicalize(&target) else {
                    panic!("{at}: no such file");
                };
                assert!(target.starts_with(&root), "{at}: outside the repository");
                // The manual is a book (and in the package) of docs/ alone: a link out of
                // it is dead there.
                if f.starts_with(root.join("docs")) {
                    assert!(
                        target.starts_with(root.join("docs")),
                        "{at}: leaves docs/, dead in the book and the package"
                    );
                }
                if let Some(a) = anchor {
                    let t = std::fs::read_to_string(&target).unwrap();
                    assert!(anchors(&t).iter().any(|h| h == a), "{at}: no heading #{a}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 50, "only {checked} links: are the docs there?");
}

/// What mdBook would warn about or mangle in the manual, checked without it: an HTML-like
/// `<placeholder>` outside code (mdBook takes it for an unclosed tag and drops it:
/// `spate_<name>_total` read `spate__total`), and smart punctuation, which turned 220
/// option names into `–rate`.
#[test]
fn the_manual_has_no_stray_tags_and_keeps_its_dashes() {
    let book = std::fs::read_to_string(Path::new(ROOT).join("docs/book.toml")).unwrap();
    assert!(
        book.lines()
            .any(|l| l.trim() == "smart-punctuation = false"),
        "docs/book.toml: smart-punctuation must be off"
    );
    let tag = regex::Regex::new(r"<[a-zA-Z][a-zA-Z0-9_-]*>").unwrap();
    for f in docs() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, (line, code)) in blocks(&text).into_iter().enumerate() {
            if code.is_some() {
                continue;
            }
            // Code spans are shown as they are.
            let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            for m in tag.find_iter(&prose) {
                let t = m.as_str();
                if [
                    "<br>",
                    "<b>",
                    "<i>",
                    "<code>",
                    "<details>",
                    "<summary>",
                    "<kbd>",
                ]
                .contains(&t)
                {
                    continue;
                }
                panic!(
                    "{}:{}: {t} outside code is an HTML tag to mdBook",
                    f.display(),
                    n + 1
                );
            }
        }
    }
}

#[test]
fn every_chapter_is_in_the_summary() {
    let docs_dir = Path::new(ROOT).join("docs");
    let summary = std::fs::read_to_string(docs_dir.join("SUMMARY.md")).unwrap();
    let listed: Vec<PathBuf> = summary
        .lines()
        .flat_map(links)
        .map(|l| docs_dir.join(l))
        .collect();
    assert!(listed.len() >= 20, "{listed:?}");
    for l in &listed {
        assert!(
            l.is_file(),
            "SUMMARY.md lists {}, which is not there",
            l.display()
        );
    }
    let mut chapters = Vec::new();
    walk(&docs_dir, &mut chapters);
    for c in chapters {
        if c.file_name().unwrap() != "SUMMARY.md" {
            assert!(listed.contains(&c), "{} is not in SUMMARY.md", c.display());
        }
    }
}

/// The value a `$VARIABLE` stands for when a command is parsed: an address for the
/// bed's addresses, a word for the rest.
fn stand_in(var: &str) -> &'static str {
    match var {
        "SPATE_SMTP" | "SPATE_SUBMISSION" | "SPATE_LMTP" | "SPATE_IMAP" | "SPATE_POP3"
        | "SPATE_XMPP" | "SPATE_XMPPS" | "SPATE_IMAPS" | "SPATE_POP3S" | "SPATE_AUTHZ" => {
            "127.0.0.1:2525"
        }
        v if v.ends_with("PORT") => "2525",
        v if v.ends_with("PID") => "1234",
        _ => "x",
    }
}

/// A shell word with its `$VAR`, `${VAR}`, `$((…))` and `$(…)` replaced by stand-ins.
fn expand(word: &str) -> String {
    let mut out = String::new();
    let b = word.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'(' {
                // $(…) or $((…)): to its matching parenthesis.
                let mut depth = 0;
                let mut j = i + 1;
                while j < b.len() {
                    match b[j] {
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                out.push_str(if b.get(i + 2) == Some(&b'(') {
                    "100"
                } else {
                    "x"
                });
                i = j + 1;
                continue;
            }
            let braced = b[i + 1] == b'{';
            let start = if braced { i + 2 } else { i + 1 };
            let mut j = start;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if j > start {
                out.push_str(stand_in(&word[start..j]));
                i = if braced {
                    word[j..].find('}').map_or(b.len(), |k| j + k + 1)
                } else {
                    j
                };
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// The `spate` command lines of a shell block's text: continuations joined, comments
/// dropped, pipelines and lists split, variable assignments before the command and
/// redirections after it left out; `cargo run … --` counts as `spate`.
fn commands(block: &str) -> Vec<Vec<String>> {
    let joined = block.replace("\\\n", " ");
    let mut v = Vec::new();
    for line in joined.lines() {
        let Some(words) = shlex::split(line) else {
            continue; // not shell a reader would type as is (a `…` placeholder, say)
        };
        let mut words: Vec<String> = words
            .into_iter()
            .take_while(|w| !w.starts_with('#'))
            .collect();
        words.push(";".into());
        let mut cmd: Vec<String> = Vec::new();
        for w in words {
            if matches!(w.as_str(), "&&" | "||" | "|" | ";") {
                let mut c = std::mem::take(&mut cmd);
                while c.first().is_some_and(|w| {
                    w.contains('=')
                        && !w.starts_with('-')
                        && w.split('=')
                            .next()
                            .unwrap()
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_')
                }) {
                    c.remove(0);
                }
                if c.first().map(String::as_str) == Some("cargo")
                    && c.get(1).map(String::as_str) == Some("run")
                {
                    if let Some(at) = c.iter().position(|w| w == "--") {
                        c.splice(..=at, ["spate".to_string()]);
                    }
                }
                if c.first().map(String::as_str) == Some("spate") {
                    let end = c
                        .iter()
                        .position(|w| {
                            w.starts_with('>')
                                || w.starts_with('<')
                                || w.starts_with("2>")
                                || w == "&"
                        })
                        .unwrap_or(c.len());
                    c.truncate(end);
                    v.push(c.iter().map(|w| expand(w)).collect());
                }
            } else {
                cmd.push(w);
            }
        }
    }
    v
}

#[test]
fn every_spate_command_in_a_shell_block_parses() {
    let mut parsed = 0;
    let mut wrong = Vec::new();
    for f in docs() {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut block = String::new();
        let mut start = 0;
        for (n, (line, code)) in blocks(&text).into_iter().enumerate() {
            match code.as_deref() {
                Some("sh" | "bash" | "shell" | "console") => {
                    if block.is_empty() {
                        start = n + 1;
                    }
                    block.push_str(line.trim_start_matches("$ "));
                    block.push('\n');
                }
                _ if !block.is_empty() => {
                    for c in commands(&block) {
                        match spate::cli::parse(&c) {
                            Ok(_) => {}
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    clap::error::ErrorKind::DisplayHelp
                                        | clap::error::ErrorKind::DisplayVersion
                                        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                                ) => {}
                            Err(e) => wrong.push(format!(
                                "{}: the block at line {start}: `{}` does not parse: {}",
                                f.display(),
                                c.join(" "),
                                e.to_string().lines().next().unwrap_or_default()
                            )),
                        }
                        parsed += 1;
                    }
                    block.clear();
                }
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        parsed >= 100,
        "only {parsed} spate commands found in the docs"
    );
}

#[test]
fn the_command_finder_finds_what_a_reader_would_type() {
    let c = commands(
        "SPATE_PASSWORD=x spate smtp $SPATE_SMTP -n $((100*4)) \\\n  --to 'a b' > out.txt  # note\n\
         scripts/testbed up && cargo run --release -- demo | tee log\n\
         spate man | man -l -\n",
    );
    assert_eq!(
        c,
        [
            vec![
                "spate",
                "smtp",
                "127.0.0.1:2525",
                "-n",
                "100",
                "--to",
                "a b"
            ],
            vec!["spate", "demo"],
            vec!["spate", "man"],
        ]
    );
}

#[test]
fn the_reference_chapter_is_what_spate_man_markdown_prints() {
    let o = std::process::Command::new(SPATE)
        .args(["man", "--markdown"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let now = String::from_utf8(o.stdout).unwrap();
    let file = Path::new(ROOT).join("docs/reference.md");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written == now,
        "docs/reference.md is out of step with the options: \
         cargo run -- man --markdown > docs/reference.md"
    );
    // It names every command and some options of each.
    for c in [
        "smtp", "pop3", "imap", "xmpp", "rr", "serve", "verify", "sweep", "merge",
    ] {
        assert!(now.contains(&format!("\n## spate {c}\n")), "{c}");
    }
    assert!(now.contains("`--users, -u <N>`"), "{now}");
}
