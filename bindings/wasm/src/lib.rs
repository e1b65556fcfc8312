//! # klock-wasm
//!
//! The kernel of `klock-core` for browsers and Node, through wasm-bindgen: one class,
//! `Kernel`, whose methods are the SPEC.md operations 1:1 (camelCase names, the same
//! arguments, `now` always last).
//!
//! Contract: translation only — argument conversion ([`args`]), answer conversion
//! ([`output`]) and error mapping ([`errors`]); every rule about leases, queues and time is in
//! the core. Each method converts and checks every argument first (throwing `TypeError` or
//! `RangeError` before the kernel is touched), then makes exactly one kernel call (or, for
//! `drainEvents`, polls until empty), then converts the answer. Numbers are JS numbers, never
//! BigInt, validated as integers in `0 ..= 2^53 − 1`. Kernel errors are thrown as `Error`
//! objects with `name` (`"UNKNOWN_SESSION"`, ...) and a numeric `code`; a call on a freed
//! kernel throws an `Error` with `code` `"ERR_INVALID_STATE"` (`freed-guard.js`, appended to
//! the generated glue by `build.sh`, checks before anything reaches Rust). Nothing here reads a
//! clock or draws randomness: the host passes `now` (milliseconds, any epoch) on every call.
//!
//! ```js
//! const k = new Kernel({ policy: "wait_die", seed: 1 });
//! const a = k.openSession("alice", "default", 0).session_id;
//! const v = k.acquire(a, ["MUTATES FILE:/src/a.ts"], 10);          // { verdict: "GRANTED", leases: [...] }
//! for (const e of k.drainEvents()) { /* e.event === "GRANTED" | "LEASE_EXPIRED" | ... */ }
//! const at = k.nextDeadline();                                      // number | null: call advance(at) then
//! ```

mod args;
mod errors;
mod output;
mod types;

use args::{bool_arg, opt_u64_arg, str_arg, str_list, u64_arg, u64_list, unknown_key, Fields};
use errors::{kernel_error, type_error, OrThrow};
use klock_core::{
    AcquireOptions, Config, DigestIdentity, DigestRecovery, ErrorCode, LeaseId, LeaseSelection,
    LeaseStatus, Policy, SessionId, StateDigest, TicketId,
};
use output::to_js;
use serde::Serialize;
use wasm_bindgen::prelude::*;

const CONFIG_KEYS: [&str; 11] = [
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

const OPTION_KEYS: [&str; 3] = ["ttl_ms", "wait", "wait_timeout_ms"];

fn config_slot<'a>(config: &'a mut Config, key: &str) -> &'a mut u64 {
    match key {
        "seed" => &mut config.seed,
        "default_ttl_ms" => &mut config.default_ttl_ms,
        "max_ttl_ms" => &mut config.max_ttl_ms,
        "default_wait_timeout_ms" => &mut config.default_wait_timeout_ms,
        "backoff_base_ms" => &mut config.backoff_base_ms,
        "backoff_cap_ms" => &mut config.backoff_cap_ms,
        "grace_ms" => &mut config.grace_ms,
        "session_idle_ms" => &mut config.session_idle_ms,
        "max_leases_per_session" => &mut config.max_leases_per_session,
        _ => &mut config.max_lease_lifetime_ms,
    }
}

/// `{policy?, seed?, ...}` → a [`Config`]; an unknown key is `INVALID_CONFIG`.
fn config_arg(value: &JsValue) -> Result<Config, JsValue> {
    let fields = Fields::new(value, "config", &CONFIG_KEYS, |key| {
        kernel_error(klock_core::Error::new(
            ErrorCode::InvalidConfig,
            unknown_key("config", key, &CONFIG_KEYS),
        ))
    })?;
    let mut config = Config::default();
    let policy = fields.get("policy");
    if !policy.is_undefined() && !policy.is_null() {
        config.policy = Policy::parse(&str_arg(&policy, "config.policy")?).or_throw()?;
    }
    for key in &CONFIG_KEYS[1..] {
        if let Some(v) = opt_u64_arg(&fields.get(key), &fields.path(key))? {
            *config_slot(&mut config, key) = v;
        }
    }
    Ok(config)
}

/// `{ttl_ms?, wait?, wait_timeout_ms?}` → [`AcquireOptions`].
fn options_arg(value: &JsValue) -> Result<AcquireOptions, JsValue> {
    let fields = Fields::new(value, "options", &OPTION_KEYS, |key| {
        type_error(&unknown_key("options", key, &OPTION_KEYS))
    })?;
    let wait = fields.get("wait");
    Ok(AcquireOptions {
        ttl_ms: opt_u64_arg(&fields.get("ttl_ms"), "options.ttl_ms")?,
        wait: if wait.is_undefined() || wait.is_null() {
            true
        } else {
            bool_arg(&wait, "options.wait")?
        },
        wait_timeout_ms: opt_u64_arg(&fields.get("wait_timeout_ms"), "options.wait_timeout_ms")?,
    })
}

