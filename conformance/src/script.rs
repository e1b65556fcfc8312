//! Resolved scripts: what a vector becomes once the kernel has checked it, for hosts to replay.
//!
//! Contract: [`resolve`] runs a vector against a fresh [`Kernel`] with the full checker of
//! [`crate::run`] and, while doing so, records every call as it was made: the concrete
//! [`Command`] (ids as the kernel issued them, digests in full), its whole answer (the
//! [`Output`] or the error's code, name and message), every event it caused, and the kernel's
//! [`klock_core::Snapshot`] after it, taken at the kernel's own time (`snapshot_at`), which
//! settles nothing. A vector that fails the check yields no script. The script is plain JSON
//! (`docs/VECTORS.md`, "Resolved scripts"): a host replays it through its public binding API
//! and must reproduce every recorded value exactly, so the vector format is interpreted in one
//! place only.

use crate::run::{self, Answer, Host};
use crate::vector::Vector;
use klock_core::{Command, Event, Kernel, Snapshot};
use serde_json::{json, Value};

/// The script format's name and version, written as the script's `format`.
pub const FORMAT: &str = "klock-script/1";

/// A kernel that remembers every call made to it through [`Host::call`].
struct Recorder {
    kernel: Kernel,
    steps: Vec<Value>,
    failure: Option<String>,
}

impl Host for Recorder {
    fn call(&mut self, command: &Command, now: u64) -> Result<Answer, String> {
        let (result, events) = self.kernel.call(command, now)?;
        let snapshot_at = self.kernel.now();
        let snapshot = self.kernel.snapshot(snapshot_at);
        if self.kernel.pending_events() != 0 {
            // Cannot happen (every call settles to its `now` first); if it did, the script
            // would record a state no plain replay reaches.
            self.failure
                .get_or_insert_with(|| String::from("taking a snapshot settled time"));
        }
        let result_json = match &result {
            Ok(output) => json!({ "ok": output }),
            Err(e) => json!({ "error": {
                "code": e.code.code(),
                "name": e.code.name(),
                "message": e.message,
            }}),
        };
        self.steps.push(json!({
            "now": now,
            "call": command,
            "result": result_json,
            "events": events,
            "snapshot_at": snapshot_at,
            "snapshot": snapshot,
        }));
        Ok((result, events))
    }

    fn probe(&self, now: u64) -> Option<(Vec<Event>, Snapshot)> {
        self.kernel.probe(now)
    }

    fn settled_state(&mut self, now: u64) -> Option<Result<Snapshot, String>> {
        self.kernel.settled_state(now)
    }

    fn priority(&self, session: klock_core::SessionId, now: u64) -> Option<u64> {
        self.kernel.priority(session, now)
    }
}

/// Checks `vector` against the kernel and returns its resolved script; `file` names the
/// vector file in the script. `Err` is the check's failure (`step k: ...`).
pub fn resolve(file: &str, vector: &Vector) -> Result<Value, String> {
    let kernel = Kernel::new(vector.config.clone())
        .map_err(|e| format!("config rejected by the kernel: {e}"))?;
    let config = kernel.config().clone();
    let mut recorder = Recorder {
        kernel,
        steps: Vec::new(),
        failure: None,
    };
    run::run_on(&mut recorder, vector)?;
    if let Some(why) = recorder.failure {
        return Err(why);
    }
    Ok(json!({
        "format": FORMAT,
        "vector": file,
        "name": vector.name,
        "config": config,
        "steps": recorder.steps,
    }))
}
