//! The message factory: envelopes from address pools, bodies of a chosen size (or real
//! .eml files, or with an attachment), and the tracking header that lets a later step
//! prove delivery: run id, sequence number, send time and a digest of the body.
//!
//! Bodies are a deterministic function of (size, template), so their digests are cached,
//! and a body of the run's fixed size (or a corpus file's) is built once and shared by every
//! session: building a message costs a header format, neither a hash nor a copy of the
//! body, which is written from where it lives ([`Built::body`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use crate::units::Range;

/// The header spate puts on every message it sends.
pub const TRACE_HEADER: &str = "X-Spate-Trace";

/// Digest of a message body, canonicalised so that stores which rewrite line endings
/// (Maildir keeps LF) still match: every line is hashed with a CRLF terminator and
/// trailing empty lines are ignored. The first 16 bytes of SHA-256.
pub fn body_digest(body: &[u8]) -> [u8; 16] {
    let mut h = Sha256::new();
    let mut blank_run = 0usize;
    let mut lines = body.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if lines.peek().is_none() && line.is_empty() {
            break; // the split after a final newline
        }
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        for _ in 0..blank_run {
            h.update(b"\r\n");
        }
        blank_run = 0;
        h.update(line);
        h.update(b"\r\n");
    }
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

pub fn hex(d: &[u8; 16]) -> String {
    String::from_utf8_lossy(&crate::results::hex(d)).into_owned()
}

/// Appends the lowercase hex of a digest, without formatting machinery.
pub fn hex_into(d: &[u8; 16], out: &mut Vec<u8>) {
    out.extend_from_slice(&crate::results::hex(d));
}

#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: '{text}' is not an email address")]
    BadAddress {
        path: String,
        line: usize,
        text: String,
    },
    #[error("{0}: no addresses in it")]
    Empty(String),
    #[error("bad address pattern '{0}': expected e.g. 'user{{0..999}}@example.test'")]
    BadPattern(String),
    #[error("{0}: no .eml files in it")]
    NoEml(String),
    #[error("message size {0} is larger than the 64 MiB spate generates")]
    TooBig(u64),
}

fn valid_address(a: &str) -> bool {
    // The null sender <> is written as an empty string.
    a.is_empty()
        || (a.contains('@')
            && !a.starts_with('@')
            && !a.ends_with('@')
            && !a
                .chars()
                .any(|c| c.is_whitespace() || c == '<' || c == '>' || c == ','))
}

/// A list of addresses, from a file or a pattern.
#[derive(Debug, Clone)]
pub struct AddressPool {
    pub addrs: Vec<String>,
}

