//! What `spate rr` sends: request templates (from a requests file, a directory, or
//! `--template`), their class labels, and how each request picks its variant.
//!
//! A template is bytes with placeholders: `{seq}` (the unit's sequence number), `{n}`
//! (the variant drawn, 0..N; `{variant}` too), `{rand:A..B}` (uniform, inclusive) and `{identity}` (the
//! name of the connection's client identity). Other text in braces (JSON) stays as it
//! is; a brace word that is not a placeholder (`{sqe}`) is refused as a typo.

use std::path::Path;

use rand::Rng;

/// Most distinct class labels: each has its own latency histogram.
pub const MAX_CLASSES: usize = 16;
/// Most variants `--variants` may ask for (a shuffle or zipf table holds one entry each).
pub const MAX_VARIANTS: u64 = 10_000_000;
/// Most requests a file or directory may hold.
const MAX_REQUESTS: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("{0}: unknown placeholder {{{1}}} (placeholders: {{seq}}, {{n}} or {{variant}}, {{rand:A..B}}, {{identity}})")]
    Unknown(String, String),
    #[error("{0}: placeholder {{{1} is not closed (write {{{1}}})")]
    Unclosed(String, String),
    #[error("{0}: bad {{rand:A..B}}: {1}")]
    Rand(String, String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(Vec<u8>),
    Seq,
    N,
    Rand(u64, u64),
    Identity,
}

/// One request, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    /// Index into the class labels, or None.
    pub class: Option<u8>,
}

impl Template {
    /// Compiles `text`; `at` names where it came from in errors (FILE:LINE).
    pub fn parse(text: &[u8], at: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let mut i = 0;
        while i < text.len() {
            if text[i] == b'{' {
                let close = text[i + 1..].iter().position(|&b| b == b'}');
                if close.is_none() {
                    unclosed(&text[i + 1..], at)?;
                }
                if let Some(close) = close {
                    let inner = &text[i + 1..i + 1 + close];
                    if let Some(p) = placeholder(inner, at)? {
                        if !lit.is_empty() {
                            parts.push(Part::Lit(std::mem::take(&mut lit)));
                        }
                        parts.push(p);
                        i += close + 2;
                        continue;
                    }
                }
            }
            lit.push(text[i]);
            i += 1;
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts, class: None })
    }

    pub fn uses_identity(&self) -> bool {
        self.parts.contains(&Part::Identity)
    }

    /// The longest request this template can make (with `identity` names at most this long).
    pub fn max_len(&self, identity: usize) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Lit(b) => b.len(),
                Part::Identity => identity,
                _ => 20,
            })
            .sum()
    }

    /// Writes the request into `out` (cleared first).
    pub fn fill(&self, seq: u64, n: u64, identity: &str, rng: &mut impl Rng, out: &mut Vec<u8>) {
        use std::io::Write as _;
        out.clear();
        for p in &self.parts {
            let _ = match p {
                Part::Lit(b) => out.write_all(b),
                Part::Seq => write!(out, "{seq}"),
                Part::N => write!(out, "{n}"),
                Part::Rand(a, b) => write!(out, "{}", rng.random_range(*a..=*b)),
                Part::Identity => out.write_all(identity.as_bytes()),
            };
        }
    }
}

/// `rest` follows a `{` that no `}` closes: an error when it starts with a placeholder
/// (`{n`, `{rand:1..9`), which would otherwise go out as it is written.
fn unclosed(rest: &[u8], at: &str) -> Result<(), TemplateError> {
    let word: Vec<u8> = rest
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.'))
        .collect();
    let known =
        matches!(&word[..], b"seq" | b"n" | b"variant" | b"identity") || word.starts_with(b"rand:");
    if known {
        return Err(TemplateError::Unclosed(
            at.to_string(),
            String::from_utf8_lossy(&word).into_owned(),
        ));
    }
    Ok(())
}

/// The placeholder written `{inner}`: Some, None for text in braces that is none
/// (JSON), or an error for a word that looks like a misspelt one.
fn placeholder(inner: &[u8], at: &str) -> Result<Option<Part>, TemplateError> {
    match inner {
        b"seq" => return Ok(Some(Part::Seq)),
        // `{variant}` is the same: clap turns a literal "{n}" into a line break in --help.
        b"n" | b"variant" => return Ok(Some(Part::N)),
        b"identity" => return Ok(Some(Part::Identity)),
        _ => {}
    }
    let s = String::from_utf8_lossy(inner);
    if let Some(range) = s.strip_prefix("rand:") {
        let bad = |why: &str| TemplateError::Rand(at.to_string(), format!("{range}: {why}"));
        let (a, b) = range.split_once("..").ok_or_else(|| bad("expected A..B"))?;
        let a: u64 = a.trim().parse().map_err(|_| bad("A is not a number"))?;
        let b: u64 = b.trim().parse().map_err(|_| bad("B is not a number"))?;
        if a > b {
            return Err(bad("A is more than B"));
        }
        return Ok(Some(Part::Rand(a, b)));
    }
    let word = !inner.is_empty()
        && inner.len() <= 32
        && inner
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':'));
    if word {
        return Err(TemplateError::Unknown(at.to_string(), s.into_owned()));
    }
    Ok(None)
}

