//! Kept-alive connections to the server: the transport under [`crate::transport::Transport`].
//!
//! Contract:
//! - [`Pool::send`] writes one HTTP/1.1 request and returns the bytes of its whole answer: the
//!   head as it came, then the body, read by `content-length`, de-chunked, or (an answer with
//!   neither) read until the server closes. It uses an idle connection of the pool when one is
//!   usable, else a new one (TCP, a Unix socket, or TLS with the client's connector).
//! - One request at a time per connection: a connection in use belongs to its request, so
//!   concurrent requests of one client (a long poll, a heartbeat beside it) take different
//!   connections. It goes back to the pool only after a whole answer that leaves it reusable
//!   (HTTP/1.1, framed by length or chunks, no `connection: close`, nothing read past it); a
//!   request that fails, times out or is cancelled (its future dropped) closes its connection.
//! - An idle connection is not used after [`IDLE_EXPIRY`], nor once the server closed it or
//!   sent anything unasked (checked without blocking just before reuse); at most [`MAX_IDLE`]
//!   are kept, the most recently used first.
//! - A request that fails on a reused connection before any byte of an answer (the server
//!   closed it as the request left) is sent once more on a new connection: every request of
//!   this client is safe to repeat (a read, or a write carrying an `Idempotency-Key`). Any
//!   other failure is returned, as for a new connection, and the callers' own retry rules
//!   apply.
//! - Connections are registered with the tokio runtime that opened them: a client (and its
//!   pool) is used within one runtime (each `klock` tool runs on one; the blocking facade has its own).

use crate::transport::Endpoint;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// How long an idle connection may be reused: well under the server's own idle timeout (60 s
/// by default, `--idle-timeout-ms`) and the idle timeouts of proxies and NATs that drop a
/// connection without a word; the same order as httpx (5 s) and Node's fetch (4 s).
pub const IDLE_EXPIRY: Duration = Duration::from_secs(4);

/// Most idle connections kept (beyond them the oldest is closed).
pub const MAX_IDLE: usize = 8;

/// The longest answer head read (the server's are a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;

/// The idle connections of one client, shared by its clones.
#[derive(Clone, Default)]
pub struct Pool {
    idle: Arc<Mutex<Vec<Conn>>>,
}

/// One open connection.
struct Conn {
    io: Io,
    /// When its last answer ended.
    idle_since: Instant,
}