impl AddressPool {
    /// One address a line; `#` comments and blank lines skipped. A second word on a
    /// line (a users file's password) is ignored.
    pub fn from_file(path: &Path) -> Result<Self, MessageError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MessageError::Read {
            path: p.clone(),
            source,
        })?;
        let mut addrs = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let a = line.split_whitespace().next().unwrap_or_default();
            let a = a.trim_start_matches('<').trim_end_matches('>');
            if !valid_address(a) || a.is_empty() {
                return Err(MessageError::BadAddress {
                    path: p,
                    line: i + 1,
                    text: line.to_string(),
                });
            }
            addrs.push(a.to_string());
        }
        if addrs.is_empty() {
            return Err(MessageError::Empty(p));
        }
        Ok(AddressPool { addrs })
    }

    /// `user{0..999}@example.test` → 1000 addresses; a plain address → one.
    pub fn from_pattern(pattern: &str) -> Result<Self, MessageError> {
        let bad = || MessageError::BadPattern(pattern.to_string());
        let addrs = match (pattern.find('{'), pattern.find('}')) {
            (Some(open), Some(close)) if open < close => {
                let (lo, hi) = pattern[open + 1..close].split_once("..").ok_or_else(bad)?;
                let lo: u64 = lo.trim().parse().map_err(|_| bad())?;
                let hi: u64 = hi.trim().parse().map_err(|_| bad())?;
                if lo > hi || hi - lo >= 10_000_000 {
                    return Err(bad());
                }
                let (pre, post) = (&pattern[..open], &pattern[close + 1..]);
                (lo..=hi).map(|i| format!("{pre}{i}{post}")).collect()
            }
            (None, None) => vec![pattern.to_string()],
            _ => return Err(bad()),
        };
        if !addrs.iter().all(|a: &String| valid_address(a)) {
            return Err(bad());
        }
        Ok(AddressPool { addrs })
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pick {
    Random,
    RoundRobin,
}

/// A real message from a corpus: headers without From/To, the body dot-stuffed once.
#[derive(Debug)]
struct Eml {
    headers: Vec<u8>,
    /// Sent from here, shared by every session.
    wire_body: Arc<[u8]>,
    /// A body line starts with '.': `wire_body` is dot-stuffed and differs from the
    /// message itself, so it can go in DATA only, not in a BDAT chunk.
    stuffed: bool,
    digest: [u8; 16],
    body_len: usize,
}

/// What every session's builder shares.
pub struct Factory {
    pub run_id: String,
    pub size: Range<u64>,
    pub rcpts: Range<u32>,
    pub from: AddressPool,
    pub to: AddressPool,
    pub pick: Pick,
    text: Arc<[u8]>,
    attachment: Option<(String, String)>,
    corpus: Vec<Eml>,
    /// Extra header lines (already CRLF-terminated), e.g. for DSN tests.
    pub extra_headers: String,
    /// The run's seed: every message's random choices (recipients, sender, size) then
    /// come from (seed, its sequence number), so a run repeats with any number of
    /// sessions; None: from each session's own generator, in the order it builds.
    pub seed: Option<u64>,
    /// The generated body of the run's fixed size, built by the first session that needs
    /// it (after any attachment is set) and sent by all of them from here.
    fixed_body: OnceLock<SharedBody>,
}

/// A generated body that sessions send from where it lives.
struct SharedBody {
    bytes: Arc<[u8]>,
    digest: [u8; 16],
}

impl crate::results::AddressBook for Factory {
    fn run_id(&self) -> &str {
        &self.run_id
    }
    fn sender(&self, index: u32) -> &str {
        &self.from.addrs[index as usize]
    }
    fn recipient(&self, index: u32) -> &str {
        &self.to.addrs[index as usize]
    }
}

const MAX_BODY: u64 = 64 * 1024 * 1024;

/// Builds `len` bytes of deterministic text of 72-character lines.
fn text_block(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "mail",
        "queue",
        "spate",
        "relay",
        "message",
        "server",
        "deliver",
        "header",
        "body",
        "latency",
        "postmaster",
        "domain",
        "envelope",
        "recipient",
        "sender",
        "load",
    ];
    let mut out = Vec::with_capacity(len + 80);
    let mut i = 0usize;
    while out.len() < len {
        let mut line = 0;
        while line < 64 {
            let w = WORDS[(i * 7 + i / 5) % WORDS.len()];
            i += 1;
            out.extend_from_slice(w.as_bytes());
            out.push(b' ');
            line += w.len() + 1;
        }
        out.truncate(out.len() - 1);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl Factory {
    pub fn new(
        run_id: String,
        size: Range<u64>,
        rcpts: Range<u32>,
        from: AddressPool,
        to: AddressPool,
        pick: Pick,
    ) -> Result<Self, MessageError> {
        if size.hi > MAX_BODY {
            return Err(MessageError::TooBig(size.hi));
        }
        Ok(Factory {
            run_id,
            size,
            rcpts,
            from,
            to,
            pick,
            text: text_block(size.hi as usize + 80).into(),
            attachment: None,
            corpus: Vec::new(),
            extra_headers: String::new(),
            seed: None,
            fixed_body: OnceLock::new(),
        })
    }

    /// Adds a file as a base64 MIME attachment to every generated message.
    pub fn attach(&mut self, path: &Path) -> Result<(), MessageError> {
        let data = std::fs::read(path).map_err(|source| MessageError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
        let mut wrapped = String::with_capacity(b64.len() + b64.len() / 76 * 2 + 2);
        for chunk in b64.as_bytes().chunks(76) {
            wrapped.push_str(std::str::from_utf8(chunk).unwrap_or_default());
            wrapped.push_str("\r\n");
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().replace(['"', '\r', '\n'], "_"))
            .unwrap_or_else(|| "attachment".into());
        self.attachment = Some((name, wrapped));
        Ok(())
    }

    /// Sends the .eml files of `dir` instead of generated bodies, From/To rewritten.
    pub fn load_corpus(&mut self, dir: &Path) -> Result<(), MessageError> {
        let read_err = |source| MessageError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("eml")))
            .collect();
        paths.sort();
        for p in paths.iter().take(100_000) {
            let data = std::fs::read(p).map_err(|source| MessageError::Read {
                path: p.display().to_string(),
                source,
            })?;
            self.corpus.push(parse_eml(&data));
        }
        if self.corpus.is_empty() {
            return Err(MessageError::NoEml(dir.display().to_string()));
        }
        Ok(())
    }

    pub fn builder(self: &Arc<Self>, rng: SmallRng, offset: usize) -> Builder {
        Builder {
            factory: self.clone(),
            rng,
            digests: HashMap::new(),
            next_to: offset,
            next_from: offset,
            date: (u64::MAX, String::new()),
            body: Vec::new(),
            chosen: None,
        }
    }

    /// The shared generated body of `size`, when `size` is the run's fixed size.
    fn fixed_body(&self, size: u64) -> Option<&SharedBody> {
        if !self.size.is_fixed() || size != self.size.lo {
            return None;
        }
        Some(self.fixed_body.get_or_init(|| {
            let mut bytes = Vec::new();
            generated_body(self, size, &mut bytes);
            SharedBody {
                digest: body_digest(&bytes),
                bytes: bytes.into(),
            }
        }))
    }
}

fn parse_eml(data: &[u8]) -> Eml {
    let split = find(data, b"\r\n\r\n")
        .map(|i| (i + 2, i + 4))
        .or_else(|| find(data, b"\n\n").map(|i| (i + 1, i + 2)))
        .unwrap_or((data.len(), data.len()));
    let (head, body) = (&data[..split.0], &data[split.1.min(data.len())..]);
    // Drop From/To/Cc/Message-ID (continuations included); they are rewritten per message.
    let mut headers = Vec::new();
    let mut skipping = false;
    for line in head.split_inclusive(|&b| b == b'\n') {
        let cont = line.first().is_some_and(|b| *b == b' ' || *b == b'\t');
        if !cont {
            let lower = line.to_ascii_lowercase();
            skipping = [
                &b"from:"[..],
                b"to:",
                b"cc:",
                b"message-id:",
                b"x-spate-trace:",
            ]
            .iter()
            .any(|h| lower.starts_with(h));
        }
        if !skipping {
            let l = line.strip_suffix(b"\n").unwrap_or(line);
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            headers.extend_from_slice(l);
            headers.extend_from_slice(b"\r\n");
        }
    }
    let mut wire_body = Vec::with_capacity(body.len() + 64);
    crate::proto::dot::stuff_into(body, &mut wire_body);
    wire_body.truncate(wire_body.len() - 3); // keep ".\r\n" for the builder to add
    let stuffed = body.first() == Some(&b'.') || body.windows(2).any(|w| w == b"\n.");
    Eml {
        headers,
        wire_body: wire_body.into(),
        stuffed,
        digest: body_digest(body),
        body_len: body.len(),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The final dot of a DATA payload.
pub const DOT: &[u8] = b".\r\n";

/// What the session needs to know about a message it built.
#[derive(Debug, Clone, Default)]
pub struct Built {
    pub digest: [u8; 16],
    pub from: u32,
    /// Indices into the recipient pool.
    pub rcpts: Vec<u32>,
    /// The payload is dot-stuffed (a line of the message starts with '.'): DATA only.
    pub stuffed: bool,
    /// After [`Builder::build_head`]: the body, when it is shared rather than written into
    /// the head (a generated body of the run's fixed size, a corpus file's body).
    pub body: Option<Arc<[u8]>>,
}

impl Built {
    /// The message itself, for a BDAT chunk: `wire` (from [`Builder::build`]) without
    /// its final dot; None when the payload is dot-stuffed and so not the message.
    pub fn chunk<'w>(&self, wire: &'w [u8]) -> Option<&'w [u8]> {
        (!self.stuffed).then(|| wire.strip_suffix(DOT).unwrap_or(wire))
    }

    /// The message after [`Builder::build_head`] wrote its `head`: the head and the shared
    /// body (empty when the head holds it), in order.
    pub fn parts<'a>(&'a self, head: &'a [u8]) -> [&'a [u8]; 2] {
        [head, self.body.as_deref().unwrap_or_default()]
    }

    /// The length of [`Built::parts`].
    pub fn len(&self, head: &[u8]) -> usize {
        head.len() + self.body.as_deref().map_or(0, <[u8]>::len)
    }
}

