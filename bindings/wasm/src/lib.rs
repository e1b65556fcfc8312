//! # klock-wasm
//!
//! The kernel of `klock-core` for browsers and Node, through wasm-bindgen, with the one
//! JavaScript API of the Node addon (bindings/js-api/kernel.d.ts): the class `Kernel`, whose
//! methods are the SPEC.md operations 1:1 (camelCase names, `now` always last), `KlockError`,
//! `parseIntent`, and the core's lists and limits (`ERROR_CODES`, `PREDICATES`, `EVENT_KINDS`,
//! `MAX_*`).
//!
//! Contract: translation only — argument conversion ([`args`]), answer conversion
//! ([`output`]: the core's serde shapes with camelCase keys) and error mapping ([`errors`]);
//! every rule about leases, queues and time is in the core. Each method converts and checks
//! every argument first (throwing `TypeError` or `RangeError` before the kernel is touched),
//! then makes exactly one kernel call (or, for `drainEvents`, polls until empty), then
//! converts the answer. Converting may run the caller's code (an array getter), which may
//! call the same kernel: so methods borrow the object shared (`&self`) and the kernel
//! (`RefCell`) only for the kernel call itself, during which no JS runs, as the Node addon
//! does. Numbers are JS numbers, never BigInt, validated as integers in
//! `0 ..= 2^53 − 1`. Kernel errors are `KlockError`s (code, name, message). A call on a freed
//! kernel throws an `Error` with `code` `"ERR_INVALID_STATE"` (`freed-guard.js`, appended to
//! the generated glue by `build.sh`, checks before anything reaches Rust). The module-level
//! values live in the glue (`glue-prelude.js`): the start function below fills them from the
//! core when the module is instantiated. Nothing here reads a clock or draws randomness: the
//! host passes `now` (milliseconds, any epoch) on every call.
//!
//! Beside the one JS API, and only in this package: `Replayer` ([`replay`]), which replays a
//! `klock serve` history export for the dashboard.
//!
//! ```js
//! const k = new Kernel({ policy: "wait_die", seed: 1 });
//! const a = k.openSession("alice", "default", 0).sessionId;
//! const v = k.acquire(a, ["MUTATES FILE:/src/a.ts"], { ttlMs: 500 }, 10); // { verdict: "GRANTED", leases: [...] }
//! for (const e of k.drainEvents()) { /* e.event === "GRANTED" | "LEASE_EXPIRED" | ... */ }
//! const at = k.nextDeadline();                                             // number | null: call advance(at) then
//! ```

mod args;
mod errors;
mod output;
mod replay;
#[path = "../../js-api/shared.rs"]
mod shared;
mod types;

use args::{number_arg, string_arg, Fields, Place};
use errors::{kernel_error, type_error, OrThrow};
use klock_core::{
    AcquireOptions, Config, DigestIdentity, DigestRecovery, ErrorCode, Event, LeaseId,
    LeaseSelection, Output, Predicate, SessionId, StateDigest, TicketId,
};
use output::to_js;
use serde::Serialize;
use std::cell::{RefCell, RefMut};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// Fills the glue's module-level values (glue-prelude.js) with the core's lists.
    #[wasm_bindgen(js_name = __klock_define)]
    fn define(lists: JsValue);
}

