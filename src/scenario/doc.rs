//! The scenario file as an owned tree of values that remember where they came from, so
//! every later check can point at `file:line:col`.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use crate::units;
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

/// The text of a scenario file and its name for messages.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

impl Source {
    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[start..].chars().count() + 1)
    }

    /// A one-line user error pointing at `span`.
    pub fn err(&self, span: &Range<usize>, msg: impl std::fmt::Display) -> UsageError {
        let (line, col) = self.line_col(span.start);
        UsageError(format!("{}:{line}:{col}: {msg}", self.name))
    }

    pub fn parse(&self) -> Result<Node, UsageError> {
        let table = DeTable::parse(&self.text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            // toml's message can span lines (it quotes the source); keep its first line.
            let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
            self.err(&span, format!("invalid TOML: {msg}"))
        })?;
        let span = table.span();
        Ok(Node {
            span,
            kind: Kind::Table(convert_table(table.get_ref())),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub span: Range<usize>,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Str(String),
    /// Integers and floats keep their decimal text: they become command-line words.
    Int(i64),
    Float(String),
    Bool(bool),
    Datetime(String),
    Array(Vec<Node>),
    Table(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub key_span: Range<usize>,
    pub value: Node,
}

impl Kind {
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Str(_) => "a string",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a float",
            Kind::Bool(_) => "a boolean",
            Kind::Datetime(_) => "a datetime",
            Kind::Array(_) => "an array",
            Kind::Table(_) => "a table",
        }
    }
}

impl Node {
    pub fn as_table(&self) -> Option<&[Entry]> {
        match &self.kind {
            Kind::Table(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A scalar as the word it becomes on a command line.
    pub fn scalar_word(&self) -> Option<String> {
        match &self.kind {
            Kind::Str(s) => Some(s.clone()),
            Kind::Int(i) => Some(i.to_string()),
            Kind::Float(f) | Kind::Datetime(f) => Some(f.clone()),
            Kind::Bool(b) => Some(b.to_string()),
            Kind::Array(_) | Kind::Table(_) => None,
        }
    }
}

fn convert_table(t: &DeTable<'_>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = t
        .iter()
        .map(|(k, v)| Entry {
            key: k.get_ref().to_string(),
            key_span: k.span(),
            value: convert(v.get_ref(), v.span()),
        })
        .collect();
    // The map is sorted by key; the file's order is what people expect (argv order,
    // first error first).
    entries.sort_by_key(|e| e.key_span.start);
    entries
}

fn convert(v: &DeValue<'_>, span: Range<usize>) -> Node {
    let kind = match v {
        DeValue::String(s) => Kind::Str(s.to_string()),
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Kind::Int(n),
            Err(_) => Kind::Float(i.as_str().to_string()),
        },
        DeValue::Float(f) => Kind::Float(f.as_str().to_string()),
        DeValue::Boolean(b) => Kind::Bool(*b),
        DeValue::Datetime(d) => Kind::Datetime(d.to_string()),
        DeValue::Array(a) => {
            Kind::Array(a.iter().map(|e| convert(e.get_ref(), e.span())).collect())
        }
        DeValue::Table(t) => Kind::Table(convert_table(t)),
    };
    Node { span, kind }
}

/// Edit distance, for "did you mean" suggestions.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// `; did you mean "x"?` when a candidate is close enough, else nothing.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let normalized = word.replace('_', "-");
    let best = candidates
        .into_iter()
        .map(|c| (levenshtein(&normalized, c), c))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, c)) if d <= 2.max(word.len() / 3) => format!("; did you mean \"{c}\"?"),
        _ => String::new(),
    }
}

/// A clap error as one line: its first paragraph without the "error: " prefix (clap puts
/// lists such as missing arguments on indented lines below the first).
pub fn clap_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let words: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
        .map(str::trim)
        .collect();
    let line = words.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// A TOML basic string with the escapes TOML needs.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The table at `n`, or an error naming `what`.
pub fn table<'a>(src: &Source, n: &'a Node, what: &str) -> Res<&'a [Entry]> {
    n.as_table().ok_or_else(|| {
        src.err(
            &n.span,
            format!("{what}: expected a table, found {}", n.kind.type_name()),
        )
    })
}

/// A string or a list of strings, each with its place in the file.
pub fn strings(src: &Source, n: &Node, what: &str) -> Res<Vec<(String, Range<usize>)>> {
    let items: Vec<&Node> = match &n.kind {
        Kind::Array(a) => a.iter().collect(),
        Kind::Str(_) => vec![n],
        _ => return Err(src.err(&n.span, format!("{what}: expected a list of strings"))),
    };
    items
        .into_iter()
        .map(|i| match i.as_str() {
            Some(s) => Ok((s.to_string(), i.span.clone())),
            None => Err(src.err(&i.span, format!("{what}: expected a string"))),
        })
        .collect()
}

/// A duration like "30s" at `n`.
pub fn duration(src: &Source, n: &Node, key: &str) -> Res<std::time::Duration> {
    let w = n.scalar_word().ok_or_else(|| {
        src.err(
            &n.span,
            format!("\"{key}\": expected a duration like \"30s\""),
        )
    })?;
    units::parse_duration(&w).map_err(|e| src.err(&n.span, format!("\"{key}\": {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(text: &str) -> Source {
        Source {
            name: "s.toml".into(),
            text: text.into(),
        }
    }

    #[test]
    fn spans_become_line_and_column() {
        let s = src("a = 1\n[t]\n  key = \"v\"\n");
        let n = s.parse().unwrap();
        let t = n.as_table().unwrap();
        assert_eq!(t[0].key, "a");
        let inner = t[1].value.as_table().unwrap();
        assert_eq!(s.line_col(inner[0].key_span.start), (3, 3));
        assert_eq!(s.line_col(inner[0].value.span.start), (3, 9));
        let e = s.err(&inner[0].value.span, "bad").to_string();
        assert_eq!(e, "s.toml:3:9: bad");
    }

    #[test]
    fn syntax_errors_point_at_the_line() {
        let e = src("a = 1\nb = \n").parse().unwrap_err().to_string();
        assert!(e.starts_with("s.toml:2:"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn order_kept_and_numbers_are_words() {
        let n = src("z = 0x10\na = 1.5\nm = [true, \"x\"]").parse().unwrap();
        let t = n.as_table().unwrap();
        let keys: Vec<_> = t.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(t[0].value.scalar_word().unwrap(), "16");
        assert_eq!(t[1].value.scalar_word().unwrap(), "1.5");
    }

    #[test]
    fn suggestions_and_quotes() {
        assert_eq!(levenshtein("usres", "users"), 2);
        assert_eq!(
            suggest("usres", ["users", "rate"]),
            "; did you mean \"users\"?"
        );
        assert_eq!(suggest("zzzzzz", ["users"]), "");
        assert_eq!(
            suggest("max_in_flight", ["max-in-flight"]),
            "; did you mean \"max-in-flight\"?"
        );
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }
}
