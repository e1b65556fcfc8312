//! A `klock serve` process: for what needs a real process (a SIGKILL crash, its memory, its
//! exit status and messages) and for benchmarks of the binary.
//!
//! Contract: [`Spawned::start`] runs `PROGRAM serve --listen 127.0.0.1:0 ARGS...`, reads the
//! port from the line it prints, and kills the process (SIGKILL) when dropped;
//! [`Spawned::start_logged`] also appends its log (stderr) to a file. [`Spawned::terminate`]
//! stops it as an operator does (SIGTERM) and returns how it exited.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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
        Spawned::spawn(program, args, Stdio::inherit(), None)
    }

    /// [`Spawned::start`], its stderr (its log) appended to the file `log`.
    ///
    /// # Errors
    /// As [`Spawned::start`], or `log` cannot be opened.
    pub fn start_logged(program: &Path, args: &[&str], log: &Path) -> Result<Spawned, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        Spawned::spawn(program, args, Stdio::from(file), Some(log))
    }

    /// Starts it, its stderr to `stderr`; `log` names the file that is, so that a failure to
    /// start can quote the process's last words.
    fn spawn(
        program: &Path,
        args: &[&str],
        stderr: Stdio,
        log: Option<&Path>,
    ) -> Result<Spawned, String> {
        let mut child = Command::new(program)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
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
                let status = child
                    .wait()
                    .map_or_else(|e| format!("unknown: {e}"), |s| s.to_string());
                let said = log.map(log_tail).unwrap_or_default();
                Err(format!(
                    "klock serve did not say where it listens: {line:?} (it ended: {status}){said}"
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

    /// Sends SIGTERM and waits (`within` at most; then SIGKILL) for the process to exit.
    ///
    /// # Errors
    /// It did not exit within `within` (it is killed), or the signal could not be sent.
    pub fn terminate(mut self, within: Duration) -> Result<ExitStatus, String> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {} failed", self.child.id()));
        }
        let started = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if started.elapsed() < within => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    self.stop();
                    return Err(format!(
                        "no exit within {} ms of SIGTERM",
                        within.as_millis()
                    ));
                }
            }
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The end of a log file, to quote in an error (a process that could not start says why last).
fn log_tail(log: &Path) -> String {
    const TAIL: usize = 2_000;
    let text = std::fs::read(log).unwrap_or_default();
    let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(TAIL)..]).into_owned();
    format!("; the end of its log {}:\n{tail}", log.display())
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}
