//! Error answers: JSON with a message that never echoes megabytes of the request ([`clip`]).
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ErrorBody;

/// A JSON error answer (its message [`clip`]ped: it never echoes megabytes of the request).
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody { error: clip(&message.into()) })).into_response()
}

/// Most characters of the caller's text an error message repeats in one piece (a quoted value
/// or a word).
const ECHO_CHARS: usize = 100;

/// Most characters in an error message.
const MESSAGE_CHARS: usize = 1_000;

/// `message` with every quoted value and every word longer than [`ECHO_CHARS`] cut to that
/// length (saying how much was cut), and the whole cut to [`MESSAGE_CHARS`]: errors name what
/// they refuse, but a request of long names does not come back as a long answer.
pub(crate) fn clip(message: &str) -> String {
    if message.chars().count() <= ECHO_CHARS {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len().min(4 * MESSAGE_CHARS));
    // Inside a quote: its character, the characters kept and those cut.
    let mut quote: Option<char> = None;
    let (mut kept, mut cut, mut escaped) = (0usize, 0usize, false);
    let flush = |out: &mut String, cut: &mut usize| {
        if *cut > 0 {
            out.push_str(&format!("… ({cut} more characters)"));
            *cut = 0;
        }
    };
    for c in message.chars() {
        match quote {
            Some(q) if c == q && !escaped => {
                flush(&mut out, &mut cut);
                out.push(c);
                quote = None;
                kept = 0;
            }
            Some(_) => {
                escaped = c == '\\' && !escaped;
                if kept < ECHO_CHARS {
                    out.push(c);
                    kept += 1;
                } else {
                    cut += 1;
                }
            }
            None => {
                if c.is_whitespace() {
                    flush(&mut out, &mut cut);
                    kept = 0;
                    out.push(c);
                } else if c == '"' || c == '`' {
                    flush(&mut out, &mut cut);
                    out.push(c);
                    quote = Some(c);
                    (kept, escaped) = (0, false);
                } else if kept < ECHO_CHARS {
                    out.push(c);
                    kept += 1;
                } else {
                    cut += 1;
                }
            }
        }
    }
    flush(&mut out, &mut cut);
    if out.chars().count() > MESSAGE_CHARS {
        let end = out.char_indices().nth(MESSAGE_CHARS).map_or(out.len(), |(i, _)| i);
        out.truncate(end);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_long_quoted_values_and_words_and_keeps_the_rest() {
        assert_eq!(clip("short"), "short");
        let name = "y".repeat(5_000);
        let clipped = clip(&format!("proteins[0]: unknown organism \"{name}\"; did you mean \"Homo sapiens\"?"));
        assert_eq!(
            clipped,
            format!(
                "proteins[0]: unknown organism \"{}… (4900 more characters)\"; did you mean \"Homo sapiens\"?",
                "y".repeat(100)
            )
        );
        let word = clip(&format!("Invalid organism name: {name}. Please use a valid name."));
        assert!(word.starts_with(&format!("Invalid organism name: {}…", "y".repeat(100))), "{word}");
        assert!(word.ends_with("Please use a valid name."), "{word}");
        // An escaped quote does not end the value.
        let escaped = clip(&format!("\"{}\\\"{}\" after", "a".repeat(99), "b".repeat(300)));
        assert!(escaped.ends_with("more characters)\" after"), "{escaped}");
        let many = clip(&"word ".repeat(1_000));
        assert_eq!(many.chars().count(), MESSAGE_CHARS + 1);
    }
}
