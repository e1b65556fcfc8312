//! # klock-node
//!
//! The Node addon of `klock-core` (napi-rs v3), loaded by the npm package `klock` through the
//! generated `node/index.js`. It exposes the kernel 1:1: one method per SPEC.md operation on
//! [`kernel::Kernel`], the drive contract (`pollEvent`/`drainEvents`, `nextDeadline`,
//! `advance`), events, and errors.
//!
//! Contract: translation only — argument conversion ([`input`]), error mapping ([`throw`]),
//! output conversion ([`output`], with the JS-side object constructors and the `KlockError`
//! class in [`shapes`]) and ownership of the kernel handle ([`kernel`]; the two calls of the
//! hot path enter through plain Node-API callbacks, see `fast`). The friendly clients' rules
//! are exposed for node/client.js ([`acquire`]; [`ledger`]: which nested blocks hold which
//! leases, and their heartbeat schedule) and node/remote.js ([`failover`]: which node
//! of a cluster a remote call asks next; [`watch`]: where its event stream resumes, and when
//! it may have missed events). Every rule about leases,
//! queues or time lives in `klock-core`.
//!
//! - Times, ids and counts cross as JS numbers. Inputs are validated: a non-number is a
//!   `TypeError` (`code` `ERR_INVALID_ARG_TYPE`, or `ERR_MISSING_ARGS` for `undefined`); NaN,
//!   ±Infinity, a fraction, a negative number or anything above 2^53 − 1 is a `RangeError`
//!   (`code` `ERR_OUT_OF_RANGE`). Outputs are exact up to 2^53 − 1 (the kernel's clock never
//!   exceeds the largest `now` passed in, so only sums such as `now + ttl` near that bound
//!   could round).
//! - Strings must be valid Unicode: a lone UTF-16 surrogate is a `TypeError`
//!   (`ERR_INVALID_ARG_VALUE`) instead of being replaced silently.
//! - Option and config objects accept exactly their documented keys; an unknown key is a
//!   `TypeError` (`ERR_INVALID_ARG_VALUE`): a typo never turns into a default.
//! - Kernel errors are thrown as `KlockError` (exported by this module, `extends Error`):
//!   `code` is the core's stable number (e.g. 300), `name` its stable upper-case name
//!   (`"NOT_OWNER"`), `message` what to fix. An unknown config key is `INVALID_CONFIG`.
//! - The API is the one JavaScript API of bindings/js-api/kernel.d.ts, shared with the wasm
//!   package: the same names, argument order, shapes and errors. node/index.d.ts is
//!   generated from the `#[napi]` declarations here and node/index.header.d.ts, and a tsc
//!   check holds it to kernel.d.ts both ways; the names and argument errors come from the
//!   shared module ([`shared`], bindings/js-api/shared.rs). `ERROR_CODES`, `PREDICATES`,
//!   `EVENT_KINDS` and the config keys are the core's lists.
//! - A failed call changes nothing but the settlement of time (SPEC.md §2), exactly as in the
//!   core: argument errors are raised before the kernel is called at all.
//! - A panic in the kernel (a bug) never unwinds into Node: it is thrown as an `Error`, and
//!   that `Kernel` refuses every later call (its state may be half-updated).

#![deny(clippy::all)]

pub mod acquire;
pub mod failover;
mod fast;
pub mod flock;
pub mod input;
pub mod kernel;
pub mod ledger;
pub mod output;
pub mod shapes;
#[path = "../../js-api/shared.rs"]
pub mod shared;
pub mod throw;
pub mod watch;

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Most intents one manifest may name (counted before duplicates are removed).
#[napi]
pub const MAX_MANIFEST_INTENTS: u32 = klock_core::MAX_MANIFEST_INTENTS as u32;

/// Longest `agentId` or `namespace`, in UTF-8 bytes.
#[napi]
pub const MAX_NAME_BYTES: u32 = klock_core::MAX_NAME_BYTES as u32;

/// Longest resource text, in UTF-8 bytes (as given, before normalisation).
#[napi]
pub const MAX_RESOURCE_BYTES: u32 = klock_core::MAX_RESOURCE_BYTES as u32;

/// How many heartbeats one remote client has in flight at most (the core's
/// `client::renewals` rule): a renewal due while that many are out waits for one to end.
#[napi]
pub const MAX_RENEWALS_IN_FLIGHT: u32 = klock_core::client::renewals::MAX_RENEWALS_IN_FLIGHT as u32;

/// Registers `KlockError`, the core's lists (`ERROR_CODES`, `PREDICATES`, `EVENT_KINDS`,
/// frozen), its name of a lease lost at its local deadline (`LOST_AT_LOCAL_DEADLINE`) and the
/// header naming a cluster's leader (`LEADER_HEADER`) on the module's exports, and the fast
/// `acquire`/`release`/`pendingEvents`/`nextDeadline`.
#[napi(module_exports)]
pub fn init(mut exports: Object, env: Env) -> Result<()> {
    let class = shapes::define(&env)?;
    exports.set("KlockError", class)?;
    // The class is a function: read it without the Object type check.
    let kernel: Object = exports.get_named_property_unchecked("Kernel")?;
    let prototype: Object = kernel.get_named_property_unchecked("prototype")?;
    fast::install(&env, &prototype)?;
    let ledger: Object = exports.get_named_property_unchecked("Ledger")?;
    ledger::install(&env, &ledger.get_named_property_unchecked("prototype")?)?;
    let mut codes = Object::new(&env)?;
    for code in klock_core::ErrorCode::ALL {
        codes.set(code.name(), code.code())?;
    }
    codes.freeze()?;
    exports.set("ERROR_CODES", codes)?;
    exports.set("PREDICATES", frozen_list(&env, &shapes::predicate_names())?)?;
    exports.set("EVENT_KINDS", frozen_list(&env, &klock_core::Event::KINDS)?)?;
    exports.set(
        "LOST_AT_LOCAL_DEADLINE",
        klock_core::client::watch::LOST_AT_LOCAL_DEADLINE,
    )?;
    exports.set("LEADER_HEADER", klock_core::client::failover::LEADER_HEADER)?;
    Ok(())
}

/// A frozen Array of `names`.
fn frozen_list<'env>(env: &'env Env, names: &[&str]) -> Result<Object<'env>> {
    let mut list = Array::from_ref_vec(env, names)?.coerce_to_object()?;
    list.freeze()?;
    Ok(list)
}

/// Validates `"PREDICATE TYPE:/path"` (split at the first space) without a kernel.
///
/// Returns the canonical predicate and the normalised resource; throws `KlockError`
/// `INVALID_PREDICATE` or `INVALID_RESOURCE`.
#[napi(ts_args_type = "intent: string", ts_return_type = "Intent")]
pub fn parse_intent(env: Env, intent: Unknown<'_>) -> Result<output::Intent> {
    let text = input::string(&env, intent, "intent")?;
    match klock_core::parse_intent(&text) {
        Ok((predicate, resource)) => Ok(output::Intent {
            predicate: predicate.name().to_owned(),
            resource: resource.into_string(),
        }),
        Err(e) => Err(throw::kernel_error(&env, &e)),
    }
}