/// The core's lists and limits, as the glue's module-level values take them.
#[derive(Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
struct Lists {
    /// `[name, code]` pairs in the core's (numeric) order.
    error_codes: Vec<(&'static str, u32)>,
    predicates: Vec<&'static str>,
    event_kinds: [&'static str; Event::KINDS.len()],
    max_manifest_intents: usize,
    max_name_bytes: usize,
    max_resource_bytes: usize,
}

/// Runs when the module is instantiated (not exported): hands the core's lists to the glue.
#[wasm_bindgen(start, private)]
fn start() {
    let lists = Lists {
        error_codes: ErrorCode::ALL
            .iter()
            .map(|c| (c.name(), c.code()))
            .collect(),
        predicates: Predicate::ALL.iter().map(|p| p.name()).collect(),
        event_kinds: Event::KINDS,
        max_manifest_intents: klock_core::MAX_MANIFEST_INTENTS,
        max_name_bytes: klock_core::MAX_NAME_BYTES,
        max_resource_bytes: klock_core::MAX_RESOURCE_BYTES,
    };
    // Plain serde_json: these keys are names, not fields to camelCase.
    let text = serde_json::to_string(&lists).expect("the lists serialise");
    define(js_sys::JSON::parse(&text).expect("serde_json writes valid JSON"));
}

/// A config object: the core's field names in camelCase; an unknown key is `INVALID_CONFIG`.
fn config_arg(value: &JsValue) -> Result<Config, JsValue> {
    let keys = shared::config_keys();
    let unknown = |key: &str| kernel_error(shared::unknown_config_key(key));
    let fields = Fields::refusing(value, "config", &keys, true, Place::Argument, unknown)?;
    let Some(f) = fields else {
        return Ok(Config::default());
    };
    shared::config(|| f.string("policy"), |key| f.number(key), kernel_error)
}

/// Acquire options: `{ ttlMs?, wait?, waitTimeoutMs? }`.
fn options_arg(value: &JsValue) -> Result<AcquireOptions, JsValue> {
    let mut options = AcquireOptions::default();
    let Some(f) = Fields::new(
        value,
        "options",
        &shared::OPTION_KEYS,
        true,
        Place::Argument,
    )?
    else {
        return Ok(options);
    };
    options.ttl_ms = f.number("ttlMs")?;
    if let Some(wait) = f.boolean("wait")? {
        options.wait = wait;
    }
    options.wait_timeout_ms = f.number("waitTimeoutMs")?;
    Ok(options)
}

/// A digest as `digest()` returns it, every key required (its content is the kernel's to
/// judge: `INVALID_DIGEST`).
fn digest_arg(value: &JsValue) -> Result<StateDigest, JsValue> {
    let f = Fields::new(
        value,
        "digest",
        &shared::DIGEST_KEYS,
        false,
        Place::Argument,
    )?
    .expect("required");
    let version = f.req_number("version")?;
    let version = u32::try_from(version)
        .map_err(|_| errors::range_error(&shared::version_too_large(version)))?;
    let id = f.req_object("identity", &shared::IDENTITY_KEYS)?;
    let identity = DigestIdentity {
        agent_id: id.req_string("agentId")?,
        namespace: id.req_string("namespace")?,
        session_id: SessionId(id.req_number("sessionId")?),
        priority_timestamp: id.req_number("priorityTimestamp")?,
        epoch: id.req_number("epoch")?,
    };
    let rec = f.req_object("recovery", &shared::RECOVERY_KEYS)?;
    let recovery = DigestRecovery {
        last_phase: rec.req_string("lastPhase")?,
        pending_intents: rec.req_strings("pendingIntents")?,
    };
    Ok(StateDigest {
        version,
        identity,
        recovery,
    })
}

fn session_arg(value: &JsValue) -> Result<SessionId, JsValue> {
    number_arg(value, "session").map(SessionId)
}

/// The per-lease answers in the core's own shape: `Output`'s list, camelCased.
fn answers(output: &Output, list: &str) -> JsValue {
    js_sys::Reflect::get(&to_js(output), &JsValue::from_str(list)).expect("an Output object")
}

/// Validates `"PREDICATE TYPE:/path"` without a kernel: `{predicate, resource}`.
#[wasm_bindgen(js_name = parseIntent, skip_typescript)]
pub fn parse_intent(intent: JsValue) -> Result<JsValue, JsValue> {
    let text = string_arg(&intent, "intent")?;
    let (predicate, resource) = klock_core::parse_intent(&text).or_throw()?;
    Ok(to_js(&klock_core::Intent {
        predicate,
        resource: resource.into_string(),
    }))
}

/// The coordination kernel (SPEC.md), driven by the host's clock (kernel.d.ts documents
/// every method).
#[wasm_bindgen(js_name = Kernel, skip_typescript)]
pub struct WasmKernel {
    inner: RefCell<klock_core::Kernel>,
}

impl WasmKernel {
    /// The kernel, for one call: taken after the arguments are converted and released before
    /// the answer is, so no JS code runs while it is borrowed.
    fn kernel(&self) -> RefMut<'_, klock_core::Kernel> {
        self.inner.borrow_mut()
    }
}

#[wasm_bindgen(js_class = Kernel)]
impl WasmKernel {
    #[wasm_bindgen(constructor)]
    pub fn new(config: JsValue) -> Result<WasmKernel, JsValue> {
        let config = config_arg(&config)?;
        let inner = klock_core::Kernel::new(config).or_throw()?;
        Ok(WasmKernel {
            inner: RefCell::new(inner),
        })
    }

