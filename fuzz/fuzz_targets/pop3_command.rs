//! The embedded server's POP3 command parser and TOP on client bytes: never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::pop3;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n').take(64) {
        let _ = pop3::parse(line);
    }
    let lines = data.first().copied().unwrap_or(0) as u32;
    let top = pop3::top(data, lines);
    assert!(top.len() <= data.len());
});
