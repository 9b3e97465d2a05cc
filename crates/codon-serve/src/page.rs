//! The web page at `/`: plain HTML, CSS and JavaScript over the JSON API, embedded in the binary
//! (no build step, no Node toolchain).
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page, one file.
const INDEX: &str = include_str!("../web/index.html");

/// `GET /`.
pub async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}
