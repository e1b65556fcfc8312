//! One Klock session's routes (`server/README.md`) as typed calls: the layer under the
//! friendly [`crate::Session`] and the agent tools.
//!
//! Contract: [`Session::open`] / [`Session::resume`] start it and keep its session token and
//! its resume secret (a resume needs the secret the last open or resume answered: a digest is
//! public data; [`Saved`] keeps both for a later run);
//! every other call names the session with that token and decodes the kernel's own serde
//! shapes (`klock_core`), so a verdict here is exactly what the kernel decided. Nothing here
//! retries or sleeps: the callers decide what a DIE or an unreachable server means to them.

use crate::http::percent_encode;
use crate::transport::{Failure, Transport};
use klock_core::{Event, Lease, ResourceState, SessionInfo, StateDigest, Stats, Verdict};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// The longest the server holds a request open (`hold_ms`, `wait_ms`).
pub const MAX_HOLD: Duration = Duration::from_secs(30);

/// An open session.
#[derive(Clone, Debug)]
pub struct Session {
    pub client: Transport,
    pub info: SessionInfo,
    /// The log index of the open or resume that answered it (`Klock-Index`), if the server
    /// said: the session's events all come from later entries.
    pub started_at: Option<u64>,
    /// The log `started_at` counts entries of (the answer's `log`), if the server said.
    pub log: Option<String>,
    token: String,
    /// What the next resume of the session must present.
    resume_secret: String,
}

/// What a later run needs to resume a session: its StateDigest and its resume secret (the
/// digest's fields, with `resume_secret` beside them, in a file only its owner reads).
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
pub struct Saved {
    #[serde(flatten)]
    pub digest: StateDigest,
    /// Missing in a file saved before resume secrets existed (the server then refuses it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume_secret: String,
}

/// How a waiting ticket ended, or that it still waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(Vec<Lease>),
    /// Still queued after the time asked for.
    Waiting,
    /// The wait ran out (`WAIT_TIMEOUT`).
    TimedOut,
    /// Withdrawn; ask again after this many milliseconds (`DIED`, `WOUNDED`).
    Died(u64),
}

/// One event with its id.
#[derive(Clone, Debug, Deserialize)]
pub struct Stamped {
    pub id: String,
    #[serde(flatten)]
    pub event: Event,
}

/// A read of a session's events, or of a namespace's (its watch).
#[derive(Clone, Debug, Deserialize)]
pub struct EventBatch {
    pub events: Vec<Stamped>,
    /// Ask after this next time.
    pub next: String,
    /// The server dropped events after the id asked for (its byte budget, or a restart from
    /// a snapshot), or read this stream from its start because the cursor was of another log:
    /// the reader missed some.
    #[serde(default)]
    pub gap: bool,
    /// The log the ids count entries of, if the server named one.
    #[serde(default)]
    pub log: Option<String>,
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, Failure> {
    serde_json::from_value(v.clone()).map_err(|e| {
        Failure::Unreachable(format!(
            "the server's answer to {what} is not what this client expects ({e}): {v}; is the server the same version as this klock?"
        ))
    })
}

/// `/v1/ns/{ns}` with the namespace encoded.
pub fn ns_path(ns: &str) -> String {
    format!("/v1/ns/{}", percent_encode(ns))
}

impl Session {
    /// Opens a new session for `agent_id` in `ns`.
    ///
    /// # Errors
    /// The server is unreachable or refuses (a bad agent id or namespace, a token's scope).
    pub async fn open(client: Transport, ns: &str, agent_id: &str) -> Result<Session, Failure> {
        let body = json!({ "agent_id": agent_id });
        let path = format!("{}/sessions", ns_path(ns));
        let (v, index) = client.post_indexed(&path, &body).await?;
        Session::started(client, v, index)
    }

    /// Re-attaches to the session a StateDigest names: same priority, leases kept.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION` (closed, or the server lost it), `INVALID_DIGEST`, or unreachable.
    pub async fn resume(
        client: Transport,
        digest: &StateDigest,
        resume_secret: &str,
    ) -> Result<Session, Failure> {
        let body = json!({ "digest": digest, "resume_secret": resume_secret });
        let path = format!("{}/sessions/resume", ns_path(&digest.identity.namespace));
        let (v, index) = client.post_indexed(&path, &body).await?;
        Session::started(client, v, index)
    }

    fn started(client: Transport, v: Value, index: Option<u64>) -> Result<Session, Failure> {
        let token = v["session_token"].as_str().unwrap_or_default().to_owned();
        let resume_secret = v["resume_secret"].as_str().unwrap_or_default().to_owned();
        let log = v["log"].as_str().map(str::to_owned);
        let info = decode("open", v)?;
        Ok(Session {
            client,
            info,
            started_at: index,
            log,
            token,
            resume_secret,
        })
    }

