//! The client's SMTP reply parser on server bytes: never panics, never reads past its caps,
//! and a complete reply parses the same whatever comes after it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spate::proto::smtp::reply::{self, Capabilities, Parse};

fuzz_target!(|data: &[u8]| {
    match reply::parse(data) {
        Ok(Parse::Complete(r, used)) => {
            assert!(used <= data.len());
            assert!((100..600).contains(&r.code));
            // Same reply from exactly its own bytes.
            match reply::parse(&data[..used]) {
                Ok(Parse::Complete(again, n)) => {
                    assert_eq!(n, used);
                    assert_eq!(again.code, r.code);
                }
                other => panic!("prefix re-parse gave {other:?}"),
            }
            let _ = r.enhanced();
            let _ = r.normalized_text();
            let _ = Capabilities::from_ehlo(&r);
        }
        Ok(Parse::Incomplete) => {
            // Incomplete means no LF in a legal first line yet: any prefix is incomplete too.
            if !data.is_empty() {
                assert!(matches!(
                    reply::parse(&data[..data.len() - 1]),
                    Ok(Parse::Incomplete) | Err(_)
                ));
            }
        }
        Err(_) => {}
    }
});
