//! The vector format of `docs/VECTORS.md` as typed values, and its strict parser.
//!
//! Contract: [`parse`] turns a whole vector file into a [`Vector`] before anything runs, or
//! fails naming the step and key at fault. It accepts exactly the keys docs/VECTORS.md lists at
//! every level — file, config, step (per `do`), expect (per `do`), lease, event (per event
//! kind when `event` is given), status, holder/waiting/covering objects — with exactly the
//! documented value types. Names that have a closed set of values (error names, verdicts,
//! event kinds, statuses, predicates, policies) are checked here, so a misspelt name is a
//! parse failure rather than a mismatch. Aliases are kept as strings; [`crate::aliases`]
//! resolves them when the step runs.

use crate::json::{self, Fields};
use klock_core::{Config, ErrorCode, Policy, Predicate};
use serde_json::Value;

/// One parsed vector file.
#[derive(Debug, Clone)]
pub struct Vector {
    pub name: String,
    pub config: Config,
    pub steps: Vec<Step>,
}

/// One step: a call at `now` and what must come back.
#[derive(Debug, Clone)]
pub struct Step {
    pub now: u64,
    pub action: Action,
    /// `None`: the call must succeed and emit no event.
    pub expect: Option<Expect>,
}

/// Fields a `tamper` object may overwrite in a digest's identity.
#[derive(Debug, Clone, Default)]
pub struct Tamper {
    pub agent_id: Option<String>,
    pub namespace: Option<String>,
    pub session_id: Option<SessionRef>,
    pub priority_timestamp: Option<u64>,
    pub epoch: Option<u64>,
}

/// A session named by alias or, in `tamper` only, by number.
#[derive(Debug, Clone)]
pub enum SessionRef {
    Alias(String),
    Number(u64),
}

/// The leases a heartbeat names.
#[derive(Debug, Clone)]
pub enum LeaseList {
    All,
    Aliases(Vec<String>),
}

/// The call a step makes (the `do` and its fields).
#[derive(Debug, Clone)]
pub enum Action {
    Open {
        agent: String,
        namespace: String,
        bind: Option<String>,
    },
    Close {
        session: String,
    },
    Suspend {
        session: String,
    },
    Digest {
        session: String,
        bind: Option<String>,
    },
    Resume {
        digest: String,
        tamper: Tamper,
    },
    Acquire {
        session: String,
        intents: Vec<String>,
        ttl_ms: Option<u64>,
        wait: Option<bool>,
        wait_timeout_ms: Option<u64>,
    },
    Heartbeat {
        session: String,
        leases: LeaseList,
    },
    Release {
        session: String,
        lease: String,
    },
    ReleaseAll {
        session: String,
    },
    Reconcile {
        session: String,
        leases: Vec<String>,
    },
    CancelWait {
        session: String,
        ticket: String,
    },
    Advance,
    ResourceState {
        resource: String,
        namespace: String,
    },
    NextDeadline,
}

impl Action {
    /// The `do` name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Open { .. } => "open",
            Action::Close { .. } => "close",
            Action::Suspend { .. } => "suspend",
            Action::Digest { .. } => "digest",
            Action::Resume { .. } => "resume",
            Action::Acquire { .. } => "acquire",
            Action::Heartbeat { .. } => "heartbeat",
            Action::Release { .. } => "release",
            Action::ReleaseAll { .. } => "release_all",
            Action::Reconcile { .. } => "reconcile",
            Action::CancelWait { .. } => "cancel_wait",
            Action::Advance => "advance",
            Action::ResourceState { .. } => "resource_state",
            Action::NextDeadline => "next_deadline",
        }
    }
}

/// One expected lease (verdict `leases` or a GRANTED event's `leases`).
#[derive(Debug, Clone, Default)]
pub struct LeaseExpect {
    pub bind: Option<String>,
    pub resource: Option<String>,
    pub predicate: Option<Predicate>,
    pub expires_at: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub fence_gt: Option<String>,
    pub same_as: Option<String>,
}

/// The expected outcome for one lease of a heartbeat: `None` status means "not checked".
#[derive(Debug, Clone)]
pub struct OutcomeExpect {
    /// `Ok(())` for "OK", or the expected error.
    pub status: Option<Result<(), ErrorCode>>,
    pub expires_at: Option<u64>,
}

