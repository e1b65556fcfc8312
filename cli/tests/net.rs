//! The tests of connections and transport (server/tests/net.rs) that need the `klock`
//! process itself: Unix sockets (what `klock serve --socket` prints, replaces and refuses).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{closed_by_server, open, Server};

// ---- item 5: Host and Content-Type -----------------------------------------------------------

/// TLS connections idle after the handshake, and a Unix socket's idle connections, close too.
#[test]
fn idle_tls_and_unix_socket_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (certified, cert, key) = support::self_signed(dir.path());
    let s = Server::start(&[
        "--memory",
        "--idle-timeout-ms",
        "500",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let config = support::trusting(&certified);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    // Handshake done; now idle. The server closes the socket.
    assert!(closed_by_server(&mut tcp, Duration::from_secs(20)));

    let socket = dir.path().join("k.sock");
    let mut child = spawn_on_socket(&socket, &["--idle-timeout-ms", "500"]);
    let mut idle = UnixStream::connect(&socket).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 64];
    let read = idle.read(&mut buf);
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(read, Ok(0)), "{read:?}");
}

/// `klock serve --socket PATH ARGS`, once it says it listens.
fn spawn_on_socket(socket: &Path, args: &[&str]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--memory", "--socket", socket.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("unix:"), "{line}");
    child
}

/// `klock serve --socket PATH ARGS` expected to refuse: its output once it exits (killed
/// after 20 s if it does not, as the old code, which served after deleting the path).
fn serve_on_socket(socket: &Path, data: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--socket", socket.to_str().unwrap()])
        .args(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..400 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

#[test]
fn socket_path_holding_a_file_or_a_live_socket_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    // The live log of a data file: `--socket k.redb.log`.
    let data = dir.path().join("k.redb");
    let log = dir.path().join("k.redb.log");
    {
        let s = Server::start(&["--data", data.to_str().unwrap()]);
        open(&s, "default", "a");
    }
    let kept = std::fs::read(&log).unwrap();
    assert!(!kept.is_empty());
    let out = serve_on_socket(&log, &["--data", data.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SOCKET_PATH_NOT_A_SOCKET"),
        "{err}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), kept, "the log is untouched");
    // A directory too.
    let out = serve_on_socket(dir.path(), &["--memory"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SOCKET_PATH_NOT_A_SOCKET"),
        "{err}"
    );

    // A socket a server answers on is refused, and that server keeps serving.
    let socket = dir.path().join("k.sock");
    let mut live = spawn_on_socket(&socket, &[]);
    let out = serve_on_socket(&socket, &["--memory"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SOCKET_IN_USE"),
        "{err}"
    );
    let mut c = UnixStream::connect(&socket).unwrap();
    c.write_all(b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let _ = live.kill();
    let _ = live.wait();

    // A stale socket (its server is gone: SIGKILL leaves the file) is replaced.
    assert!(socket.exists());
    let mut again = spawn_on_socket(&socket, &[]);
    let ok = UnixStream::connect(&socket).is_ok();
    let _ = again.kill();
    let _ = again.wait();
    assert!(ok);
}
