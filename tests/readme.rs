//! The documentation renders as written: every code fence is closed (an open one
//! swallows every section after it) and no link points outside the repository.

use std::path::Path;

fn docs() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = vec![root.join("README.md")];
    for dir in ["scenarios", "bench", "fuzz", "scripts"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            v.extend(
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "md")),
            );
        }
    }
    v
}

#[test]
fn fences_are_closed_and_links_stay_in_the_repository() {
    let files = docs();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut open: Option<usize> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("```") {
                open = match open {
                    None => Some(i + 1),
                    Some(_) => None,
                };
            } else if open.is_none() {
                assert!(
                    !line.contains("](../"),
                    "{}:{}: a link outside the repository",
                    f.display(),
                    i + 1
                );
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
