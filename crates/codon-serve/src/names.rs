//! What a host name, a CORS origin and an API key may be: the words the server's settings are
//! checked with and the Host header read with.
use std::net::IpAddr;

/// A Host header's name (an IPv6 literal keeps its brackets), without the port; `None` when it
/// is not `name[:port]`.
pub(crate) fn host_name(host: &str) -> Option<&str> {
    let host = host.trim();
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        (&host[..=end], host[end + 1..].strip_prefix(':'))
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    (!name.is_empty() && port_ok).then_some(name)
}

/// A DNS name compared as DNS compares it: lower case, without a trailing dot.
pub(crate) fn normal_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Why a setting cannot work, in words for the person starting the server; `None` when it can.
pub(crate) fn api_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("empty (every request would be refused); leave it out for no key")
    } else if !key.bytes().all(|b| b.is_ascii_graphic()) {
        Some("use printable ASCII without spaces (a browser or curl cannot send anything else in a header)")
    } else {
        None
    }
}

/// Why `origin` can never match a browser's Origin header; `None` when it can (`*`: any).
/// An origin is `scheme://host[:port]`, lower case, with nothing after it.
pub(crate) fn origin_problem(origin: &str) -> Option<String> {
    if origin == "*" {
        return None;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return Some("an origin is scheme://host[:port], such as https://lab.example.org".into());
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
        && scheme.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
    if !scheme_ok {
        return Some(format!("scheme {scheme:?}: lower-case letters, such as https"));
    }
    if rest.contains(['/', '?', '#']) {
        return Some("an origin has no path, not even a trailing /: scheme://host[:port]".into());
    }
    let Some(host) = host_name(rest) else {
        return Some("an origin is scheme://host[:port], the port a number".into());
    };
    let port = rest[host.len()..].strip_prefix(':');
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Some("the port: a number up to 65535".into());
    }
    if (scheme, port) == ("http", Some("80")) || (scheme, port) == ("https", Some("443")) {
        return Some(format!("browsers leave out the default port: {scheme}://{host}"));
    }
    let literal = host.starts_with('[') && host.ends_with(']') && host[1..host.len() - 1].parse::<IpAddr>().is_ok();
    if !literal && name_problem(host).is_some() {
        return Some(format!("host {host:?}: lower-case letters, digits, '-' and '.' (as browsers send it)"));
    }
    None
}

/// Why `name` is not a DNS name a browser would send in Host; `None` when it is.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    let labels_ok = name.split('.').all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-'))
        && name.len() <= 253;
    let chars_ok = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if name.is_empty() {
        Some("empty")
    } else if !chars_ok {
        Some("a DNS name: lower-case letters, digits, '-' and '.', no scheme, port or path")
    } else if !labels_ok {
        Some("a DNS name's labels are 1-63 characters and do not start or end with '-'")
    } else {
        None
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_origins_that_can_never_match_are_named() {
        assert!(api_key_problem("").is_some() && api_key_problem("a b").is_some() && api_key_problem("clé").is_some());
        assert!(api_key_problem("s3cret-KEY_1.~").is_none());
        for bad in [
            "http://good.example/",
            "bad origin",
            "good.example",
            "HTTPS://x.example",
            "http://x.example:99999",
            "https://x.example:443",
            "http://Good.example",
            "http://x.example/path",
            "http://",
        ] {
            assert!(origin_problem(bad).is_some(), "{bad}");
        }
        for ok in
            ["*", "https://lab.example.org", "http://127.0.0.1:8080", "http://[::1]:3000", "http://localhost:5173"]
        {
            assert_eq!(origin_problem(ok), None, "{ok}");
        }
        assert!(name_problem("lab.example.org").is_none());
        for bad in ["", "lab.example.org:8080", "http://lab", "-x.example", "a b"] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
    }
}
