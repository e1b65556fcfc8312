//! A minimal blocking HTTP/1.1 client for loopback, and a `klock serve` child process: what
//! `klock conformance --spawn`, the tests and the benchmark use to talk to a real server.
//!
//! Contract: [`request`] sends one request on a new connection (`connection: close`) and
//! reads the whole answer: status, headers and body (the body is parsed as JSON when it is
//! JSON). [`Spawned::start`] runs `klock serve --listen 127.0.0.1:0 ARGS...`, reads the port
//! from the line it prints, and kills the process when dropped.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// Sends one request to `127.0.0.1:port` and reads the whole answer.
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
    let fail = |e: std::io::Error| format!("{method} {path}: {e}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(40)))
        .map_err(fail)?;
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

/// Parses a whole `connection: close` answer: status line, headers, body.
pub(crate) fn parse(bytes: &[u8]) -> Option<Answer> {
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

/// A `klock serve` process on a free loopback port, killed on drop.
pub struct Spawned {
    child: Child,
    pub port: u16,
}

impl Spawned {
    /// Runs `program serve --listen 127.0.0.1:0 args...` (stderr goes where ours goes).
    ///
    /// # Errors
    /// It cannot be started, or does not say where it listens.
    pub fn start(program: &Path, args: &[&str]) -> Result<Spawned, String> {
        let mut child = Command::new(program)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {} serve: {e}", program.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout from klock serve")?;
        let read = BufReader::new(stdout).read_line(&mut line);
        let port = read
            .ok()
            .and_then(|_| line.trim().rsplit(':').next()?.parse().ok());
        match port {
            Some(port) => Ok(Spawned { child, port }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "klock serve did not say where it listens: {line:?}"
                ))
            }
        }
    }

    /// The process id (to read its /proc entries).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process with SIGKILL and waits for it.
    pub fn kill(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
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
