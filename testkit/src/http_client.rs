//! A minimal blocking HTTP/1.1 client for loopback: what the conformance host and the tests
//! use to talk to a real server.
//!
//! Contract: [`request`] sends one request on a new connection (`connection: close`) and
//! reads the whole answer: status, headers and body (the body is parsed as JSON when it is
//! JSON; the parser is the Rust client's, `klock_client::http`). [`request_within`] gives up
//! after a timeout for connecting, writing and reading alike (a paused server accepts
//! connections and never answers).

pub use klock_client::http::{parse, percent_encode, Answer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends one request to `127.0.0.1:port` and reads the whole answer (40 s at most).
///
/// # Errors
/// The connection failed or was cut, or the answer is not HTTP.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Answer, String> {
    request_within(port, method, path, headers, body, Duration::from_secs(40))
}

/// [`request`], given up after `timeout` to connect, to write or to read.
///
/// # Errors
/// The connection failed, was cut or timed out, or the answer is not HTTP.
pub fn request_within(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<Answer, String> {
    let fail = |e: std::io::Error| format!("{method} {path}: {e}");
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).map_err(fail)?;
    s.set_read_timeout(Some(timeout)).map_err(fail)?;
    s.set_write_timeout(Some(timeout)).map_err(fail)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).map_err(fail)?;
    // The server may answer (413, 400) before reading all of a large body.
    let _ = s.write_all(body);
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).map_err(fail)?;
    parse(&bytes).ok_or_else(|| format!("{method} {path}: not an HTTP answer: {bytes:?}"))
}