/// The seed of unit `seq`'s random choices in a run seeded with `seed`: neighbouring
/// units get unrelated streams.
pub fn unit_seed(seed: u64, seq: u64) -> u64 {
    splitmix64(seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `z`.
pub fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per-session message builder: its own RNG, digest cache and scratch buffers.
pub struct Builder {
    factory: Arc<Factory>,
    rng: SmallRng,
    /// Digest and length of the generated body of each size (sizes drawn from a range).
    digests: HashMap<u64, ([u8; 16], usize)>,
    next_to: usize,
    next_from: usize,
    date: (u64, String),
    /// A body of a size not seen yet, built here to take its digest before its header.
    body: Vec<u8>,
    /// The next message's sender, recipients and body size, chosen by the caller.
    chosen: Option<Chosen>,
}

/// A message's envelope and size chosen by the caller ([`Builder::choose`]).
struct Chosen {
    from: u32,
    rcpts: Vec<u32>,
    size: u64,
}

/// Where the body of a message being built comes from.
enum Source {
    /// Shared: sent from where it lives.
    Shared(Arc<[u8]>),
    /// Generated straight into the output (its digest and length are known).
    Generate(u64),
    /// Already in the builder's scratch buffer.
    Scratch,
}

impl Builder {
    pub fn factory(&self) -> &Factory {
        &self.factory
    }

    /// The next message built goes from sender `from` to recipients `rcpts` (indices into
    /// the factory's pools) with a generated body of `size` bytes, rather than what the
    /// factory would draw: a simulated user sends as itself, to the people it writes to.
    pub fn choose(&mut self, from: u32, rcpts: &[u32], size: u64) {
        let mut c = self.chosen.take().unwrap_or(Chosen {
            from: 0,
            rcpts: Vec::new(),
            size: 0,
        });
        c.from = from;
        c.rcpts.clear();
        c.rcpts.extend_from_slice(rcpts);
        c.size = size.min(self.factory.size.hi);
        self.chosen = Some(c);
    }

    /// Chooses the envelope of message `seq` into `built`.
    pub fn envelope(&mut self, seq: u64, built: &mut Built) {
        if let Some(c) = &self.chosen {
            built.rcpts.clear();
            built.rcpts.extend_from_slice(&c.rcpts);
            built.from = c.from;
            return;
        }
        let f = &*self.factory;
        if let Some(seed) = f.seed {
            // Everything drawn for this message from here on (the size too) is the
            // message's own, whichever session builds it and when.
            self.rng = SmallRng::seed_from_u64(unit_seed(seed, seq));
            self.next_to = (seq as usize).wrapping_mul(f.rcpts.hi.max(1) as usize);
            self.next_from = seq as usize;
        }
        let n = if f.rcpts.is_fixed() {
            f.rcpts.lo
        } else {
            self.rng.random_range(f.rcpts.lo..=f.rcpts.hi)
        };
        let n = (n.max(1) as usize).min(f.to.len());
        built.rcpts.clear();
        match f.pick {
            Pick::RoundRobin => {
                for _ in 0..n {
                    built.rcpts.push((self.next_to % f.to.len()) as u32);
                    self.next_to += 1;
                }
                built.from = (self.next_from % f.from.len()) as u32;
                self.next_from += 1;
            }
            Pick::Random => {
                while built.rcpts.len() < n {
                    let i = self.rng.random_range(0..f.to.len()) as u32;
                    if !built.rcpts.contains(&i) {
                        built.rcpts.push(i);
                    }
                }
                built.from = self.rng.random_range(0..f.from.len()) as u32;
            }
        }
    }

    /// Appends the DATA payload of message `seq` to `out`: headers, body, final dot,
    /// dot-stuffed and CRLF. `now_unix_us` is the send time written into the trace header.
    pub fn build(&mut self, seq: u64, now_unix_us: u64, built: &mut Built, out: &mut Vec<u8>) {
        self.build_head(seq, now_unix_us, built, out);
        if let Some(body) = built.body.take() {
            out.extend_from_slice(&body);
        }
        out.extend_from_slice(DOT);
    }

    /// Appends message `seq` to `out` without its final dot, and without its body when
    /// that is shared: then `built.body` holds it, to be sent after `out` with no copy
    /// ([`Built::parts`]). `now_unix_us` is the send time written into the trace header.
    pub fn build_head(&mut self, seq: u64, now_unix_us: u64, built: &mut Built, out: &mut Vec<u8>) {
        let f = &*self.factory;
        let from = &f.from.addrs[built.from as usize];
        let chosen = self.chosen.as_ref().map(|c| c.size);
        let (digest, body_size, source, corpus) = if f.corpus.is_empty() {
            let size = if let Some(size) = chosen {
                size
            } else if f.size.is_fixed() {
                f.size.lo
            } else {
                self.rng.random_range(f.size.lo..=f.size.hi)
            };
            let (digest, len, source) = if let Some(b) = f.fixed_body(size) {
                (b.digest, b.bytes.len(), Source::Shared(b.bytes.clone()))
            } else if let Some(&(digest, len)) = self.digests.get(&size) {
                (digest, len, Source::Generate(size))
            } else {
                self.body.clear();
                generated_body(f, size, &mut self.body);
                if self.digests.len() > 100_000 {
                    self.digests.clear();
                }
                let digest = body_digest(&self.body);
                self.digests.insert(size, (digest, self.body.len()));
                (digest, self.body.len(), Source::Scratch)
            };
            (digest, len, source, None)
        } else {
            let eml = &f.corpus[(seq % f.corpus.len() as u64) as usize];
            let source = Source::Shared(eml.wire_body.clone());
            (eml.digest, eml.body_len, source, Some(eml))
        };
        built.digest = digest;
        built.stuffed = corpus.is_some_and(|e| e.stuffed);

        let inline = match source {
            Source::Shared(_) => 0,
            _ => body_size,
        };
        out.reserve(inline + 600);
        push(out, "From: <");
        push(out, from);
        push(out, ">\r\nTo: ");
        for (i, r) in built.rcpts.iter().enumerate() {
            if i > 0 {
                push(out, ",\r\n ");
            }
            push(out, "<");
            push(out, &f.to.addrs[*r as usize]);
            push(out, ">");
        }
        push(out, "\r\n");
        let mut num = [0u8; 20];
        trace_headers(out, f, (seq, now_unix_us), &digest, body_size as u64);
        push(out, &f.extra_headers);
        match corpus {
            Some(eml) => {
                out.extend_from_slice(&eml.headers);
                out.extend_from_slice(b"\r\n");
            }
            None => {
                let secs = now_unix_us / 1_000_000;
                if self.date.0 != secs {
                    self.date = (
                        secs,
                        chrono::DateTime::from_timestamp(secs as i64, 0)
                            .unwrap_or_default()
                            .format("%a, %d %b %Y %H:%M:%S +0000")
                            .to_string(),
                    );
                }
                push(out, "Date: ");
                push(out, &self.date.1);
                push(out, "\r\nSubject: spate test message ");
                push(out, itoa(seq, &mut num));
                push(out, "\r\nMIME-Version: 1.0\r\n");
                match &f.attachment {
                    None => push(out, "Content-Type: text/plain; charset=us-ascii\r\n\r\n"),
                    Some(_) => {
                        push(out, "Content-Type: multipart/mixed; boundary=\"spate-");
                        push(out, &f.run_id);
                        push(out, "\"\r\n\r\n");
                    }
                }
            }
        }
        // Generated bodies never start a line with '.', so no stuffing is needed.
        built.body = match source {
            Source::Shared(body) => Some(body),
            Source::Generate(size) => {
                generated_body(f, size, out);
                None
            }
            Source::Scratch => {
                out.extend_from_slice(&self.body);
                None
            }
        };
    }
}

/// The Message-ID and the trace header (run, sequence number, time sent, the body's
/// digest and size) that `spate verify` finds the message by, written straight into the
/// output, without formatting machinery or allocation.
#[inline]
fn trace_headers(
    out: &mut Vec<u8>,
    f: &Factory,
    (seq, now_unix_us): (u64, u64),
    digest: &[u8; 16],
    body_size: u64,
) {
    let mut num = [0u8; 20];
    push(out, "Message-ID: <");
    push(out, itoa(seq, &mut num));
    push(out, ".");
    push(out, &f.run_id);
    push(out, "@spate.invalid>\r\n");
    push(out, TRACE_HEADER);
    push(out, ": run=");
    push(out, &f.run_id);
    push(out, "; seq=");
    push(out, itoa(seq, &mut num));
    push(out, "; sent=");
    push(out, itoa(now_unix_us, &mut num));
    push(out, "; digest=");
    hex_into(digest, out);
    push(out, "; size=");
    push(out, itoa(body_size, &mut num));
    push(out, "\r\n");
}

/// Appends the generated body of this size to `body`.
fn generated_body(f: &Factory, size: u64, body: &mut Vec<u8>) {
    if let Some((name, b64)) = &f.attachment {
        let b = &f.run_id;
        let _ = write!(
            Wrap(body),
            "--spate-{b}\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
        );
        push_text(body, &f.text, size);
        let _ = write!(
            Wrap(body),
            "--spate-{b}\r\nContent-Type: application/octet-stream; name=\"{name}\"\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=\"{name}\"\r\n\r\n{b64}--spate-{b}--\r\n"
        );
    } else {
        push_text(body, &f.text, size);
    }
}

/// `size` bytes of text ending in CRLF (whole lines, the last padded with 'x').
fn push_text(out: &mut Vec<u8>, text: &[u8], size: u64) {
    let size = size as usize;
    if size < 2 {
        return;
    }
    let limit = size - 2;
    let cut = text[..limit.min(text.len())]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    out.extend_from_slice(&text[..cut]);
    out.resize(out.len() + (limit - cut), b'x');
    out.extend_from_slice(b"\r\n");
}

#[inline]
fn push(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
}

fn itoa(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).unwrap_or("0")
}

struct Wrap<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for Wrap<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Splits a stored message into headers and body (at the first empty line).
pub fn split_message(data: &[u8]) -> (&[u8], &[u8]) {
    if let Some(i) = find(data, b"\r\n\r\n") {
        (&data[..i + 2], &data[i + 4..])
    } else if let Some(i) = find(data, b"\n\n") {
        (&data[..i + 1], &data[i + 2..])
    } else {
        (data, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factory(size: Range<u64>) -> Arc<Factory> {
        Arc::new(
            Factory::new(
                "r1".into(),
                size,
                Range { lo: 1, hi: 3 },
                AddressPool::from_pattern("sender@example.test").unwrap(),
                AddressPool::from_pattern("user{0..9}@example.test").unwrap(),
                Pick::Random,
            )
            .unwrap(),
        )
    }

    /// A factory of fixed-size messages from s@x.test to u@x.test, to load a corpus into
    /// or attach to.
    fn plain(run: &str, size: u64) -> Factory {
        Factory::new(
            run.into(),
            Range::fixed(size),
            Range::fixed(1),
            AddressPool::from_pattern("s@x.test").unwrap(),
            AddressPool::from_pattern("u@x.test").unwrap(),
            Pick::RoundRobin,
        )
        .unwrap()
    }

    fn unstuff(wire: &[u8]) -> Vec<u8> {
        let wire = wire.strip_suffix(b".\r\n").unwrap();
        let mut out = Vec::new();
        for line in wire.split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
        }
        out
    }

    #[test]
    fn body_has_exact_size_and_matching_digest() {
        let f = factory(Range { lo: 0, hi: 5000 });
        let mut b = f.builder(SmallRng::seed_from_u64(1), 0);
        let mut built = Built::default();
        for seq in 0..200 {
            let mut out = Vec::new();
            b.envelope(0, &mut built);
            assert!((1..=3).contains(&built.rcpts.len()));
            b.build(seq, 1_700_000_000_000_000, &mut built, &mut out);
            let msg = unstuff(&out);
            let (head, body) = split_message(&msg);
            let head = String::from_utf8_lossy(head);
            let size: usize = head
                .split("size=")
                .nth(1)
                .unwrap()
                .split("\r\n")
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(body.len(), size);
            let trace = format!(
                "\r\nMessage-ID: <{seq}.r1@spate.invalid>\r\n{TRACE_HEADER}: run=r1; seq={seq}; sent=1700000000000000; digest={}; size={size}\r\n",
                hex(&body_digest(body))
            );
            assert!(head.contains(&trace), "{head}");
        }
    }

    #[test]
    fn digest_ignores_line_ending_style() {
        assert_eq!(body_digest(b"a\r\nb\r\n"), body_digest(b"a\nb\n"));
        assert_eq!(body_digest(b"a\r\nb\r\n"), body_digest(b"a\r\nb\r\n\r\n"));
        assert_ne!(body_digest(b"a\r\nb\r\n"), body_digest(b"a\r\nc\r\n"));
        assert_ne!(body_digest(b"a\r\n\r\nb\r\n"), body_digest(b"a\r\nb\r\n"));
    }

    #[test]
    fn attachment_and_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let att = dir.path().join("doc.bin");
        std::fs::write(&att, vec![7u8; 9167]).unwrap();
        let mut f = plain("r2", 10200);
        f.attach(&att).unwrap();
        let f = Arc::new(f);
        let mut b = f.builder(SmallRng::seed_from_u64(1), 0);
        let mut built = Built::default();
        let mut out = Vec::new();
        b.envelope(0, &mut built);
        b.build(1, 0, &mut built, &mut out);
        let s = String::from_utf8_lossy(&out);
        assert!(s.contains("Content-Transfer-Encoding: base64"));
        assert!(s.contains("multipart/mixed"));
        let msg = unstuff(&out);
        assert_eq!(body_digest(split_message(&msg).1), built.digest);

        let eml = dir.path().join("a.eml");
        std::fs::write(
            &eml,
            b"From: old@x\nTo: old@y\nSubject: hi\n\n.dot line\nbody\n",
        )
        .unwrap();
        let mut f2 = plain("r3", 1);
        f2.load_corpus(dir.path()).unwrap();
        let f2 = Arc::new(f2);
        let mut b = f2.builder(SmallRng::seed_from_u64(1), 0);
        let mut out = Vec::new();
        b.envelope(0, &mut built);
        b.build(1, 0, &mut built, &mut out);
        let s = String::from_utf8_lossy(&out);
        assert!(s.contains("From: <s@x.test>") && !s.contains("old@"));
        assert!(s.contains("\r\n..dot line\r\n"));
        assert!(s.contains("Subject: hi"));
        let msg = unstuff(&out);
        assert_eq!(body_digest(split_message(&msg).1), built.digest);
        // A stuffed payload is not the message: it may not go in a BDAT chunk.
        assert_eq!(built.chunk(&out), None);
    }

    #[test]
    fn a_chunk_is_the_message_without_its_final_dot() {
        let f = factory(Range::fixed(3000));
        let mut b = f.builder(SmallRng::seed_from_u64(7), 0);
        let mut built = Built::default();
        let mut out = Vec::new();
        b.envelope(0, &mut built);
        b.build(3, 0, &mut built, &mut out);
        let chunk = built
            .chunk(&out)
            .expect("a generated message needs no stuffing");
        assert_eq!(chunk.len(), out.len() - 3);
        assert!(chunk.ends_with(b"\r\n") && !chunk.ends_with(b"\r\n.\r\n"));
        assert_eq!(body_digest(split_message(chunk).1), built.digest);
    }

    /// The message in parts (head, shared body) is the contiguous one without its dot,
    /// for a fixed size (one body shared by every session, never copied), a range (bodies
    /// written into the head, on a digest cache miss and on a hit) and a corpus.
    #[test]
    fn parts_are_the_message_and_a_fixed_body_is_shared() {
        let contiguous_and_parts = |f: &Arc<Factory>, seq: u64| {
            let (mut a, mut b) = (
                f.builder(SmallRng::seed_from_u64(seq), 0),
                f.builder(SmallRng::seed_from_u64(seq), 0),
            );
            let (mut built_a, mut built_b) = (Built::default(), Built::default());
            a.envelope(seq, &mut built_a);
            b.envelope(seq, &mut built_b);
            let (mut wire, mut head) = (Vec::new(), Vec::new());
            a.build(seq, 1_700_000_000_000_000, &mut built_a, &mut wire);
            b.build_head(seq, 1_700_000_000_000_000, &mut built_b, &mut head);
            assert_eq!(
                built_b.parts(&head).concat(),
                wire.strip_suffix(DOT).unwrap()
            );
            assert_eq!(built_b.len(&head) + DOT.len(), wire.len());
            assert_eq!(built_a.digest, built_b.digest);
            assert!(built_a.body.is_none(), "build() leaves nothing apart");
            built_b
        };
        let fixed = factory(Range::fixed(10_240));
        let one = contiguous_and_parts(&fixed, 1);
        let two = contiguous_and_parts(&fixed, 2);
        let (Some(x), Some(y)) = (&one.body, &two.body) else {
            panic!("a body of the fixed size is shared");
        };
        assert!(Arc::ptr_eq(x, y) && x.len() == 10_240);

        let range = factory(Range { lo: 100, hi: 110 });
        let mut b = range.builder(SmallRng::seed_from_u64(3), 0);
        let mut built = Built::default();
        for seq in 0..60 {
            // Eleven sizes over sixty messages: misses first, hits after.
            let mut head = Vec::new();
            b.envelope(0, &mut built);
            b.build_head(seq, 0, &mut built, &mut head);
            assert!(
                built.body.is_none(),
                "a drawn size is written into the head"
            );
            let (_, body) = split_message(&head);
            assert_eq!(body_digest(body), built.digest);
            contiguous_and_parts(&range, seq);
        }

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.eml"), b"Subject: s\n\nline\n").unwrap();
        let mut f = plain("r4", 1);
        f.load_corpus(dir.path()).unwrap();
        let built = contiguous_and_parts(&Arc::new(f), 1);
        assert_eq!(built.body.as_deref(), Some(&b"line\r\n"[..]));
    }

    #[test]
    fn address_pools() {
        assert_eq!(
            AddressPool::from_pattern("u{0..999}@x.test").unwrap().len(),
            1000
        );
        assert!(AddressPool::from_pattern("u{9..1}@x").is_err());
        assert!(AddressPool::from_pattern("not an address").is_err());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("to.txt");
        std::fs::write(&p, "a@x.test pw\n# c\n\nb@x.test\n").unwrap();
        assert_eq!(AddressPool::from_file(&p).unwrap().len(), 2);
        std::fs::write(&p, "a@x.test\nbroken\n").unwrap();
        let e = AddressPool::from_file(&p).unwrap_err().to_string();
        assert!(e.contains(":2:"), "{e}");
        std::fs::write(&p, "# nothing\n").unwrap();
        assert!(AddressPool::from_file(&p).is_err());
    }
}