    /// The same session, its calls made best effort ([`Transport::best_effort`]).
    pub fn best_effort(&self) -> Session {
        Session {
            client: self.client.best_effort(),
            ..self.clone()
        }
    }

    /// What the next resume of this session must present.
    pub fn resume_secret(&self) -> &str {
        &self.resume_secret
    }

    fn path(&self, rest: &str) -> String {
        let id = self.info.session_id;
        format!("{}/sessions/{id}{rest}", ns_path(&self.info.namespace))
    }

    async fn call(
        &self,
        method: &str,
        rest: &str,
        body: Option<&Value>,
        waits: Duration,
    ) -> Result<Value, Failure> {
        let path = self.path(rest);
        self.client
            .call(method, &path, Some(&self.token), body, waits)
            .await
    }

    /// Asks for the whole manifest in one request, waiting `wait_ms` if it must queue (`Some(0)`:
    /// not at all; `None`: the kernel's default wait). A WAIT is held open by the server for up
    /// to `hold` (at most [`MAX_HOLD`]) and answered with its outcome if it comes by then.
    ///
    /// # Errors
    /// Bad intents (the message names them), an unknown session, or unreachable.
    pub async fn acquire(
        &self,
        intents: &[String],
        ttl_ms: u64,
        wait_ms: Option<u64>,
        hold: Duration,
    ) -> Result<Acquired, Failure> {
        let hold = hold.min(MAX_HOLD);
        let mut body = json!({
            "intents": intents,
            "ttl_ms": ttl_ms,
            "wait": wait_ms != Some(0),
        });
        if let Some(wait_ms) = wait_ms {
            body["wait_timeout_ms"] = json!(wait_ms);
        }
        if !hold.is_zero() {
            body["hold_ms"] = json!(hold.as_millis() as u64);
        }
        let v = self.call("POST", "/acquire", Some(&body), hold).await?;
        if v.get("verdict").is_some() {
            return Ok(Acquired::Verdict(decode("acquire", v)?));
        }
        Ok(Acquired::Resolved(
            v["ticket"].as_u64().unwrap_or_default(),
            outcome(decode("acquire", v)?),
        ))
    }

    /// Waits up to `wait` (at most [`MAX_HOLD`]) for a ticket's outcome.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn ticket(&self, ticket: u64, wait: Duration) -> Result<Outcome, Failure> {
        let wait = wait.min(MAX_HOLD);
        let rest = format!("/tickets/{ticket}?wait_ms={}", wait.as_millis());
        let v = self.call("GET", &rest, None, wait).await?;
        if v.get("verdict").is_some() {
            return Ok(Outcome::Waiting);
        }
        Ok(outcome(decode("ticket", v)?))
    }

    /// Withdraws a waiting ticket.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn cancel(&self, ticket: u64) -> Result<(), Failure> {
        let rest = format!("/tickets/{ticket}");
        self.call("DELETE", &rest, None, Duration::ZERO).await?;
        Ok(())
    }

    /// Renews these leases; per lease `(id, Ok(expires_at))` or `(id, Err(reason))` (the
    /// kernel's name: `LEASE_EXPIRED`, `LEASE_RELEASED`, ...).
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn heartbeat(&self, ids: &[u64]) -> Result<Vec<(u64, Result<u64, String>)>, Failure> {
        let body = json!({ "lease_ids": ids });
        let v = self
            .call("POST", "/heartbeat", Some(&body), Duration::ZERO)
            .await?;
        let results = v["results"].as_array().cloned().unwrap_or_default();
        Ok(results
            .iter()
            .map(|r| {
                let id = r["lease_id"].as_u64().unwrap_or_default();
                match (r["status"].as_str(), r["expires_at"].as_u64()) {
                    (Some("OK"), Some(at)) => (id, Ok(at)),
                    (status, _) => (id, Err(status.unwrap_or("UNKNOWN").to_owned())),
                }
            })
            .collect())
    }

    /// Releases these leases (idempotent); `None` releases all. Returns how many this call
    /// released.
    ///
    /// # Errors
    /// `NOT_OWNER`, unknown session or unreachable.
    pub async fn release(&self, ids: Option<&[u64]>) -> Result<u64, Failure> {
        let Some(ids) = ids else {
            let v = self
                .call(
                    "POST",
                    "/release",
                    Some(&json!({"all": true})),
                    Duration::ZERO,
                )
                .await?;
            return Ok(v["released"].as_u64().unwrap_or_default());
        };
        let mut count = 0;
        for id in ids {
            let body = json!({ "lease_ids": [id] });
            let v = self
                .call("POST", "/release", Some(&body), Duration::ZERO)
                .await?;
            count += u64::from(v["released"].as_bool().unwrap_or(false));
        }
        Ok(count)
    }

    /// The kernel's truth per lease: `{lease_id, status, expires_at?, fence?}` objects.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn reconcile(&self, ids: &[u64]) -> Result<Vec<Value>, Failure> {
        let body = json!({ "lease_ids": ids });
        let v = self
            .call("POST", "/reconcile", Some(&body), Duration::ZERO)
            .await?;
        Ok(v["statuses"].as_array().cloned().unwrap_or_default())
    }

    /// The session's events after `after` (`None`: from the oldest kept), waiting up to
    /// `wait` (at most [`MAX_HOLD`]) for one.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn events(&self, after: Option<&str>, wait: Duration) -> Result<EventBatch, Failure> {
        let wait = wait.min(MAX_HOLD);
        let mut rest = format!("/events?wait_ms={}", wait.as_millis());
        if let Some(after) = after {
            rest.push_str(&format!("&after={}", percent_encode(after)));
        }
        decode("events", self.call("GET", &rest, None, wait).await?)
    }

    /// The StateDigest to save for a resume.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn digest(&self) -> Result<StateDigest, Failure> {
        decode(
            "digest",
            self.call("GET", "/digest", None, Duration::ZERO).await?,
        )
    }

    /// Marks the session as restarting: its leases keep the grace past a missed heartbeat.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn suspend(&self) -> Result<(), Failure> {
        self.call("POST", "/suspend", None, Duration::ZERO).await?;
        Ok(())
    }

    /// Closes the session: every lease released, every wait cancelled.
    ///
    /// # Errors
    /// Unknown session or unreachable.
    pub async fn close(&self) -> Result<(), Failure> {
        self.call("DELETE", "", None, Duration::ZERO).await?;
        Ok(())
    }
}