    #[wasm_bindgen(getter)]
    pub fn config(&self) -> JsValue {
        let config = self.kernel().config().clone();
        to_js(&config)
    }

    #[wasm_bindgen(js_name = clone)]
    pub fn fork(&self) -> WasmKernel {
        let inner = self.kernel().clone();
        WasmKernel {
            inner: RefCell::new(inner),
        }
    }

    pub fn now(&self) -> f64 {
        self.kernel().now() as f64
    }

    #[wasm_bindgen(js_name = openSession)]
    pub fn open_session(
        &self,
        agent_id: JsValue,
        namespace: JsValue,
        now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let agent_id = string_arg(&agent_id, "agentId")?;
        let namespace = string_arg(&namespace, "namespace")?;
        let now = number_arg(&now, "now")?;
        let info = self.kernel().open_session(&agent_id, &namespace, now);
        info.map(|i| to_js(&i)).or_throw()
    }

    #[wasm_bindgen(js_name = closeSession)]
    pub fn close_session(&self, session: JsValue, now: JsValue) -> Result<(), JsValue> {
        let session = session_arg(&session)?;
        let now = number_arg(&now, "now")?;
        let done = self.kernel().close_session(session, now);
        done.or_throw()
    }

    #[wasm_bindgen(js_name = suspendSession)]
    pub fn suspend_session(&self, session: JsValue, now: JsValue) -> Result<(), JsValue> {
        let session = session_arg(&session)?;
        let now = number_arg(&now, "now")?;
        let done = self.kernel().suspend_session(session, now);
        done.or_throw()
    }

    pub fn digest(&self, session: JsValue, now: JsValue) -> Result<JsValue, JsValue> {
        let session = session_arg(&session)?;
        let now = number_arg(&now, "now")?;
        let digest = self.kernel().digest(session, now);
        digest.map(|d| to_js(&d)).or_throw()
    }

    #[wasm_bindgen(js_name = resumeSession)]
    pub fn resume_session(&self, digest: JsValue, now: JsValue) -> Result<JsValue, JsValue> {
        let digest = digest_arg(&digest)?;
        let now = number_arg(&now, "now")?;
        let info = self.kernel().resume_session(&digest, now);
        info.map(|i| to_js(&i)).or_throw()
    }

    pub fn acquire(
        &self,
        session: JsValue,
        intents: JsValue,
        options: JsValue,
        now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = session_arg(&session)?;
        let intents = args::strings(&intents, "intents", Place::Argument)?;
        let options = options_arg(&options)?;
        let now = number_arg(&now, "now")?;
        let verdict = self.kernel().acquire(session, &intents, options, now);
        verdict.map(|v| to_js(&v)).or_throw()
    }

    pub fn heartbeat(
        &self,
        session: JsValue,
        leases: JsValue,
        now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = session_arg(&session)?;
        let ids: Option<Vec<LeaseId>> = match leases.as_string() {
            Some(text) if text == "all" => None,
            Some(text) => {
                return Err(type_error(
                    shared::INVALID_ARG_VALUE,
                    &shared::not_all(&text),
                ))
            }
            None => Some(
                args::numbers(&leases, "leases")?
                    .into_iter()
                    .map(LeaseId)
                    .collect(),
            ),
        };
        let now = number_arg(&now, "now")?;
        let which = match &ids {
            None => LeaseSelection::All,
            Some(ids) => LeaseSelection::Ids(ids),
        };
        let results = self.kernel().heartbeat(session, which, now);
        let results = results.or_throw()?;
        Ok(answers(&Output::Heartbeat { results }, "results"))
    }

    pub fn release(&self, session: JsValue, lease: JsValue, now: JsValue) -> Result<bool, JsValue> {
        let session = session_arg(&session)?;
        let lease = LeaseId(number_arg(&lease, "lease")?);
        let now = number_arg(&now, "now")?;
        let released = self.kernel().release(session, lease, now);
        released.or_throw()
    }

