//! `klock-testkit conformance PATH...`: every vector through the HTTP API.
//!
//! Contract: [`run`] starts the resettable manual-clock server ([`crate::manual`]) in this
//! process on a free loopback port, and for each vector resets it to the vector's
//! configuration and replays the steps through the public routes ([`HttpHost`]), checked by the same runner as the kernel's
//! (`klock-conformance`). The events of a step are read back from the namespace watch streams
//! and matched to the step by the `Klock-Index` of its answer. The host cannot clone the
//! server, so the "a failed call changes nothing" proof and the resume-priority check are left
//! to the kernel's own run; everything else is compared exactly. The server is stopped at the
//! end, also on failure.
//!
//! [`run_cluster`] replays each vector through a three-node cluster of `klock serve` processes
//! started for it (the vector's config, a manual clock: the leader stamps each entry with its
//! request's `Klock-Now`), through a follower, and then checks that the three nodes' state
//! hashes are equal at one index.

use crate::http_client::{self, percent_encode as encode, request};
use crate::manual::ManualServer;
use klock_conformance::run::{Answer, Host};
use klock_conformance::vector::Vector;
use klock_core::{
    Command, Error, ErrorCode, Event, Output, ResourceState, SessionId, SessionInfo, Snapshot,
    StateDigest, Verdict,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// How long a cluster node may take to apply an entry the leader answered.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a request with owned header values.
fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Result<http_client::Answer, String> {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    request(port, method, path, &headers, body.as_bytes())
}

/// The server as a conformance host.
pub struct HttpHost {
    port: u16,
    /// Namespace and token of every session the vector opened or resumed.
    sessions: BTreeMap<SessionId, (String, String)>,
    /// The resume secret each session's last open or resume answered (a resume presents it).
    resume_secrets: BTreeMap<SessionId, String>,
    /// Namespaces whose watch stream is followed, and the last event id read from each.
    watched: BTreeMap<String, String>,
    /// A cluster node's host ([`HttpHost::on_node`]): wait until the node applied an entry
    /// before reading its events.
    follows: bool,
}

impl HttpHost {
    /// Resets the server at `port` to `config`.
    ///
    /// # Errors
    /// The server refused or could not be reached.
    pub fn new(port: u16, config: &klock_core::Config) -> Result<HttpHost, String> {
        let body = serde_json::to_string(config).map_err(|e| e.to_string())?;
        let answer = send(port, "POST", "/v1/reset", &[], &body)?;
        if answer.status != 200 {
            return Err(format!("reset refused: {}", answer.body));
        }
        Ok(HttpHost {
            follows: false,
            ..HttpHost::on_node(port)
        })
    }

    /// A host over a node of a cluster started for this vector (with its config, on a
    /// manual clock), through the node at `port`: no reset, and the events of an entry are
    /// read once the node applied it (a follower applies an entry a moment after the leader
    /// answered it).
    pub fn on_node(port: u16) -> HttpHost {
        HttpHost {
            port,
            sessions: BTreeMap::new(),
            resume_secrets: BTreeMap::new(),
            watched: BTreeMap::new(),
            follows: true,
        }
    }

    /// Waits until the node applied entry `index` (within [`APPLY_WAIT`]).
    fn applied(&self, index: u64) -> Result<(), String> {
        let started = std::time::Instant::now();
        loop {
            let answer = send(self.port, "GET", "/v1/state/hash", &[], "")?;
            let applied = answer.body["index"].as_u64().unwrap_or(0);
            if applied >= index {
                return Ok(());
            }
            if started.elapsed() > APPLY_WAIT {
                return Err(format!(
                    "the node applied entry {applied}, never entry {index}"
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn session_path(
        &self,
        session: SessionId,
        what: &str,
    ) -> (String, Vec<(&'static str, String)>) {
        let (ns, token) = self
            .sessions
            .get(&session)
            .cloned()
            .unwrap_or_else(|| (String::from("default"), String::from("unknown")));
        let path = format!("/v1/ns/{}/sessions/{}{what}", encode(&ns), session.0);
        (path, vec![("klock-session-token", token)])
    }

    fn send(&mut self, command: &Command, now: u64) -> Result<http_client::Answer, String> {
        let mut headers = vec![("klock-now", now.to_string())];
        let (method, path, body) = match command {
            Command::Open {
                agent_id,
                namespace,
            } => {
                self.watched
                    .entry(namespace.clone())
                    .or_insert_with(|| String::from("0.0"));
                let path = format!("/v1/ns/{}/sessions", encode(namespace));
                ("POST", path, json!({ "agent_id": agent_id }))
            }
            Command::Resume { digest } => {
                let ns = self
                    .sessions
                    .get(&digest.identity.session_id)
                    .map_or(digest.identity.namespace.clone(), |(ns, _)| ns.clone());
                let path = format!("/v1/ns/{}/sessions/resume", encode(&ns));
                // A session the vector never opened has no secret: the kernel's answer (an
                // unknown session) is what the vector checks, so any secret does.
                let secret = self
                    .resume_secrets
                    .get(&digest.identity.session_id)
                    .map_or("none", String::as_str);
                let body = json!({ "digest": digest, "resume_secret": secret });
                ("POST", path, body)
            }
            Command::NextDeadline => ("GET", String::from("/v1/deadline"), json!({})),
            Command::Advance => ("POST", String::from("/v1/advance"), json!({})),
            Command::ResourceState {
                resource,
                namespace,
            } => {
                let path = format!(
                    "/v1/ns/{}/resources/state?resource={}",
                    encode(namespace),
                    encode(resource)
                );
                ("GET", path, json!({}))
            }
            other => {
                let session = other
                    .session()
                    .expect("every other command names a session");
                let (what, method, body) = match other {
                    Command::Close { .. } => (String::new(), "DELETE", json!({})),
                    Command::Suspend { .. } => (String::from("/suspend"), "POST", json!({})),
                    Command::Digest { .. } => (String::from("/digest"), "GET", json!({})),
                    Command::Acquire {
                        intents, options, ..
                    } => {
                        let mut b = json!({ "intents": intents, "wait": options.wait });
                        if let Some(t) = options.ttl_ms {
                            b["ttl_ms"] = json!(t);
                        }
                        if let Some(t) = options.wait_timeout_ms {
                            b["wait_timeout_ms"] = json!(t);
                        }
                        (String::from("/acquire"), "POST", b)
                    }
                    Command::Heartbeat { leases, .. } => {
                        let b = match leases {
                            Some(ids) => json!({ "lease_ids": ids }),
                            None => json!({}),
                        };
                        (String::from("/heartbeat"), "POST", b)
                    }
                    Command::Release { lease, .. } => (
                        String::from("/release"),
                        "POST",
                        json!({ "lease_ids": [lease] }),
                    ),
                    Command::ReleaseAll { .. } => {
                        (String::from("/release"), "POST", json!({ "all": true }))
                    }
                    Command::Reconcile { leases, .. } => (
                        String::from("/reconcile"),
                        "POST",
                        json!({ "lease_ids": leases }),
                    ),
                    Command::CancelWait { ticket, .. } => {
                        (format!("/tickets/{}", ticket.0), "DELETE", json!({}))
                    }
                    _ => unreachable!("handled above"),
                };
                let (path, auth) = self.session_path(session, &what);
                headers.extend(auth);
                (method, path, body)
            }
        };
        let body = if method == "GET" || method == "DELETE" {
            String::new()
        } else {
            body.to_string()
        };
        let started = std::time::Instant::now();
        loop {
            let answer = send(self.port, method, &path, &headers, &body)?;
            // A cluster just elected its leader, which takes writes once its first entry is
            // applied: a 503 changed nothing, and a client asks again (SPEC §13.7).
            if !(self.follows && answer.status == 503 && started.elapsed() < APPLY_WAIT) {
                return Ok(answer);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The events of log entry `index`, from every watched namespace, in order.
    fn events_of(&mut self, index: u64) -> Result<Vec<Event>, String> {
        if self.follows {
            self.applied(index)?;
        }
        let mut found: Vec<(u32, Event)> = Vec::new();
        let namespaces: Vec<String> = self.watched.keys().cloned().collect();
        for ns in namespaces {
            let after = self.watched[&ns].clone();
            let path = format!("/v1/ns/{}/watch?after={after}", encode(&ns));
            let answer = send(self.port, "GET", &path, &[], "")?;
            if answer.body["gap"] == json!(true) {
                return Err(format!("the watch stream of {ns:?} dropped events"));
            }
            for e in answer.body["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let id = e["id"].as_str().unwrap_or_default().to_owned();
                let (i, k) = id.split_once('.').ok_or("an event without an id")?;
                let (i, k): (u64, u32) = (
                    i.parse().map_err(|_| "bad id")?,
                    k.parse().map_err(|_| "bad id")?,
                );
                let mut plain = e.clone();
                plain.as_object_mut().map(|o| o.remove("id"));
                let event: Event = serde_json::from_value(plain)
                    .map_err(|err| format!("an event the host cannot read ({err}): {e}"))?;
                if i == index {
                    found.push((k, event));
                } else if i > index {
                    return Err(format!(
                        "an event of a later entry {i} while reading entry {index}"
                    ));
                }
            }
            if let Some(next) = answer.body["next"].as_str() {
                self.watched.insert(ns, next.to_owned());
            }
        }
        found.sort_by_key(|(k, _)| *k);
        Ok(found.into_iter().map(|(_, e)| e).collect())
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("{what} the host cannot read ({e}): {v}"))
}

/// The answer as the kernel would give it.
fn output_of(command: &Command, body: Value) -> Result<Output, String> {
    Ok(match command {
        Command::Open { .. } | Command::Resume { .. } => Output::Session {
            session: parse::<SessionInfo>(
                json!({
                    "session_id": body["session_id"], "agent_id": body["agent_id"],
                    "namespace": body["namespace"], "priority": body["priority"], "epoch": body["epoch"],
                }),
                "a session",
            )?,
        },
        Command::Close { .. }
        | Command::Suspend { .. }
        | Command::CancelWait { .. }
        | Command::Advance => Output::Done,
        Command::Digest { .. } => Output::Digest {
            digest: parse::<StateDigest>(body, "a digest")?,
        },
        Command::Acquire { .. } => Output::Verdict {
            verdict: parse::<Verdict>(body, "a verdict")?,
        },
        Command::Heartbeat { .. } => parse::<Output>(
            json!({"output": "heartbeat", "results": body["results"]}),
            "heartbeat results",
        )?,
        Command::Release { .. } => Output::Released {
            released: body["released"]
                .as_bool()
                .ok_or("release answered no flag")?,
        },
        Command::ReleaseAll { .. } => Output::ReleasedAll {
            count: body["released"]
                .as_u64()
                .ok_or("release all answered no count")? as usize,
        },
        Command::Reconcile { .. } => parse::<Output>(
            json!({"output": "reconcile", "statuses": body["statuses"]}),
            "reconcile statuses",
        )?,
        Command::ResourceState { .. } => Output::ResourceState {
            state: parse::<ResourceState>(body, "a resource state")?,
        },
        Command::NextDeadline => Output::NextDeadline {
            deadline: body["deadline"].as_u64(),
        },
        other => return Err(format!("the HTTP host has no route for {}", other.name())),
    })
}

impl Host for HttpHost {
    fn call(&mut self, command: &Command, now: u64) -> Result<Answer, String> {
        let answer = self.send(command, now)?;
        let result = if answer.status == 200 {
            let output = output_of(command, answer.body.clone())?;
            if let (Output::Session { session }, Some(token)) =
                (&output, answer.body["session_token"].as_str())
            {
                let entry = (session.namespace.clone(), token.to_owned());
                self.sessions.insert(session.session_id, entry);
                if let Some(secret) = answer.body["resume_secret"].as_str() {
                    self.resume_secrets
                        .insert(session.session_id, secret.to_owned());
                }
            }
            Ok(output)
        } else {
            let e = &answer.body["error"];
            let name = e["name"].as_str().unwrap_or_default();
            let code = ErrorCode::from_name(name).ok_or_else(|| {
                format!(
                    "the server answered {} {}, not a kernel error",
                    answer.status, answer.body
                )
            })?;
            Err(Error::new(code, e["message"].as_str().unwrap_or_default()))
        };
        let index = answer.header("klock-index").and_then(|i| i.parse().ok());
        let events = match (command, index) {
            (Command::NextDeadline, _) => Vec::new(),
            (_, Some(index)) => self.events_of(index)?,
            (_, None) => {
                return Err(format!(
                    "the answer carries no Klock-Index: {}",
                    answer.body
                ))
            }
        };
        Ok((result, events))
    }

    fn probe(&self, _now: u64) -> Option<(Vec<Event>, Snapshot)> {
        None
    }

    fn settled_state(&mut self, _now: u64) -> Option<Result<Snapshot, String>> {
        None
    }

    fn priority(&self, _session: SessionId, _now: u64) -> Option<u64> {
        None
    }
}

/// Runs every vector the paths stand for through a server of its own; the summary has the
/// usual lines.
///
/// # Errors
/// The server could not be started.
pub fn run(paths: &[String]) -> Result<klock_conformance::Summary, String> {
    let server = ManualServer::start(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let port = server.addr().port();
    let mut each = |_: &str, v: &Vector| -> Result<(), String> {
        let host = HttpHost::new(port, &v.config)?;
        klock_conformance::run::run_on(host, v)
    };
    let summary = klock_conformance::run_paths_on(paths, &mut each);
    drop(server);
    Ok(summary)
}

/// Runs every vector the paths stand for through a three-node cluster of `program` (`klock`)
/// of its own: the nodes started with the vector's config and a manual clock, the steps sent
/// to a follower (which passes writes on to the leader and serves the events from what it
/// applied); after the last step the three nodes' state hashes must be equal at one index.
/// The summary has the usual lines.
pub fn run_cluster(program: &std::path::Path, paths: &[String]) -> klock_conformance::Summary {
    let mut each = |_: &str, v: &Vector| -> Result<(), String> {
        // The cluster helper panics when a wait runs out: that vector fails, the run goes on.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let cluster = cluster_for(program, &v.config)?;
            let follower = (cluster.leader() + 1) % cluster.ports.len();
            klock_conformance::run::run_on(HttpHost::on_node(cluster.ports[follower]), v)?;
            same_state(&cluster)
        }))
        .unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
            Err(format!("the cluster failed: {}", why.unwrap_or_default()))
        })
    };
    klock_conformance::run_paths_on(paths, &mut each)
}

/// Three nodes of `program` on a manual clock with `config`, initialised, a leader agreed on.
fn cluster_for(
    program: &std::path::Path,
    config: &klock_core::Config,
) -> Result<crate::cluster::Cluster, String> {
    let mut cluster = crate::cluster::Cluster::unstarted(program, 3);
    cluster.logged = true;
    cluster.extra = vec![String::from("--clock"), String::from("manual")];
    let fields = serde_json::to_value(config).map_err(|e| e.to_string())?;
    for (name, value) in fields.as_object().into_iter().flatten() {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        cluster.extra.push(String::from("--config"));
        cluster.extra.push(format!("{name}={value}"));
    }
    cluster.start_all();
    cluster.init();
    Ok(cluster)
}

/// The three nodes' state hashes, once at one applied index, are equal.
fn same_state(cluster: &crate::cluster::Cluster) -> Result<(), String> {
    let started = std::time::Instant::now();
    loop {
        let hashes: Vec<(u64, String)> = cluster
            .ports
            .iter()
            .filter_map(|port| {
                let a = send(*port, "GET", "/v1/state/hash", &[], "").ok()?;
                Some((
                    a.body["index"].as_u64()?,
                    a.body["hash"].as_str()?.to_owned(),
                ))
            })
            .collect();
        if hashes.len() == cluster.ports.len() && hashes.iter().all(|h| h.0 == hashes[0].0) {
            if hashes.iter().all(|h| h.1 == hashes[0].1) {
                return Ok(());
            }
            return Err(format!("the nodes' states differ at one index: {hashes:?}"));
        }
        if started.elapsed() > APPLY_WAIT {
            return Err(format!("the nodes never reached one index: {hashes:?}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
