//! The web page at `/`: plain HTML, CSS and JavaScript over the JSON API, embedded in the binary
//! (no build step, no Node toolchain).
use std::sync::LazyLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

/// The page, one file.
const INDEX: &str = include_str!("../web/index.html");

/// The page's Content-Security-Policy: only this server's scripts, styles and API, its own
/// inline `<script>` and `<style>` blocks by their SHA-256 (so no injected script runs), and
/// no framing (against clickjacking).
static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let hashes = |tag: &str| -> String {
        inline_blocks(INDEX, tag)
            .map(|block| {
                let digest = Sha256::digest(block.as_bytes());
                format!(" 'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest))
            })
            .collect()
    };
    let policy = format!(
        "default-src 'self'; script-src 'self'{}; style-src 'self'{}; img-src 'self' data:; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        hashes("script"),
        hashes("style")
    );
    // Base64 and ASCII text only: a valid header value.
    HeaderValue::from_str(&policy).unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"))
});

/// The text of each inline `<tag>` block of `html` (a block with attributes, such as a
/// `src`, is not inline and is skipped).
fn inline_blocks<'a>(html: &'a str, tag: &str) -> impl Iterator<Item = &'a str> + 'a {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut rest = html;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let end = start + rest[start..].find(&close)?;
        let block = &rest[start..end];
        rest = &rest[end + close.len()..];
        Some(block)
    })
}

/// `GET /`: the page with its security headers.
pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (header::CONTENT_SECURITY_POLICY, POLICY.clone()),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        INDEX,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inline_script_and_style_is_in_the_policy() {
        let policy = POLICY.to_str().unwrap();
        assert!(policy.contains("frame-ancestors 'none'") && !policy.contains("unsafe-inline"), "{policy}");
        let scripts = INDEX.matches("<script").count();
        let styles = INDEX.matches("<style").count();
        assert_eq!(inline_blocks(INDEX, "script").count(), scripts, "every <script> is a plain inline block");
        assert_eq!(inline_blocks(INDEX, "style").count(), styles, "every <style> is a plain inline block");
        assert_eq!(policy.matches("'sha256-").count(), scripts + styles, "{policy}");
        assert_eq!(
            inline_blocks("<p><script>a</script><script src=x></script><script>b</script>", "script")
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