/// A digest object as `digest()` returns it, checked for shape and types (its content is the
/// kernel's to judge: `INVALID_DIGEST`).
fn digest_arg(value: &JsValue) -> Result<StateDigest, JsValue> {
    let strict = |value: &JsValue, what: &str, keys: &[&str]| -> Result<Fields, JsValue> {
        if value.is_undefined() || value.is_null() {
            return Err(type_error(&format!(
                "{what} must be an object as returned by digest()"
            )));
        }
        Fields::new(value, what, keys, |key| {
            type_error(&unknown_key(what, key, keys))
        })
    };
    let d = strict(value, "digest", &["version", "identity", "recovery"])?;
    let version = u64_arg(&d.required("version")?, "digest.version")?;
    let version = u32::try_from(version).map_err(|_| {
        errors::range_error(&format!(
            "digest.version must be at most 2^32 - 1, got {version}"
        ))
    })?;
    let i = strict(
        &d.required("identity")?,
        "digest.identity",
        &[
            "agent_id",
            "namespace",
            "session_id",
            "priority_timestamp",
            "epoch",
        ],
    )?;
    let identity = DigestIdentity {
        agent_id: str_arg(&i.required("agent_id")?, "digest.identity.agent_id")?,
        namespace: str_arg(&i.required("namespace")?, "digest.identity.namespace")?,
        session_id: SessionId(u64_arg(
            &i.required("session_id")?,
            "digest.identity.session_id",
        )?),
        priority_timestamp: u64_arg(
            &i.required("priority_timestamp")?,
            "digest.identity.priority_timestamp",
        )?,
        epoch: u64_arg(&i.required("epoch")?, "digest.identity.epoch")?,
    };
    let r = strict(
        &d.required("recovery")?,
        "digest.recovery",
        &["last_phase", "pending_intents"],
    )?;
    let recovery = DigestRecovery {
        last_phase: str_arg(&r.required("last_phase")?, "digest.recovery.last_phase")?,
        pending_intents: str_list(
            &r.required("pending_intents")?,
            "digest.recovery.pending_intents",
        )?,
    };
    Ok(StateDigest {
        version,
        identity,
        recovery,
    })
}

/// One heartbeat outcome: `status` is `"OK"` (with the new `expires_at`) or an error name.
#[derive(Serialize)]
struct HeartbeatResult {
    lease_id: LeaseId,
    status: &'static str,
    expires_at: Option<u64>,
}

/// One reconcile answer: `status` with `expires_at` and `fence` when `ACTIVE` (else `null`).
#[derive(Serialize)]
struct ReconcileResult {
    lease_id: LeaseId,
    status: &'static str,
    expires_at: Option<u64>,
    fence: Option<u64>,
}

/// The coordination kernel (SPEC.md), driven by the host's clock.
///
/// After `free()` every method and getter throws an `Error` with `code` `'ERR_INVALID_STATE'`
/// ("this Kernel was freed"); `free()` again is a no-op (bindings/wasm/freed-guard.js).
#[wasm_bindgen(js_name = Kernel)]
pub struct WasmKernel {
    inner: klock_core::Kernel,
}

