//! The layering holds: no two of the crate's top-level modules depend on each other,
//! directly or around a loop, in code that is not a test. Read from the sources: a
//! module depends on another when it names `crate::other`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The Rust files of a module (a file, or a directory and its own file), test modules
/// left out: a `tests.rs`, and what follows `#[cfg(test)]` in a file.
fn sources(module: &Path, out: &mut Vec<String>) {
    if module.is_dir() {
        for e in std::fs::read_dir(module).unwrap().flatten() {
            sources(&e.path(), out);
        }
    } else if module.extension().is_some_and(|x| x == "rs")
        && module.file_name().unwrap() != "tests.rs"
    {
        let text = std::fs::read_to_string(module).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap().to_string();
        out.push(code);
    }
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(SRC).unwrap().flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if name != "lib" && name != "main" {
            names.insert(name);
        }
    }
    let mut g = BTreeMap::new();
    for m in &names {
        let mut texts = Vec::new();
        let dir = Path::new(SRC).join(m);
        if dir.is_dir() {
            sources(&dir, &mut texts);
        }
        let file = Path::new(SRC).join(format!("{m}.rs"));
        if file.is_file() {
            sources(&file, &mut texts);
        }
        let mut deps = BTreeSet::new();
        for t in texts {
            for (at, _) in t.match_indices("crate::") {
                let word: String = t[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if names.contains(&word) && &word != m {
                    deps.insert(word);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
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
    let loops: Vec<String> = g
        .keys()
        .filter_map(|m| cycle(&g, m))
        .map(|p| p.join(" -> "))
        .collect();
    assert!(loops.is_empty(), "module loops:\n{}", loops.join("\n"));
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