/// The expected reconcile status of one lease.
#[derive(Debug, Clone)]
pub struct StatusExpect {
    /// One of ACTIVE, EXPIRED, RELEASED, NOT_OWNER, UNKNOWN.
    pub status: Option<String>,
    pub expires_at: Option<u64>,
}

/// An expected holder (`holders`, `covering`) of resource_state.
#[derive(Debug, Clone, Default)]
pub struct HolderExpect {
    pub session: Option<String>,
    pub predicate: Option<Predicate>,
    pub resource: Option<String>,
}

/// An expected queued ticket of resource_state.
#[derive(Debug, Clone, Default)]
pub struct WaiterExpect {
    pub session: Option<String>,
    pub ticket: Option<String>,
}

/// One expected event; only the fields given are checked.
#[derive(Debug, Clone, Default)]
pub struct EventExpect {
    pub event: Option<String>,
    pub ticket: Option<String>,
    pub session: Option<String>,
    pub lease: Option<String>,
    pub by: Option<String>,
    pub leases: Option<Vec<LeaseExpect>>,
    pub retry_after_ms: Option<(u64, u64)>,
    pub lost_leases: Option<Vec<String>>,
    pub lost_tickets: Option<Vec<String>>,
    /// RELEASED: its `leases`, as lease aliases (a set).
    pub released: Option<Vec<String>>,
    /// DIED under `detect`: the cycle's members as session aliases, in order.
    pub cycle: Option<Vec<String>>,
}

/// A step's `expect`.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub error: Option<ErrorCode>,
    pub verdict: Option<String>,
    pub leases: Option<Vec<LeaseExpect>>,
    pub ticket: Option<String>,
    pub held_by: Option<Vec<String>>,
    pub retry_after_ms: Option<(u64, u64)>,
    /// DIE under `detect`: the cycle's members as session aliases, in order.
    pub cycle: Option<Vec<String>>,
    /// (lease alias, outcome), in the file's key order.
    pub results: Option<Vec<(String, OutcomeExpect)>>,
    pub released: Option<bool>,
    pub status: Option<Vec<(String, StatusExpect)>>,
    pub holders: Option<Vec<HolderExpect>>,
    pub waiting: Option<Vec<WaiterExpect>>,
    pub covering: Option<Vec<HolderExpect>>,
    pub deadline: Option<Option<u64>>,
    pub priority_lt: Option<String>,
    pub epoch: Option<u64>,
    /// Every event the step emits, in order (absent = none).
    pub events: Vec<EventExpect>,
}

const FILE_KEYS: &[&str] = &["name", "spec", "config", "steps"];
const CONFIG_KEYS: &[&str] = &[
    "policy",
    "seed",
    "default_ttl_ms",
    "max_ttl_ms",
    "default_wait_timeout_ms",
    "backoff_base_ms",
    "backoff_cap_ms",
    "grace_ms",
    "session_idle_ms",
    "max_leases_per_session",
    "max_lease_lifetime_ms",
];
const LEASE_KEYS: &[&str] = &[
    "as",
    "resource",
    "predicate",
    "expires_at",
    "ttl_ms",
    "fence_gt",
    "same_as",
];
const EVENT_KINDS: &[(&str, &[&str])] = &[
    ("GRANTED", &["ticket", "session", "leases"]),
    ("ACQUIRED", &["session", "leases"]),
    ("RELEASED", &["session", "leases"]),
    ("WAIT_TIMEOUT", &["ticket", "session"]),
    ("DIED", &["ticket", "session", "retry_after_ms", "cycle"]),
    ("LEASE_EXPIRED", &["lease", "session"]),
    (
        "WOUNDED",
        &[
            "session",
            "by",
            "lost_leases",
            "lost_tickets",
            "retry_after_ms",
        ],
    ),
    ("SESSION_CLOSED", &["session"]),
];
const EVENT_KEYS: &[&str] = &[
    "event",
    "ticket",
    "session",
    "lease",
    "by",
    "leases",
    "retry_after_ms",
    "lost_leases",
    "lost_tickets",
    "cycle",
];
const STATUSES: &[&str] = &["ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN"];
const VERDICTS: &[&str] = &["GRANTED", "WAIT", "DIE"];
/// Errors a heartbeat reports per lease.
const HEARTBEAT_ERRORS: &[ErrorCode] = &[
    ErrorCode::LeaseExpired,
    ErrorCode::LeaseReleased,
    ErrorCode::NotOwner,
    ErrorCode::UnknownLease,
    ErrorCode::LifetimeExceeded,
];

