//! "Start a server" for a Rust test: in this process through the server library's `start`, or
//! as a `klock serve` process; either way on a free loopback port, from `klock serve`'s flags,
//! with the same calls to it.
//!
//! Contract:
//! - [`Server::start`] parses the flags with the `klock` command's own parser (so a test reads
//!   as the command line it stands for) and serves on its own runtime (two workers, as
//!   `klock serve`). [`Server::try_start`] gives the refusal instead (the message `klock serve`
//!   prints after `klock serve: `).
//! - [`Server::spawn`] runs the binary instead, for what needs a process.
//! - [`Server::kill`] and drop stop it at once: a process gets SIGKILL; an in-process server's
//!   runtime is dropped, every task (connections, the engine) cancelled where it waits, and
//!   its data file is closed before `kill` returns, so a test can start another on it.

use crate::http_client::request;
use crate::process::Spawned;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// A server on a free loopback port, and requests to it.
pub struct Server {
    port: u16,
    running: Running,
}

enum Running {
    InProcess {
        /// `None` once dropped (the order matters: the server's handle, then its runtime).
        runtime: Option<tokio::runtime::Runtime>,
        server: Option<klock_server::serve::Server>,
    },
    Process(Spawned),
}

impl Server {
    /// An in-process server with `klock serve`'s flags `args` (after `--listen 127.0.0.1:0`).
    ///
    /// # Panics
    /// The flags are refused or the server cannot start (a test's setup failed).
    pub fn start(args: &[&str]) -> Server {
        Server::try_start(args).unwrap_or_else(|e| panic!("start a server {args:?}: {e}"))
    }

    /// [`Server::start`], or why the flags or the server's start were refused.
    ///
    /// # Errors
    /// The message `klock serve` would print.
    pub fn try_start(args: &[&str]) -> Result<Server, String> {
        let mut all = vec![String::from("--listen"), String::from("127.0.0.1:0")];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let config = klock_cli::serve_args::parse(&all)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let server = runtime.block_on(klock_server::serve::start(config))?;
        let port = server
            .local_addr()
            .map(|a| a.port())
            .ok_or("the test kit's servers listen on TCP (give no --socket)")?;
        Ok(Server {
            port,
            running: Running::InProcess {
                runtime: Some(runtime),
                server: Some(server),
            },
        })
    }

    /// A `program serve` process with the flags `args`.
    ///
    /// # Panics
    /// It cannot be started or does not say where it listens.
    pub fn spawn(program: &Path, args: &[&str]) -> Server {
        let spawned = Spawned::start(program, args).expect("start klock serve");
        Server {
            port: spawned.port,
            running: Running::Process(spawned),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of a spawned server (`None` in process).
    pub fn pid(&self) -> Option<u32> {
        match &self.running {
            Running::Process(spawned) => Some(spawned.pid()),
            Running::InProcess { .. } => None,
        }
    }

    /// One request; returns the status and the JSON body (every answer of the API is JSON).
    ///
    /// # Panics
    /// The request failed, or the answer is not JSON.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let answer = request(self.port(), method, path, headers, body.as_bytes()).unwrap();
        assert!(!answer.body.is_null(), "not JSON: {answer:?}");
        (answer.status, answer.body)
    }

    /// A GET with no headers.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, &[], "")
    }

    /// One request; the raw answer (status line, headers and body), for what is not JSON.
    ///
    /// # Panics
    /// The connection cannot be made or written.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.port(),
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    /// Stops it at once (module contract).
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Running::InProcess { runtime, server } = &mut self.running {
            // No graceful stop: dropping the runtime cancels every task; it returns once they
            // are gone, and with them every handle to the engine, so its thread ends
            // and lets go of the data file.
            let engine = server
                .as_mut()
                .map(klock_server::serve::Server::take_engine);
            drop(server.take());
            drop(runtime.take());
            if let Some(engine) = engine {
                engine.wait();
            }
        }
    }
}
