//! A `klock serve` process: for what needs a real process (a SIGKILL crash, its memory, its
//! exit status and messages) and for benchmarks of the binary.
//!
//! Contract: [`Spawned::start`] runs `PROGRAM serve --listen 127.0.0.1:0 ARGS...`, reads the
//! port from the line it prints, and kills the process (SIGKILL) when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