/// The requests of a run and their class labels.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    pub templates: Vec<Template>,
    pub classes: Vec<String>,
}

impl Requests {
    /// The template of variant `n` (variants take the templates in turn).
    pub fn get(&self, n: u64) -> &Template {
        &self.templates[(n % self.templates.len() as u64) as usize]
    }

    pub fn one(t: Template) -> Requests {
        Requests {
            templates: vec![t],
            classes: Vec::new(),
        }
    }

    fn push(&mut self, mut t: Template, class: Option<&str>, at: &str) -> Result<(), String> {
        if let Some(c) = class {
            let idx = match self.classes.iter().position(|x| x == c) {
                Some(i) => i,
                None if self.classes.len() >= MAX_CLASSES => {
                    return Err(format!(
                        "{at}: class '{c}' is one more than the {MAX_CLASSES} classes allowed"
                    ))
                }
                None => {
                    self.classes.push(c.to_string());
                    self.classes.len() - 1
                }
            };
            t.class = Some(idx as u8);
        }
        if self.templates.len() >= MAX_REQUESTS {
            return Err(format!("{at}: more than {MAX_REQUESTS} requests"));
        }
        self.templates.push(t);
        Ok(())
    }

    /// A requests file: one request per line, `#` comments and blank lines skipped;
    /// `CLASS<TAB>REQUEST` gives the request a class label.
    pub fn from_lines(text: &str, file: &str) -> Result<Requests, String> {
        let mut r = Requests::default();
        for (n, line) in text.lines().enumerate() {
            let at = format!("{file}:{}", n + 1);
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let (class, req) = match line.split_once('\t') {
                Some((c, req)) => (Some(c.trim()), req),
                None => (None, line),
            };
            if class.is_some_and(|c| c.is_empty() || c.contains(char::is_whitespace)) {
                return Err(format!(
                    "{at}: the class label before the TAB must be one word"
                ));
            }
            let t = Template::parse(req.as_bytes(), &at).map_err(|e| e.to_string())?;
            r.push(t, class, &at)?;
        }
        if r.templates.is_empty() {
            return Err(format!("{file}: no request in it"));
        }
        Ok(r)
    }

    /// A directory: each file is one request (its bytes as they are, placeholders
    /// filled); files in a subdirectory CLASS/ have that class label. Hidden files are
    /// skipped; names are taken in sorted order.
    pub fn from_dir(dir: &Path) -> Result<Requests, String> {
        let mut r = Requests::default();
        let mut files = Vec::new();
        list(dir, None, &mut files)?;
        for sub in entries(dir)? {
            if sub.is_dir() {
                let class = sub.file_name().map(|n| n.to_string_lossy().into_owned());
                list(&sub, class, &mut files)?;
            }
        }
        for (path, class) in files {
            let at = path.display().to_string();
            let bytes = std::fs::read(&path).map_err(|e| format!("{at}: {e}"))?;
            let t = Template::parse(&bytes, &at).map_err(|e| e.to_string())?;
            r.push(t, class.as_deref(), &at)?;
        }
        if r.templates.is_empty() {
            return Err(format!("{}: no request file in it", dir.display()));
        }
        Ok(r)
    }
}

fn entries(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut v: Vec<_> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .take(MAX_REQUESTS + 1)
        .collect();
    v.sort();
    Ok(v)
}

fn list(
    dir: &Path,
    class: Option<String>,
    out: &mut Vec<(std::path::PathBuf, Option<String>)>,
) -> Result<(), String> {
    for p in entries(dir)? {
        if p.is_file() {
            out.push((p, class.clone()));
        }
    }
    Ok(())
}

/// How each request draws its variant n in 0..N.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pick {
    /// 0, 1, 2, ... over the whole run (all sessions share the counter).
    RoundRobin,
    /// A random order of every variant, walked like round-robin.
    Shuffle,
    /// Uniformly at random.
    Uniform,
    /// Zipf with this exponent: variant 0 most often (hot keys).
    Zipf(f64),
}

