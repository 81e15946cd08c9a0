//! The embedded server's IMAP framing and command parser on client bytes: never panic, and
//! a literal announced at the end of a line is what `literal_at_end` says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::imap;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n').take(16) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some((n, _sync)) = imap::literal_at_end(line) {
            assert!(line.ends_with(b"}"));
            assert!(n.to_string().len() <= 12);
        }
    }
    let _ = imap::parse(data);
});