    #[wasm_bindgen(js_name = releaseAll)]
    pub fn release_all(&self, session: JsValue, now: JsValue) -> Result<f64, JsValue> {
        let session = session_arg(&session)?;
        let now = number_arg(&now, "now")?;
        let count = self.kernel().release_all(session, now);
        count.map(|n| n as f64).or_throw()
    }

    pub fn reconcile(
        &self,
        session: JsValue,
        leases: JsValue,
        now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let session = session_arg(&session)?;
        let ids: Vec<LeaseId> = args::numbers(&leases, "leases")?
            .into_iter()
            .map(LeaseId)
            .collect();
        let now = number_arg(&now, "now")?;
        let statuses = self.kernel().reconcile(session, &ids, now);
        let statuses = statuses.or_throw()?;
        Ok(answers(&Output::Reconcile { statuses }, "statuses"))
    }

    #[wasm_bindgen(js_name = cancelWait)]
    pub fn cancel_wait(
        &self,
        session: JsValue,
        ticket: JsValue,
        now: JsValue,
    ) -> Result<(), JsValue> {
        let session = session_arg(&session)?;
        let ticket = TicketId(number_arg(&ticket, "ticket")?);
        let now = number_arg(&now, "now")?;
        let done = self.kernel().cancel_wait(session, ticket, now);
        done.or_throw()
    }

    pub fn advance(&self, now: JsValue) -> Result<(), JsValue> {
        let now = number_arg(&now, "now")?;
        self.kernel().advance(now);
        Ok(())
    }

    #[wasm_bindgen(js_name = nextDeadline)]
    pub fn next_deadline(&self) -> JsValue {
        let deadline = self.kernel().next_deadline();
        match deadline {
            Some(at) => JsValue::from_f64(at as f64),
            None => JsValue::NULL,
        }
    }

    /// `nextDeadline()` when no event waits to be polled, else `undefined`.
    #[wasm_bindgen(js_name = nextDeadlineIfQuiet)]
    pub fn next_deadline_if_quiet(&self) -> JsValue {
        let kernel = self.kernel();
        if kernel.pending_events() > 0 {
            return JsValue::UNDEFINED;
        }
        match kernel.next_deadline() {
            Some(at) => JsValue::from_f64(at as f64),
            None => JsValue::NULL,
        }
    }

    #[wasm_bindgen(js_name = pollEvent)]
    pub fn poll_event(&self) -> JsValue {
        let event = self.kernel().poll_event();
        match event {
            Some(event) => to_js(&event),
            None => JsValue::NULL,
        }
    }

    /// Every queued event in one crossing.
    #[wasm_bindgen(js_name = drainEvents)]
    pub fn drain_events(&self) -> JsValue {
        let events: Vec<Event> = std::iter::from_fn(|| self.kernel().poll_event()).collect();
        to_js(&events)
    }

    /// Whether ACQUIRED and RELEASED are emitted (default `true`, SPEC.md §9): a host that
    /// reads them nowhere may turn them off, which keeps an uncontended acquire and release
    /// free of their cost.
    #[wasm_bindgen(js_name = setHolderEvents)]
    pub fn set_holder_events(&self, on: bool) {
        self.kernel().set_holder_events(on);
    }

    #[wasm_bindgen(js_name = pendingEvents)]
    pub fn pending_events(&self) -> f64 {
        self.kernel().pending_events() as f64
    }

    #[wasm_bindgen(js_name = resourceState)]
    pub fn resource_state(
        &self,
        resource: JsValue,
        namespace: JsValue,
        now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let resource = string_arg(&resource, "resource")?;
        let namespace = string_arg(&namespace, "namespace")?;
        let now = number_arg(&now, "now")?;
        let state = self.kernel().resource_state(&resource, &namespace, now);
        state.map(|s| to_js(&s)).or_throw()
    }

    pub fn stats(&self) -> JsValue {
        let stats = self.kernel().stats();
        to_js(&stats)
    }

    pub fn snapshot(&self, now: JsValue) -> Result<JsValue, JsValue> {
        let now = number_arg(&now, "now")?;
        let snapshot = self.kernel().snapshot(now);
        Ok(to_js(&snapshot))
    }
}
