//! The layering holds: no two of the crate's top-level modules (nor two modules of
//! `spate serve`) depend on each other,
//! directly or around a loop, in code that is not a test. Read from the sources: a
//! module depends on another when it names `crate::other`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The Rust files of a module (a file, or a directory with its files), each with how
/// deep below the module's parent it sits (0: `m.rs` or `m/mod.rs`), test code left out:
/// a `tests.rs`, and what follows `#[cfg(test)]` in a file.
fn sources(module: &Path, depth: usize, out: &mut Vec<(String, usize)>) {
    if module.is_dir() {
        for e in std::fs::read_dir(module).unwrap().flatten() {
            let p = e.path();
            let d = if p.file_name().unwrap() == "mod.rs" {
                depth
            } else {
                depth + 1
            };
            sources(&p, d, out);
        }
    } else if module.extension().is_some_and(|x| x == "rs")
        && module.file_name().unwrap() != "tests.rs"
    {
        let text = std::fs::read_to_string(module).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap().to_string();
        out.push((code, depth));
    }
}

/// The names a path prefix reaches in `code`: `prefix::name` and `prefix::{a, b::c}`.
fn reached(code: &str, prefix: &str) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        // `super::x` must not be the tail of `super::super::x`.
        if prefix.starts_with("super") && code[..at].ends_with("::") {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            found.extend(group.split(',').map(|g| word(g.trim())));
        } else {
            found.insert(word(rest));
        }
    }
    found
}

/// The modules of `dir` (of the crate's module `path`, "crate" for src/) and what each
/// names of its siblings.
fn graph_of(dir: &Path, path: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !matches!(name.as_str(), "lib" | "main" | "mod" | "tests") {
            names.insert(name);
        }
    }
    let mut g = BTreeMap::new();
    for m in &names {
        let mut texts = Vec::new();
        if dir.join(m).is_dir() {
            sources(&dir.join(m), 0, &mut texts);
        }
        if dir.join(format!("{m}.rs")).is_file() {
            sources(&dir.join(format!("{m}.rs")), 0, &mut texts);
        }
        let mut deps = BTreeSet::new();
        for (t, depth) in texts {
            let mut prefixes = vec![format!("{path}::")];
            if path != "crate" {
                prefixes.push(format!("{}::", vec!["super"; depth + 1].join("::")));
            }
            for p in prefixes {
                deps.extend(
                    reached(&t, &p)
                        .into_iter()
                        .filter(|n| names.contains(n) && n != m),
                );
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(Path::new(SRC), "crate")
}

fn loops(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    g.keys()
        .filter_map(|m| cycle(g, m))
        .map(|p| p.join(" -> "))
        .collect()
}

/// A loop through `from` back to it, if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in &g[&at] {
            if next == from {
                let mut p = path.clone();
                p.push(from.to_string());
                return Some(p);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn no_top_level_module_depends_on_itself_around_a_loop() {
    let g = graph();
    assert!(g.len() >= 15, "{g:?}");
    assert!(
        g["cmd"].contains("engine"),
        "the reading of imports broke: {g:?}"
    );
    let found = loops(&g);
    assert!(found.is_empty(), "module loops:\n{}", found.join("\n"));
}

/// Inside `spate serve` too: the protocols use what every session shares (the store, the
/// users, the counters, the faults), and that names no protocol; each protocol's state is
/// its own.
#[test]
fn no_module_of_the_server_depends_on_itself_around_a_loop() {
    let g = graph_of(&Path::new(SRC).join("serve"), "crate::serve");
    assert!(
        g["server"].contains("xmpp") && g["server"].contains("smtp"),
        "{g:?}"
    );
    assert!(g["xmpp"].contains("shared"), "{g:?}");
    let found = loops(&g);
    assert!(
        found.is_empty(),
        "loops inside serve/:\n{}",
        found.join("\n")
    );
    for protocol in ["smtp", "pop3", "imap", "xmpp", "rr"] {
        for common in ["shared", "store", "stats", "conn", "faults"] {
            assert!(!g[common].contains(protocol), "{common} names {protocol}");
        }
    }
}

#[test]
fn the_loop_finder_finds_a_loop() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle(&g, "a").unwrap(), ["a", "b", "c", "a"]);
    assert!(cycle(&g, "d").is_none());
}
