//! Reply texts grouped into error classes.

/// Replaces what varies between otherwise identical replies.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(120));
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if out.len() >= 120 {
            out.push('…');
            break;
        }
        if c == '<' {
            // <address> or <anything> → <…>
            let mut closed = false;
            for d in chars.by_ref() {
                if d == '>' {
                    closed = true;
                    break;
                }
            }
            out.push_str(if closed { "<…>" } else { "<…" });
        } else if c.is_ascii_digit() || (c.is_ascii_uppercase() && looks_like_id(&mut chars)) {
            out.push('#');
            while chars.peek().is_some_and(|d| d.is_ascii_alphanumeric()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The error class of one of spate's own messages that may end in what the server sent,
/// after the first ": " (`malformed reply line: <bytes>`): the wording before it, as
/// written (its numbers are spate's limits, not varying details). A server sending
/// garbage then makes one class, not one per attempt; the bytes go to the sample.
pub fn class_of(what: &str) -> String {
    match what.split_once(": ") {
        Some((head, _)) => head.to_string(),
        None => what.to_string(),
    }
}

/// `text` as a sample that is safe to print and bounded: control characters escaped,
/// at most 200 characters.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(220));
    for c in text.chars() {
        if out.len() >= 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// A run of alphanumerics containing digits after an uppercase letter (queue ids like
/// `4XyZ12AB`) counts as an id. Consumes nothing itself.
fn looks_like_id(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    let rest: String = chars
        .clone()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    rest.len() >= 5 && rest.chars().any(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod class_tests {
    use super::*;

    #[test]
    fn own_wording_keeps_its_numbers_and_drops_the_servers_bytes() {
        assert_eq!(
            class_of("reply line longer than 1000 bytes"),
            "reply line longer than 1000 bytes"
        );
        assert_eq!(
            class_of("malformed reply line: \u{1}xz9"),
            "malformed reply line"
        );
        assert_eq!(
            class_of("XMPP element is not UTF-8"),
            "XMPP element is not UTF-8"
        );
        assert_eq!(escaped("a\r\n\u{7}b"), "a\\r\\n\\u{7}b");
        assert!(escaped(&"x".repeat(1000)).chars().count() <= 201);
    }
}