#[wasm_bindgen(js_class = Kernel)]
impl WasmKernel {
    /// A kernel with `config` (`{policy, seed, default_ttl_ms, ...}`, every key optional,
    /// defaults from SPEC.md); `undefined` for all defaults.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_optional_param_type = "Partial<Config> | null")] config: JsValue,
    ) -> Result<WasmKernel, JsValue> {
        let config = config_arg(&config)?;
        Ok(WasmKernel {
            inner: klock_core::Kernel::new(config).or_throw()?,
        })
    }

    /// The configuration the kernel runs with.
    #[wasm_bindgen(getter, unchecked_return_type = "Config")]
    pub fn config(&self) -> JsValue {
        to_js(self.inner.config())
    }

    /// An independent kernel in the same state (for "what if" branches).
    #[wasm_bindgen(js_name = clone)]
    pub fn fork(&self) -> WasmKernel {
        WasmKernel {
            inner: self.inner.clone(),
        }
    }

    /// The largest `now` the kernel has seen.
    pub fn now(&self) -> f64 {
        self.inner.now() as f64
    }

    /// Opens a session: `{session_id, agent_id, namespace, priority, epoch}`.
    #[wasm_bindgen(js_name = openSession, unchecked_return_type = "SessionInfo")]
    pub fn open_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] agent_id: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] namespace: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let agent_id = str_arg(&agent_id, "agent_id")?;
        let namespace = str_arg(&namespace, "namespace")?;
        let now = u64_arg(&now, "now")?;
        self.inner
            .open_session(&agent_id, &namespace, now)
            .map(|i| to_js(&i))
            .or_throw()
    }

    /// Releases every lease and cancels every wait of the session.
    #[wasm_bindgen(js_name = closeSession)]
    pub fn close_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<(), JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let now = u64_arg(&now, "now")?;
        self.inner.close_session(session, now).or_throw()
    }

    /// Marks the session as restarting: its leases get the grace period.
    #[wasm_bindgen(js_name = suspendSession)]
    pub fn suspend_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<(), JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let now = u64_arg(&now, "now")?;
        self.inner.suspend_session(session, now).or_throw()
    }

    /// The session's recovery digest (KLIS-8 shape): `{version, identity, recovery}`.
    #[wasm_bindgen(unchecked_return_type = "StateDigest")]
    pub fn digest(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let now = u64_arg(&now, "now")?;
        self.inner
            .digest(session, now)
            .map(|d| to_js(&d))
            .or_throw()
    }

    /// Re-attaches a restarted agent to its session (same priority, epoch + 1).
    #[wasm_bindgen(js_name = resumeSession, unchecked_return_type = "SessionInfo")]
    pub fn resume_session(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "StateDigest")] digest: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let digest = digest_arg(&digest)?;
        let now = u64_arg(&now, "now")?;
        self.inner
            .resume_session(&digest, now)
            .map(|i| to_js(&i))
            .or_throw()
    }

    /// Asks for every intent (`"PREDICATE TYPE:/path"`) at once, all-or-nothing. `options`:
    /// `{ttl_ms?, wait? = true, wait_timeout_ms?}`. Answers `{verdict: "GRANTED", leases}`,
    /// `{verdict: "WAIT", ticket, held_by}` or `{verdict: "DIE", retry_after_ms, held_by}`.
    #[wasm_bindgen(unchecked_return_type = "Verdict")]
    pub fn acquire(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string[]")] intents: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "AcquireOptions | null")] options: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let intents = str_list(&intents, "intents")?;
        let now = u64_arg(&now, "now")?;
        let options = options_arg(&options)?;
        self.inner
            .acquire(session, &intents, options, now)
            .map(|v| to_js(&v))
            .or_throw()
    }

    /// Renews leases (`"all"` or `null`: every active lease of the session). One
    /// `{lease_id, status, expires_at}` per lease: `status` `"OK"` with the new expiry, or
    /// `LEASE_EXPIRED` / `LEASE_RELEASED` / `NOT_OWNER` / `UNKNOWN_LEASE` / `LIFETIME_EXCEEDED`
    /// with `expires_at: null`.
    #[wasm_bindgen(unchecked_return_type = "HeartbeatResult[]")]
    pub fn heartbeat(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[] | \"all\" | null")] leases: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let ids: Option<Vec<LeaseId>> =
            if leases.is_null() || leases.as_string().is_some_and(|s| s == "all") {
                None
            } else {
                Some(
                    u64_list(&leases, "leases")?
                        .into_iter()
                        .map(LeaseId)
                        .collect(),
                )
            };
        let now = u64_arg(&now, "now")?;
        let which = match &ids {
            None => LeaseSelection::All,
            Some(ids) => LeaseSelection::Ids(ids),
        };
        let results = self.inner.heartbeat(session, which, now).or_throw()?;
        let results: Vec<HeartbeatResult> = results
            .into_iter()
            .map(|(lease_id, outcome)| match outcome {
                Ok(at) => HeartbeatResult {
                    lease_id,
                    status: "OK",
                    expires_at: Some(at),
                },
                Err(code) => HeartbeatResult {
                    lease_id,
                    status: code.name(),
                    expires_at: None,
                },
            })
            .collect();
        Ok(to_js(&results))
    }

    /// Releases one lease: `true` if this call released it, `false` if it had already ended.
    pub fn release(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] lease: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<bool, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let lease = LeaseId(u64_arg(&lease, "lease")?);
        let now = u64_arg(&now, "now")?;
        self.inner.release(session, lease, now).or_throw()
    }

    /// Releases every active lease of the session; answers how many.
    #[wasm_bindgen(js_name = releaseAll)]
    pub fn release_all(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<f64, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let now = u64_arg(&now, "now")?;
        self.inner
            .release_all(session, now)
            .map(|n| n as f64)
            .or_throw()
    }

    /// The kernel's truth about each lease: `{lease_id, status, expires_at, fence}` with
    /// `status` `ACTIVE` (expiry and fence set), `EXPIRED`, `RELEASED`, `NOT_OWNER` or `UNKNOWN`.
    #[wasm_bindgen(unchecked_return_type = "ReconcileResult[]")]
    pub fn reconcile(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] leases: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let ids: Vec<LeaseId> = u64_list(&leases, "leases")?
            .into_iter()
            .map(LeaseId)
            .collect();
        let now = u64_arg(&now, "now")?;
        let results = self.inner.reconcile(session, &ids, now).or_throw()?;
        let results: Vec<ReconcileResult> = results
            .into_iter()
            .map(|(lease_id, status)| match status {
                LeaseStatus::Active { expires_at, fence } => ReconcileResult {
                    lease_id,
                    status: status.name(),
                    expires_at: Some(expires_at),
                    fence: Some(fence),
                },
                other => ReconcileResult {
                    lease_id,
                    status: other.name(),
                    expires_at: None,
                    fence: None,
                },
            })
            .collect();
        Ok(to_js(&results))
    }

    /// Withdraws a waiting ticket of the session.
    #[wasm_bindgen(js_name = cancelWait)]
    pub fn cancel_wait(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] session: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] ticket: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<(), JsValue> {
        let session = SessionId(u64_arg(&session, "session")?);
        let ticket = TicketId(u64_arg(&ticket, "ticket")?);
        let now = u64_arg(&now, "now")?;
        self.inner.cancel_wait(session, ticket, now).or_throw()
    }

    /// Settles everything due at or before `now`; the events go to the queue.
    pub fn advance(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<(), JsValue> {
        let now = u64_arg(&now, "now")?;
        self.inner.advance(now);
        Ok(())
    }

    /// The earliest pending deadline (possibly already past), or `null`.
    #[wasm_bindgen(js_name = nextDeadline, unchecked_return_type = "number | null")]
    pub fn next_deadline(&self) -> JsValue {
        match self.inner.next_deadline() {
            Some(at) => JsValue::from_f64(at as f64),
            None => JsValue::NULL,
        }
    }

    /// The next queued event (`{event: "GRANTED", ...}`), oldest first; `null` when drained.
    #[wasm_bindgen(js_name = pollEvent, unchecked_return_type = "KlockEvent | null")]
    pub fn poll_event(&mut self) -> JsValue {
        match self.inner.poll_event() {
            Some(event) => to_js(&event),
            None => JsValue::NULL,
        }
    }

    /// Every queued event, oldest first (`pollEvent` until `null`, in one crossing).
    #[wasm_bindgen(js_name = drainEvents, unchecked_return_type = "KlockEvent[]")]
    pub fn drain_events(&mut self) -> JsValue {
        let events: Vec<klock_core::Event> =
            std::iter::from_fn(|| self.inner.poll_event()).collect();
        to_js(&events)
    }

    /// How many events wait to be polled.
    #[wasm_bindgen(js_name = pendingEvents)]
    pub fn pending_events(&self) -> f64 {
        self.inner.pending_events() as f64
    }

    /// Holders and queue of one resource node, and the holders covering it:
    /// `{resource, namespace, holders, waiting, covering}`. `namespace` `undefined` / `null`
    /// means `"default"`.
    #[wasm_bindgen(js_name = resourceState, unchecked_return_type = "ResourceState")]
    pub fn resource_state(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | null | undefined")] namespace: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let resource = str_arg(&resource, "resource")?;
        let namespace = if namespace.is_undefined() || namespace.is_null() {
            String::from("default")
        } else {
            str_arg(&namespace, "namespace")?
        };
        let now = u64_arg(&now, "now")?;
        self.inner
            .resource_state(&resource, &namespace, now)
            .map(|s| to_js(&s))
            .or_throw()
    }

    /// Counters per outcome, live totals, top contended resources and ghost agents.
    #[wasm_bindgen(unchecked_return_type = "Stats")]
    pub fn stats(&self) -> JsValue {
        to_js(&self.inner.stats())
    }

    /// The whole state after settling `now`: `{now, policy, next_deadline, sessions, leases,
    /// tickets, stats}`.
    #[wasm_bindgen(unchecked_return_type = "Snapshot")]
    pub fn snapshot(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = u64_arg(&now, "now")?;
        Ok(to_js(&self.inner.snapshot(now)))
    }
}

/// Every error name and its stable code: `{INVALID_RESOURCE: 100, ...}`.
#[wasm_bindgen(js_name = errorCodes, unchecked_return_type = "Record<ErrorName, number>")]
pub fn error_codes() -> JsValue {
    let codes: std::collections::BTreeMap<&str, u32> = ErrorCode::ALL
        .iter()
        .map(|c| (c.name(), c.code()))
        .collect();
    to_js(&codes)
}