enum Io {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

impl Io {
    fn stream(&mut self) -> &mut dyn Duplex {
        match self {
            Io::Tcp(s) => s,
            Io::Unix(s) => s,
            Io::Tls(s) => s.as_mut(),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Io::Tcp(s) => s.as_raw_fd(),
            Io::Unix(s) => s.as_raw_fd(),
            Io::Tls(s) => s.as_raw_fd(),
        }
    }
}

/// Opens a new connection to `endpoint` (TLS through `tls`, which an `https://` endpoint has).
async fn connect(endpoint: &Endpoint, tls: Option<&tokio_rustls::TlsConnector>) -> io::Result<Io> {
    Ok(match endpoint {
        Endpoint::Tcp(addr) => {
            let tcp = TcpStream::connect(addr).await?;
            // Requests are small and whole: send each at once, never held for the last ACK.
            tcp.set_nodelay(true)?;
            Io::Tcp(tcp)
        }
        Endpoint::Unix(path) => Io::Unix(UnixStream::connect(path).await?),
        Endpoint::Tls { addr, host } => {
            let tls = tls.expect("with_ca made the connector");
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            Io::Tls(Box::new(tls.connect(name, tcp).await?))
        }
    })
}

impl Conn {
    /// Still fit for a request: not idle too long, not closed by the server, nothing unasked
    /// waiting on it (an answer to no request, or a TLS alert: either way it is done).
    fn usable(&self) -> bool {
        if self.idle_since.elapsed() >= IDLE_EXPIRY {
            return false;
        }
        let mut byte = 0u8;
        // SAFETY: recv(2) of at most one byte into a local we own, on the descriptor this
        // connection owns; MSG_PEEK leaves any byte where it is, MSG_DONTWAIT never blocks.
        let n = unsafe {
            libc::recv(
                self.io.fd(),
                (&raw mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }
}

impl Pool {
    /// Sends `request` and returns its whole answer (module contract).
    ///
    /// # Errors
    /// The connection cannot be made, breaks, or the answer is not HTTP/1.1.
    pub async fn send(
        &self,
        endpoint: &Endpoint,
        tls: Option<&tokio_rustls::TlsConnector>,
        request: &[u8],
    ) -> io::Result<Vec<u8>> {
        if let Some(mut conn) = self.take() {
            match exchange(&mut conn.io, request).await {
                Ok((answer, reusable)) => {
                    self.put(conn, reusable);
                    return Ok(answer);
                }
                // Nothing came back: the server closed it as the request left, and may not
                // have read it; the request is safe to repeat (module contract).
                Err(broken) if !broken.answered => {}
                Err(broken) => return Err(broken.error),
            }
        }
        let mut conn = Conn {
            io: connect(endpoint, tls).await?,
            idle_since: Instant::now(),
        };
        let (answer, reusable) = exchange(&mut conn.io, request)
            .await
            .map_err(|broken| broken.error)?;
        self.put(conn, reusable);
        Ok(answer)
    }

    /// The most recently used idle connection still usable; the unusable ones are closed.
    fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().expect("pool lock");
        while let Some(conn) = idle.pop() {
            if conn.usable() {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, mut conn: Conn, reusable: bool) {
        if !reusable {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().expect("pool lock");
        idle.push(conn);
        if idle.len() > MAX_IDLE {
            idle.remove(0);
        }
    }
}

/// A request that failed, and whether any byte of an answer had come.
struct Broken {
    error: io::Error,
    answered: bool,
}

/// Reads a connection's answer into one buffer, noting whether any byte came.
struct Reader<'a> {
    io: &'a mut dyn Duplex,
    buf: Vec<u8>,
}

impl Reader<'_> {
    /// Reads more; `false` at the end of the stream.
    async fn more(&mut self) -> io::Result<bool> {
        self.buf.reserve(8 * 1024);
        match self.io.read_buf(&mut self.buf).await {
            Ok(n) => Ok(n > 0),
            // A TLS peer that closes without close_notify: the end of the stream, as for TCP.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads until `buf` holds at least `len` bytes.
    async fn fill(&mut self, len: usize) -> io::Result<()> {
        while self.buf.len() < len {
            if !self.more().await? {
                return Err(cut_short());
            }
        }
        Ok(())
    }

    /// Reads until a CRLF at or after `from`; the index of the CR.
    async fn line(&mut self, from: usize) -> io::Result<usize> {
        loop {
            if let Some(at) = find(&self.buf[from..], b"\r\n") {
                return Ok(from + at);
            }
            if self.buf.len() - from > MAX_HEAD {
                return Err(not_http("a chunk line or trailer too long"));
            }
            if !self.more().await? {
                return Err(cut_short());
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn cut_short() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the server closed the connection before a whole answer",
    )
}

fn not_http(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the answer is not HTTP/1.1: {why}"),
    )
}

/// Writes `request` and reads one answer: its bytes (head, then the body as
/// [`crate::http::parse`] reads it) and whether the connection can carry another request.
async fn exchange(io: &mut Io, request: &[u8]) -> Result<(Vec<u8>, bool), Broken> {
    let written = async {
        let stream = io.stream();
        stream.write_all(request).await?;
        stream.flush().await
    };
    if let Err(error) = written.await {
        return Err(Broken {
            error,
            answered: false,
        });
    }
    let mut reader = Reader {
        io: io.stream(),
        buf: Vec::new(),
    };
    let read = read_answer(&mut reader).await;
    read.map_err(|error| Broken {
        error,
        answered: !reader.buf.is_empty(),
    })
}

/// What the head says about the body and the connection.
struct Framing {
    length: Option<usize>,
    chunked: bool,
    /// No body whatever the headers say (204, 304).
    bodiless: bool,
    keep_alive: bool,
}

fn framing(head: &[u8]) -> io::Result<Framing> {
    let head = std::str::from_utf8(head).map_err(|_| not_http("a head that is not text"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or_default();
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| not_http("no status code"))?;
    if status < 200 {
        // An interim answer (100 Continue) comes only to a request that asked for one.
        return Err(not_http(
            "an interim 1xx answer, which no request of this client asks for",
        ));
    }
    let mut out = Framing {
        length: None,
        chunked: false,
        bodiless: status == 204 || status == 304,
        // HTTP/1.0 closes unless asked otherwise; this client never asks.
        keep_alive: version == "HTTP/1.1",
    };
    for (name, value) in lines.filter_map(|l| l.split_once(':')) {
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            let length = value
                .parse()
                .map_err(|_| not_http("a content-length that is not a number"))?;
            out.length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            out.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            out.keep_alive &= !value.to_ascii_lowercase().contains("close");
        }
    }
    Ok(out)
}

async fn read_answer(reader: &mut Reader<'_>) -> io::Result<(Vec<u8>, bool)> {
    let head_end = loop {
        if let Some(at) = find(&reader.buf, b"\r\n\r\n") {
            break at + 4;
        }
        if reader.buf.len() > MAX_HEAD {
            return Err(not_http("a head over 64 KiB"));
        }
        if !reader.more().await? {
            return Err(cut_short());
        }
    };
    let framing = framing(&reader.buf[..head_end - 4])?;
    let (body, end, whole) = if framing.bodiless {
        (Vec::new(), head_end, true)
    } else if framing.chunked {
        let (body, end) = chunks(reader, head_end).await?;
        (body, end, true)
    } else if let Some(length) = framing.length {
        reader.fill(head_end + length).await?;
        let end = head_end + length;
        (reader.buf[head_end..end].to_vec(), end, true)
    } else {
        // Neither length nor chunks: the body ends where the server closes.
        while reader.more().await? {}
        (reader.buf[head_end..].to_vec(), reader.buf.len(), false)
    };
    let reusable = whole && framing.keep_alive && reader.buf.len() == end;
    let mut answer = reader.buf[..head_end].to_vec();
    answer.extend_from_slice(&body);
    Ok((answer, reusable))
}

/// Decodes a chunked body starting at `at`; the body and where the answer ends.
async fn chunks(reader: &mut Reader<'_>, mut at: usize) -> io::Result<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    loop {
        let cr = reader.line(at).await?;
        let size_text = std::str::from_utf8(&reader.buf[at..cr]).unwrap_or_default();
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| not_http("a chunk size that is not hexadecimal"))?;
        at = cr + 2;
        if size == 0 {
            // Trailers, if any, up to an empty line.
            loop {
                let cr = reader.line(at).await?;
                let empty = cr == at;
                at = cr + 2;
                if empty {
                    return Ok((body, at));
                }
            }
        }
        reader.fill(at + size + 2).await?;
        if &reader.buf[at + size..at + size + 2] != b"\r\n" {
            return Err(not_http("a chunk not ended by CRLF"));
        }
        body.extend_from_slice(&reader.buf[at..at + size]);
        at += size + 2;
    }
}