/// The answer to an acquire: the verdict, or (a held WAIT) how its ticket ended.
#[derive(Clone, Debug)]
pub enum Acquired {
    Verdict(Verdict),
    Resolved(u64, Outcome),
}

fn outcome(event: Event) -> Outcome {
    match event {
        Event::Granted { leases, .. } => Outcome::Granted(leases),
        Event::WaitTimeout { .. } => Outcome::TimedOut,
        Event::Died { retry_after_ms, .. } | Event::Wounded { retry_after_ms, .. } => {
            Outcome::Died(retry_after_ms)
        }
        // The server resolves a ticket only by the four events above; these name leases and
        // sessions, and would mean the ticket is gone with nothing held.
        Event::LeaseExpired { .. }
        | Event::SessionClosed { .. }
        | Event::Acquired { .. }
        | Event::Released { .. } => Outcome::Died(0),
    }
}

/// Every session's events in namespace `ns` after `after` (`None`: from the oldest kept) of
/// log `log` (if known), but the holder events (ACQUIRED, RELEASED), waiting up to `wait` (at
/// most [`MAX_HOLD`]) for one; and which node answered (its position in the client's list).
///
/// # Errors
/// Unreachable, or a token without access to the namespace.
pub async fn watch(
    client: &Transport,
    ns: &str,
    after: Option<&str>,
    log: Option<&str>,
    wait: Duration,
) -> Result<(EventBatch, usize), Failure> {
    let wait = wait.min(MAX_HOLD);
    // The keepers act on the events that end leases only; a client learns its own grants and
    // releases from their answers: the holder events (ACQUIRED, RELEASED) of every process in
    // the namespace would only wake this poll.
    let mut path = format!(
        "{}/watch?holder_events=false&wait_ms={}",
        ns_path(ns),
        wait.as_millis()
    );
    if let Some(after) = after {
        path.push_str(&format!("&after={}", percent_encode(after)));
    }
    if let Some(log) = log {
        path.push_str(&format!("&log={}", percent_encode(log)));
    }
    let (v, node) = client.get_from(&path, wait).await?;
    Ok((decode("watch", v)?, node))
}

/// Who holds and waits on one resource in a namespace, and the server's time then.
///
/// # Errors
/// A malformed resource, or unreachable.
pub async fn resource_state(
    client: &Transport,
    ns: &str,
    resource: &str,
) -> Result<(ResourceState, Option<u64>), Failure> {
    let path = format!(
        "{}/resources/state?resource={}",
        ns_path(ns),
        percent_encode(resource)
    );
    let (v, now) = client
        .call_at("GET", &path, None, None, Duration::ZERO)
        .await?;
    Ok((decode("resource_state", v)?, now))
}

/// The server's counters, top contended resources and ghost agents.
///
/// # Errors
/// Unreachable, or a token without access.
pub async fn stats(client: &Transport, ns: &str) -> Result<Stats, Failure> {
    let path = format!("{}/stats", ns_path(ns));
    decode(
        "stats",
        client
            .call("GET", &path, None, None, Duration::ZERO)
            .await?,
    )
}
