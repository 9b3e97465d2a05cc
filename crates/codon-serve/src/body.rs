//! Request bodies: read within their size limit and deadline, and parsed as JSON with errors in
//! JSON's words.
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use crate::reply::error;

/// A request body of at most `limit` bytes: 413 past the limit (read after the API key is
/// checked, and answered in JSON like every other error).
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|e| body_error(&e, limit))
}

/// A body as JSON: 400 when it does not parse, in JSON's words. Its time is in proportion to
/// the body's size: called off the async threads.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Response> {
    // serde would say "expected struct PredictRequest with 2 elements": the caller wants JSON's words.
    let kind = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => Some("an array"),
        Some(b'"') => Some("a string"),
        Some(b'n') => Some("null"),
        Some(b't' | b'f') => Some("a boolean"),
        Some(b'-' | b'0'..=b'9') => Some("a number"),
        None => Some("empty"),
        Some(_) => None,
    };
    if let Some(kind) = kind {
        return Err(error(StatusCode::BAD_REQUEST, format!("the body must be a JSON object {{...}}, not {kind}")));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("the request body: {}", json_words(&e.to_string()))))
}

/// A request body of at most `limit` bytes as JSON ([`read_body`], then [`parse_json`] on the
/// blocking pool).
pub(crate) async fn read_json<T: serde::de::DeserializeOwned + Send + 'static>(
    body: Body,
    limit: usize,
) -> Result<T, Response> {
    let bytes = read_body(body, limit).await?;
    tokio::task::spawn_blocking(move || parse_json(&bytes))
        .await
        .unwrap_or_else(|_| Err(error(StatusCode::INTERNAL_SERVER_ERROR, "reading the request failed")))
}

/// Why a body could not be read: its deadline (408), its size limit (413), or the
/// connection (400).
fn body_error(e: &axum::Error, limit: usize) -> Response {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(late) = c.downcast_ref::<crate::net::BodyTimeout>() {
            return error(StatusCode::REQUEST_TIMEOUT, late.to_string());
        }
        if c.is::<http_body_util::LengthLimitError>() {
            return error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body: over {limit} bytes"));
        }
        cause = c.source();
    }
    error(StatusCode::BAD_REQUEST, format!("the request body: {e}"))
}

/// A serde message in JSON's words: `struct Options with 7 elements` is an object, a
/// sequence an array, a map an object.
fn json_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("struct ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "struct ".len()..];
        let name_end = after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(after.len());
        let mut tail = &after[name_end..];
        // " with 2 elements" / " with 1 element"
        if let Some(with) = tail.strip_prefix(" with ") {
            let digits = with.find(|c: char| !c.is_ascii_digit()).unwrap_or(with.len());
            if digits > 0 {
                let words = &with[digits..];
                if let Some(t) = words.strip_prefix(" elements").or_else(|| words.strip_prefix(" element")) {
                    tail = t;
                }
            }
        }
        out.push_str("a JSON object");
        rest = tail;
    }
    out.push_str(rest);
    out.replace("invalid type: sequence", "invalid type: array").replace("invalid type: map", "invalid type: object")
}
