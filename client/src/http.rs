//! The HTTP/1.1 the client reads: a whole answer parsed into its status, headers and
//! body, and the percent-encoding of a path segment or query value.
//!
//! Contract: [`parse`] takes the bytes of one whole answer (its head, then its body: as read
//! until the server closed, or as [`crate::conn`] reads it, by length or de-chunked) and gives
//! its status, headers and body (parsed as JSON when it is JSON, else `Null`), or `None` when
//! the bytes are not an HTTP answer. The test kit's blocking loopback client reads answers
//! with it too.

use serde_json::Value;

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body as it came.
    pub raw: Vec<u8>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

impl Answer {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }
}

/// Parses a whole answer: status line, headers, body.
pub fn parse(bytes: &[u8]) -> Option<Answer> {
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..split]).ok()?;
    let raw = bytes[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Some(Answer {
        status,
        headers,
        raw,
        body,
    })
}

/// Percent-encodes everything but the unreserved characters, for a path segment or a query
/// value.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
