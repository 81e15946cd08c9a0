//! The event-stream decoder (`proto::sse`, JMAP push) on server bytes, chunked or not.
//! Beyond "no panic":
//! - however the bytes arrive (cut at two points), the events and the error (if any) are
//!   those of the bytes fed at once;
//! - no event's data is over the cap, and nothing is decoded after a chunked body ended.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::sse::{Decoder, Error, Event};

fn decode(chunked: bool, cap: usize, pieces: &[&[u8]]) -> (Vec<Event>, Option<Error>, bool) {
    let mut d = Decoder::new(chunked, cap);
    let mut events = Vec::new();
    for p in pieces {
        if let Err(e) = d.feed(p, |e| events.push(e)) {
            return (events, Some(e), d.ended());
        }
    }
    (events, None, d.ended())
}

fuzz_target!(|input: (bool, u8, u16, u16, &[u8])| {
    let (chunked, sel, c1, c2, data) = input;
    let cap = [8, 64, 1024, 1 << 16][(sel & 3) as usize];
    let whole = decode(chunked, cap, &[data]);
    for e in &whole.0 {
        assert!(e.data.len() <= cap, "event data over the cap");
    }
    if data.is_empty() {
        return;
    }
    let mut cuts = [c1 as usize % data.len(), c2 as usize % data.len()];
    cuts.sort_unstable();
    let pieces = [&data[..cuts[0]], &data[cuts[0]..cuts[1]], &data[cuts[1]..]];
    assert_eq!(decode(chunked, cap, &pieces), whole, "cut at {cuts:?}");
});