/// The `name` of a vector file, if it has a string one (for reporting unparsable files).
pub fn name_of(value: &Value) -> Option<String> {
    value.get("name").and_then(Value::as_str).map(String::from)
}

/// Parses a whole vector. Errors are prefixed with the step number (1-based) when in a step.
pub fn parse(value: &Value) -> Result<Vector, String> {
    let file = Fields::new(value, "file", FILE_KEYS)?;
    let name = file.req_str("name")?;
    file.str("spec")?;
    let config = match file.get("config") {
        None => Config::default(),
        Some(v) => parse_config(v)?,
    };
    let steps = file
        .array("steps")?
        .ok_or("file: missing required key `steps`")?;
    if steps.is_empty() {
        return Err(String::from("file: `steps` is empty"));
    }
    let steps = steps
        .iter()
        .enumerate()
        .map(|(i, s)| parse_step(s).map_err(|e| format!("step {}: {e}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Vector {
        name,
        config,
        steps,
    })
}

fn parse_config(value: &Value) -> Result<Config, String> {
    let f = Fields::new(value, "config", CONFIG_KEYS)?;
    let mut c = Config::default();
    if let Some(p) = f.str("policy")? {
        c.policy = Policy::parse(&p).map_err(|e| format!("config: `policy`: {}", e.message))?;
    }
    let slots: [(&str, &mut u64); 10] = [
        ("seed", &mut c.seed),
        ("default_ttl_ms", &mut c.default_ttl_ms),
        ("max_ttl_ms", &mut c.max_ttl_ms),
        ("default_wait_timeout_ms", &mut c.default_wait_timeout_ms),
        ("backoff_base_ms", &mut c.backoff_base_ms),
        ("backoff_cap_ms", &mut c.backoff_cap_ms),
        ("grace_ms", &mut c.grace_ms),
        ("session_idle_ms", &mut c.session_idle_ms),
        ("max_leases_per_session", &mut c.max_leases_per_session),
        ("max_lease_lifetime_ms", &mut c.max_lease_lifetime_ms),
    ];
    for (key, slot) in slots {
        if let Some(v) = f.u64(key)? {
            *slot = v;
        }
    }
    Ok(c)
}

/// Step keys besides `now`, `do`, `expect`, and the expect keys besides `error`, `events`.
fn keys_for(action: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    Some(match action {
        "open" => (&["agent", "namespace", "as"], &["priority_lt"]),
        "close" | "suspend" | "release_all" => (&["session"], &[]),
        "digest" => (&["session", "as"], &[]),
        "resume" => (&["digest", "tamper"], &["epoch"]),
        "acquire" => (
            &["session", "intents", "ttl_ms", "wait", "wait_timeout_ms"],
            &[
                "verdict",
                "leases",
                "ticket",
                "held_by",
                "retry_after_ms",
                "cycle",
            ],
        ),
        "heartbeat" => (&["session", "leases"], &["results"]),
        "release" => (&["session", "lease"], &["released"]),
        "reconcile" => (&["session", "leases"], &["status"]),
        "cancel_wait" => (&["session", "ticket"], &[]),
        "advance" | "next_deadline" => (
            &[],
            if action == "next_deadline" {
                &["deadline"]
            } else {
                &[]
            },
        ),
        "resource_state" => (
            &["resource", "namespace"],
            &["holders", "waiting", "covering"],
        ),
        _ => return None,
    })
}

fn parse_step(value: &Value) -> Result<Step, String> {
    let Some(action_name) = value.get("do") else {
        return Err(String::from("step: missing required key `do`"));
    };
    let Some(action_name) = action_name.as_str() else {
        return Err(format!(
            "step: `do` must be a string, got {}",
            json::show(action_name)
        ));
    };
    let Some((fields, expect_keys)) = keys_for(action_name) else {
        return Err(format!(
            "unknown `do` {action_name:?} (known: open, close, suspend, digest, resume, acquire, heartbeat, release, \
             release_all, reconcile, cancel_wait, advance, resource_state, next_deadline)"
        ));
    };
    let mut allowed = vec!["now", "do", "expect"];
    allowed.extend_from_slice(fields);
    let f = Fields::new(value, format!("{action_name} step"), &allowed)?;
    let now = f.req_u64("now")?;
    let action = match action_name {
        "open" => Action::Open {
            agent: f.req_str("agent")?,
            namespace: f
                .str("namespace")?
                .unwrap_or_else(|| String::from("default")),
            bind: f.str("as")?,
        },
        "close" => Action::Close {
            session: f.req_str("session")?,
        },
        "suspend" => Action::Suspend {
            session: f.req_str("session")?,
        },
        "digest" => Action::Digest {
            session: f.req_str("session")?,
            bind: f.str("as")?,
        },
        "resume" => Action::Resume {
            digest: f.req_str("digest")?,
            tamper: match f.get("tamper") {
                None => Tamper::default(),
                Some(v) => parse_tamper(v)?,
            },
        },
        "acquire" => {
            f.required("intents")?;
            Action::Acquire {
                session: f.req_str("session")?,
                intents: f.str_list("intents")?.expect("present"),
                ttl_ms: f.u64("ttl_ms")?,
                wait: f.bool("wait")?,
                wait_timeout_ms: f.u64("wait_timeout_ms")?,
            }
        }
        "heartbeat" => {
            let leases = match f.required("leases")? {
                Value::String(s) if s == "all" => LeaseList::All,
                v => LeaseList::Aliases(json::str_list(v).ok_or_else(|| {
                    format!("{}: `leases` must be \"all\" or a list of aliases", f.ctx())
                })?),
            };
            Action::Heartbeat {
                session: f.req_str("session")?,
                leases,
            }
        }
        "release" => Action::Release {
            session: f.req_str("session")?,
            lease: f.req_str("lease")?,
        },
        "release_all" => Action::ReleaseAll {
            session: f.req_str("session")?,
        },
        "reconcile" => {
            f.required("leases")?;
            Action::Reconcile {
                session: f.req_str("session")?,
                leases: f.str_list("leases")?.expect("present"),
            }
        }
        "cancel_wait" => Action::CancelWait {
            session: f.req_str("session")?,
            ticket: f.req_str("ticket")?,
        },
        "advance" => Action::Advance,
        "resource_state" => Action::ResourceState {
            resource: f.req_str("resource")?,
            namespace: f
                .str("namespace")?
                .unwrap_or_else(|| String::from("default")),
        },
        "next_deadline" => Action::NextDeadline,
        _ => unreachable!("checked by keys_for"),
    };
    let expect = match f.get("expect") {
        None => None,
        Some(v) => Some(parse_expect(v, action_name, expect_keys)?),
    };
    Ok(Step {
        now,
        action,
        expect,
    })
}

fn parse_tamper(value: &Value) -> Result<Tamper, String> {
    let f = Fields::new(
        value,
        "tamper",
        &[
            "agent_id",
            "namespace",
            "session_id",
            "priority_timestamp",
            "epoch",
        ],
    )?;
    let session_id = match f.get("session_id") {
        None => None,
        Some(Value::String(s)) => Some(SessionRef::Alias(s.clone())),
        Some(v) => Some(SessionRef::Number(v.as_u64().ok_or_else(|| {
            format!(
                "tamper: `session_id` must be a session alias or a number, got {}",
                json::show(v)
            )
        })?)),
    };
    Ok(Tamper {
        agent_id: f.str("agent_id")?,
        namespace: f.str("namespace")?,
        session_id,
        priority_timestamp: f.u64("priority_timestamp")?,
        epoch: f.u64("epoch")?,
    })
}

fn error_name(ctx: &str, name: &str) -> Result<ErrorCode, String> {
    ErrorCode::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        format!(
            "{ctx}: unknown error name {name:?} (known: {})",
            known.join(", ")
        )
    })
}

