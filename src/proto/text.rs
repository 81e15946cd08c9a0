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

/// A run of alphanumerics containing digits after an uppercase letter (queue ids like
/// `4XyZ12AB`) counts as an id. Consumes nothing itself.
fn looks_like_id(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    let rest: String = chars
        .clone()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    rest.len() >= 5 && rest.chars().any(|c| c.is_ascii_digit())
}
