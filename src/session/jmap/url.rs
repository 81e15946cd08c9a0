//! Where a redirect or a URL of the session resource points on the server a session talks
//! to: RFC 3986 §5.2 reference resolution, the part a JMAP client meets. Cyrus answers
//! `/.well-known/jmap` with a redirect and names its API with a relative URL (`/jmap/`);
//! other servers name theirs absolutely. No I/O.

/// The path (with its query) on this server that `reference` names, resolved against
/// `base`, a path on `authority` reached over http (`tls`: https); None when the reference
/// names another scheme or server, which one connection cannot follow.
pub fn resolve(tls: bool, authority: &str, base: &str, reference: &str) -> Option<String> {
    let reference = reference.trim();
    let reference = reference.split_once('#').map_or(reference, |(r, _)| r);
    if let Some((scheme, rest)) = scheme_of(reference) {
        let ours = if tls { "https" } else { "http" };
        if !scheme.eq_ignore_ascii_case(ours) {
            return None;
        }
        return same_server(tls, authority, rest.strip_prefix("//")?);
    }
    if let Some(rest) = reference.strip_prefix("//") {
        return same_server(tls, authority, rest);
    }
    let base = base.split_once('#').map_or(base, |(b, _)| b);
    let (base_path, _) = base.split_once('?').unwrap_or((base, ""));
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let merged = if path.is_empty() {
        base_path.to_string()
    } else if path.starts_with('/') {
        path.to_string()
    } else {
        // The base's last segment is replaced (RFC 3986 §5.2.3).
        let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
        format!("{dir}{path}")
    };
    let mut out = remove_dot_segments(&merged);
    match query {
        Some(q) => {
            out.push('?');
            out.push_str(q);
        }
        None if path.is_empty() => {
            if let Some((_, q)) = base.split_once('?') {
                out.push('?');
                out.push_str(q);
            }
        }
        None => {}
    }
    Some(out)
}

/// The authority, port and path of a server's URL after its `scheme://` (`tls`: the
/// scheme's default port is 443, else 80); the path is the session resource's,
/// `/.well-known/jmap` when none is given. None when malformed (no host, user
/// information, a bad port).
pub fn target(rest: &str, tls: bool) -> Option<(String, u16, String)> {
    let (authority, path) = match rest.find('/') {
        Some(i) if rest[i..].len() > 1 => (&rest[..i], &rest[i..]),
        Some(i) => (&rest[..i], "/.well-known/jmap"),
        None => (rest, "/.well-known/jmap"),
    };
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => authority.rsplit_once(':').map(|(_, p)| p),
    };
    let port = match port.map(str::parse::<u16>) {
        None if tls => 443,
        None => 80,
        Some(Ok(p)) if p > 0 => p,
        Some(_) => return None,
    };
    Some((authority.to_string(), port, path.to_string()))
}

/// `scheme:rest` when `r` starts with a scheme (RFC 3986 §3.1).
fn scheme_of(r: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = r.split_once(':')?;
    let mut chars = scheme.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    ok.then_some((scheme, rest))
}

/// The path of `rest` (an authority and a path) when the authority is this server's.
fn same_server(tls: bool, authority: &str, rest: &str) -> Option<String> {
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    if normal(tls, &rest[..end]) != normal(tls, authority) {
        return None;
    }
    let path = &rest[end..];
    Some(match path.strip_prefix('?') {
        Some(_) => format!("/{path}"),
        None if path.is_empty() => "/".to_string(),
        None => remove_dot_segments(path),
    })
}

/// An authority without user information, lowercased, with the scheme's port spelled out.
fn normal(tls: bool, authority: &str) -> String {
    let a = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let a = a.to_ascii_lowercase();
    let has_port = match a.rfind(']') {
        Some(i) => a[i..].contains(':'),
        None => a.contains(':'),
    };
    if has_port {
        a
    } else {
        format!("{a}:{}", if tls { 443 } else { 80 })
    }
}

/// RFC 3986 §5.2.4 on an absolute path.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *s {
            "." | ".." => {
                if *s == ".." {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// The Location header of an HTTP response's head (the bytes up to its blank line).
pub fn location(head: &[u8]) -> Option<String> {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(head.len());
    head[..end].split(|&b| b == b'\n').skip(1).find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.eq_ignore_ascii_case(b"location")
            .then(|| String::from_utf8_lossy(&value[1..]).trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::{location, resolve};

    const A: &str = "127.0.0.1:8080";

    #[test]
    fn relative_and_absolute_urls_resolve_to_paths_on_this_server() {
        let r = |base: &str, reference: &str| resolve(false, A, base, reference);
        // Cyrus: the redirect from /.well-known/jmap and its relative apiUrl.
        assert_eq!(
            r("/.well-known/jmap", "http://127.0.0.1:8080/jmap").as_deref(),
            Some("/jmap")
        );
        assert_eq!(r("/jmap", "/jmap/").as_deref(), Some("/jmap/"));
        assert_eq!(r("/jmap/session", "api").as_deref(), Some("/jmap/api"));
        assert_eq!(r("/a/b/c", "../d?x=1").as_deref(), Some("/a/d?x=1"));
        assert_eq!(r("/a/b?q", "").as_deref(), Some("/a/b?q"));
        assert_eq!(r("/a/b", "./").as_deref(), Some("/a/"));
        assert_eq!(r("/a", "//127.0.0.1:8080/x").as_deref(), Some("/x"));
        assert_eq!(r("/a", "HTTP://127.0.0.1:8080").as_deref(), Some("/"));
        assert_eq!(r("/a", "/jmap/#frag").as_deref(), Some("/jmap/"));
        // Another server or scheme is not followed.
        assert_eq!(r("/a", "http://127.0.0.1:8081/jmap"), None);
        assert_eq!(r("/a", "https://127.0.0.1:8080/jmap"), None);
        assert_eq!(r("/a", "//example.test/jmap"), None);
        // The scheme's port may be left out on either side.
        assert_eq!(
            resolve(true, "h.test", "/", "https://H.test:443/jmap/").as_deref(),
            Some("/jmap/")
        );
        assert_eq!(
            resolve(false, "[::1]:80", "/", "http://[::1]/j").as_deref(),
            Some("/j")
        );
    }

    #[test]
    fn the_location_header_is_found_in_a_head() {
        let head = b"HTTP/1.1 301 Moved Permanently\r\nConnection: Upgrade\r\nlocation:  http://h/jmap \r\nContent-Length: 0\r\n\r\n";
        assert_eq!(location(head).as_deref(), Some("http://h/jmap"));
        assert_eq!(location(b"HTTP/1.1 301 Moved\r\n\r\nLocation: /x"), None);
    }
}