fn predicate(ctx: &str, name: &str) -> Result<Predicate, String> {
    Predicate::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| format!("{ctx}: `predicate` must be one of PROVIDES, CONSUMES, MUTATES, DELETES, DEPENDS_ON, RENAMES, got {name:?}"))
}

fn one_of(ctx: &str, key: &str, value: String, allowed: &[&str]) -> Result<String, String> {
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(format!(
            "{ctx}: `{key}` must be one of {}, got {value:?}",
            allowed.join(", ")
        ))
    }
}

fn parse_expect(value: &Value, action: &str, specific: &[&str]) -> Result<Expect, String> {
    let mut allowed = vec!["error", "events"];
    allowed.extend_from_slice(specific);
    let f = Fields::new(value, format!("expect of {action}"), &allowed)?;
    let ctx = f.ctx().to_owned();
    let mut e = Expect::default();
    if let Some(name) = f.str("error")? {
        e.error = Some(error_name(&ctx, &name)?);
        if let Some(other) = f.keys().find(|k| !matches!(k.as_str(), "error" | "events")) {
            return Err(format!("{ctx}: `error` cannot be combined with `{other}` (a failed call returns nothing else)"));
        }
    }
    e.verdict = f
        .str("verdict")?
        .map(|v| one_of(&ctx, "verdict", v, VERDICTS))
        .transpose()?;
    e.leases = f
        .array("leases")?
        .map(|items| parse_leases(items, &format!("{ctx}: leases")))
        .transpose()?;
    e.ticket = f.str("ticket")?;
    e.held_by = f.str_list("held_by")?;
    e.retry_after_ms = f.range("retry_after_ms")?;
    e.cycle = f.str_list("cycle")?;
    if let Some(map) = f.object("results")? {
        let mut results = Vec::new();
        for (alias, v) in map {
            let c = format!("{ctx}: results[{alias:?}]");
            let outcome = match v {
                Value::String(s) => OutcomeExpect {
                    status: Some(outcome_status(&c, s)?),
                    expires_at: None,
                },
                other => {
                    let o = Fields::new(other, c.clone(), &["status", "expires_at"])?;
                    let status = o
                        .str("status")?
                        .map(|s| outcome_status(&c, &s))
                        .transpose()?;
                    let expires_at = o.u64("expires_at")?;
                    if expires_at.is_some() && matches!(status, Some(Err(_))) {
                        return Err(format!("{c}: `expires_at` only goes with status OK"));
                    }
                    OutcomeExpect { status, expires_at }
                }
            };
            results.push((alias.clone(), outcome));
        }
        e.results = Some(results);
    }
    e.released = f.bool("released")?;
    if let Some(map) = f.object("status")? {
        let mut statuses = Vec::new();
        for (alias, v) in map {
            let c = format!("{ctx}: status[{alias:?}]");
            let status = match v {
                Value::String(s) => StatusExpect {
                    status: Some(one_of(&c, "status", s.clone(), STATUSES)?),
                    expires_at: None,
                },
                other => {
                    let o = Fields::new(other, c.clone(), &["status", "expires_at"])?;
                    let status = o
                        .str("status")?
                        .map(|s| one_of(&c, "status", s, STATUSES))
                        .transpose()?;
                    let expires_at = o.u64("expires_at")?;
                    if expires_at.is_some() && status.as_deref().is_some_and(|s| s != "ACTIVE") {
                        return Err(format!("{c}: `expires_at` only goes with status ACTIVE"));
                    }
                    StatusExpect { status, expires_at }
                }
            };
            statuses.push((alias.clone(), status));
        }
        e.status = Some(statuses);
    }
    e.holders = f
        .array("holders")?
        .map(|items| parse_holders(items, &format!("{ctx}: holders")))
        .transpose()?;
    e.covering = f
        .array("covering")?
        .map(|items| parse_holders(items, &format!("{ctx}: covering")))
        .transpose()?;
    if let Some(items) = f.array("waiting")? {
        let mut waiting = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let w = Fields::new(item, format!("{ctx}: waiting[{i}]"), &["session", "ticket"])?;
            waiting.push(WaiterExpect {
                session: w.str("session")?,
                ticket: w.str("ticket")?,
            });
        }
        e.waiting = Some(waiting);
    }
    e.deadline = f.u64_or_null("deadline")?;
    e.priority_lt = f.str("priority_lt")?;
    e.epoch = f.u64("epoch")?;
    if let Some(items) = f.array("events")? {
        e.events = items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_event(item, &format!("{ctx}: events[{i}]")))
            .collect::<Result<_, _>>()?;
    }
    if action == "acquire" {
        check_verdict_fields(&ctx, &e)?;
    }
    Ok(e)
}

