//! The embedded server's SMTP command parser and DATA decoder on client bytes: never panic,
//! a parsed command survives a round trip through its canonical form, and the decoder gives
//! the same result however the input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::smtp::command;
use spate::proto::smtp::data::{BareLf, DataDecoder};

fuzz_target!(|input: (&[u8], u8)| {
    let (data, split) = input;
    for line in data.split(|&b| b == b'\n').take(64) {
        match command::parse(line) {
            Ok(cmd) => {
                let wire = cmd.encode();
                let again = command::parse(wire.strip_suffix(b"\r\n").unwrap_or(&wire));
                assert_eq!(again.as_ref(), Ok(&cmd), "{:?}", String::from_utf8_lossy(&wire));
            }
            Err(e) => {
                let _ = e.code();
            }
        }
    }
    let whole = {
        let mut d = DataDecoder::new(1 << 20, BareLf::Normalize);
        let p = d.feed(data);
        (p.done, p.consumed, d.take())
    };
    let at = if data.is_empty() { 0 } else { split as usize % data.len() };
    let mut d = DataDecoder::new(1 << 20, BareLf::Normalize);
    let p1 = d.feed(&data[..at]);
    let (done, consumed) = if p1.done {
        (true, p1.consumed)
    } else {
        let p2 = d.feed(&data[at..]);
        (p2.done, at + p2.consumed)
    };
    assert_eq!((done, consumed, d.take()), whole);
});