impl std::str::FromStr for Pick {
    type Err = String;
    fn from_str(s: &str) -> Result<Pick, String> {
        match s {
            "round-robin" => Ok(Pick::RoundRobin),
            "shuffle" => Ok(Pick::Shuffle),
            "uniform" | "random" => Ok(Pick::Uniform),
            _ => match s.strip_prefix("zipf:").map(str::parse::<f64>) {
                Some(Ok(e)) if e > 0.0 && e.is_finite() => Ok(Pick::Zipf(e)),
                _ => Err(format!(
                    "'{s}': expected round-robin, shuffle, uniform or zipf:S (S > 0, e.g. zipf:1.1)"
                )),
            },
        }
    }
}

/// The draw of variants for a whole run, shared by every session.
#[derive(Debug)]
pub struct Picker {
    pick: Pick,
    n: u64,
    next: std::sync::atomic::AtomicU64,
    /// Shuffle: the order; zipf: the cumulative weights.
    order: Vec<u32>,
    cdf: Vec<f64>,
}

impl Picker {
    pub fn new(pick: Pick, n: u64, seed: u64) -> Picker {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let n = n.clamp(1, MAX_VARIANTS);
        let mut order = Vec::new();
        let mut cdf = Vec::new();
        match pick {
            Pick::Shuffle => {
                order = (0..n as u32).collect();
                order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
            }
            Pick::Zipf(s) => {
                let mut total = 0.0;
                cdf = (1..=n)
                    .map(|k| {
                        total += (k as f64).powf(-s);
                        total
                    })
                    .collect();
                for c in &mut cdf {
                    *c /= total;
                }
            }
            _ => {}
        }
        Picker {
            pick,
            n,
            next: std::sync::atomic::AtomicU64::new(0),
            order,
            cdf,
        }
    }

    pub fn variants(&self) -> u64 {
        self.n
    }

    pub fn draw(&self, rng: &mut impl Rng) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        match self.pick {
            Pick::RoundRobin => self.next.fetch_add(1, Relaxed) % self.n,
            Pick::Shuffle => {
                let i = self.next.fetch_add(1, Relaxed) % self.n;
                u64::from(self.order[i as usize])
            }
            Pick::Uniform => rng.random_range(0..self.n),
            Pick::Zipf(_) => {
                let u: f64 = rng.random();
                (self.cdf.partition_point(|&c| c < u) as u64).min(self.n - 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn templates_fill_and_refuse_typos() {
        let t = Template::parse(
            b"{\"u\":\"{n}\",\"s\":{seq},\"r\":{rand:5..5},\"i\":\"{identity}\"}",
            "t",
        )
        .unwrap();
        let mut out = Vec::new();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        t.fill(7, 3, "alice", &mut rng, &mut out);
        assert_eq!(out, b"{\"u\":\"3\",\"s\":7,\"r\":5,\"i\":\"alice\"}");
        assert!(t.uses_identity());
        let v = Template::parse(b"k{variant}", "t").unwrap();
        v.fill(7, 3, "", &mut rng, &mut out);
        assert_eq!(out, b"k3");
        let e = Template::parse(b"GET {sqe}", "f.txt:3")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.txt:3: unknown placeholder {sqe}"), "{e}");
        assert!(Template::parse(b"{rand:9..2}", "x").is_err());
        assert!(Template::parse(b"{rand:a..2}", "x").is_err());
    }

    #[test]
    fn requests_file_with_classes() {
        let r = Requests::from_lines("# c\nhit\tGET 1\n\nmiss\tGET {n}\nplain\n", "r").unwrap();
        assert_eq!(r.templates.len(), 3);
        assert_eq!(r.classes, vec!["hit", "miss"]);
        assert_eq!(r.templates[1].class, Some(1));
        assert_eq!(r.templates[2].class, None);
        let many: String = (0..17).map(|i| format!("c{i}\tx\n")).collect();
        let e = Requests::from_lines(&many, "m").unwrap_err();
        assert!(e.starts_with("m:17:"), "{e}");
        assert!(Requests::from_lines("# only\n", "e").is_err());
    }

    #[test]
    fn picks() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(2);
        let p = Picker::new(Pick::RoundRobin, 3, 0);
        let v: Vec<u64> = (0..5).map(|_| p.draw(&mut rng)).collect();
        assert_eq!(v, [0, 1, 2, 0, 1]);
        let p = Picker::new(Pick::Shuffle, 50, 9);
        let mut v: Vec<u64> = (0..50).map(|_| p.draw(&mut rng)).collect();
        v.sort_unstable();
        assert_eq!(v, (0..50).collect::<Vec<_>>());
        let p = Picker::new(Pick::Zipf(1.1), 100, 0);
        let zeros = (0..1000).filter(|_| p.draw(&mut rng) == 0).count();
        assert!(zeros > 100, "{zeros}");
        assert!("zipf:0".parse::<Pick>().is_err());
        assert_eq!("zipf:1.1".parse::<Pick>(), Ok(Pick::Zipf(1.1)));
    }
}