/// Fields that only one verdict can carry must not be asked of another.
fn check_verdict_fields(ctx: &str, e: &Expect) -> Result<(), String> {
    let Some(verdict) = e.verdict.as_deref() else {
        return Ok(());
    };
    let wrong = match verdict {
        "GRANTED" => [
            ("ticket", e.ticket.is_some()),
            ("held_by", e.held_by.is_some()),
            ("retry_after_ms", e.retry_after_ms.is_some()),
            ("cycle", e.cycle.is_some()),
        ]
        .into_iter()
        .find(|(_, present)| *present),
        "WAIT" => [
            ("leases", e.leases.is_some()),
            ("retry_after_ms", e.retry_after_ms.is_some()),
            ("cycle", e.cycle.is_some()),
        ]
        .into_iter()
        .find(|(_, p)| *p),
        _ => [
            ("leases", e.leases.is_some()),
            ("ticket", e.ticket.is_some()),
        ]
        .into_iter()
        .find(|(_, p)| *p),
    };
    match wrong {
        Some((key, _)) => Err(format!("{ctx}: `{key}` cannot go with verdict {verdict}")),
        None => Ok(()),
    }
}

fn outcome_status(ctx: &str, name: &str) -> Result<Result<(), ErrorCode>, String> {
    if name == "OK" {
        return Ok(Ok(()));
    }
    let code = error_name(ctx, name)?;
    if !HEARTBEAT_ERRORS.contains(&code) {
        return Err(format!(
            "{ctx}: a heartbeat outcome is OK, LEASE_EXPIRED, LEASE_RELEASED, NOT_OWNER, UNKNOWN_LEASE or LIFETIME_EXCEEDED, got {name:?}"
        ));
    }
    Ok(Err(code))
}

fn parse_leases(items: &[Value], ctx: &str) -> Result<Vec<LeaseExpect>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let c = format!("{ctx}[{i}]");
            let f = Fields::new(item, c.clone(), LEASE_KEYS)?;
            Ok(LeaseExpect {
                bind: f.str("as")?,
                resource: f.str("resource")?,
                predicate: f.str("predicate")?.map(|p| predicate(&c, &p)).transpose()?,
                expires_at: f.u64("expires_at")?,
                ttl_ms: f.u64("ttl_ms")?,
                fence_gt: f.str("fence_gt")?,
                same_as: f.str("same_as")?,
            })
        })
        .collect()
}

fn parse_holders(items: &[Value], ctx: &str) -> Result<Vec<HolderExpect>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let c = format!("{ctx}[{i}]");
            let f = Fields::new(item, c.clone(), &["session", "predicate", "resource"])?;
            Ok(HolderExpect {
                session: f.str("session")?,
                predicate: f.str("predicate")?.map(|p| predicate(&c, &p)).transpose()?,
                resource: f.str("resource")?,
            })
        })
        .collect()
}

fn parse_event(value: &Value, ctx: &str) -> Result<EventExpect, String> {
    let kind = match value.get("event") {
        Some(Value::String(k)) => Some(k.as_str()),
        Some(v) => {
            return Err(format!(
                "{ctx}: `event` must be a string, got {}",
                json::show(v)
            ))
        }
        None => None,
    };
    let allowed: Vec<&str> = match kind {
        None => EVENT_KEYS.to_vec(),
        Some(k) => {
            let Some((_, fields)) = EVENT_KINDS.iter().find(|(name, _)| *name == k) else {
                let known: Vec<&str> = EVENT_KINDS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "{ctx}: unknown event {k:?} (known: {})",
                    known.join(", ")
                ));
            };
            std::iter::once("event")
                .chain(fields.iter().copied())
                .collect()
        }
    };
    let ctx = match kind {
        Some(k) => format!("{ctx} ({k})"),
        None => ctx.to_owned(),
    };
    let f = Fields::new(value, ctx.clone(), &allowed)?;
    Ok(EventExpect {
        event: f.str("event")?,
        ticket: f.str("ticket")?,
        session: f.str("session")?,
        lease: f.str("lease")?,
        by: f.str("by")?,
        // RELEASED lists lease ids (aliases); ACQUIRED and GRANTED list leases in full.
        leases: match kind {
            Some("RELEASED") => None,
            _ => f
                .array("leases")?
                .map(|items| parse_leases(items, &format!("{ctx}: leases")))
                .transpose()?,
        },
        retry_after_ms: f.range("retry_after_ms")?,
        lost_leases: f.str_list("lost_leases")?,
        lost_tickets: f.str_list("lost_tickets")?,
        released: match kind {
            Some("RELEASED") => f.str_list("leases")?,
            _ => None,
        },
        cycle: f.str_list("cycle")?,
    })
}
