//! The JS side of the module: the `KlockError` class and the constructors of the hot output
//! objects (leases, verdicts, events), defined once per JS environment.
//!
//! Contract: [`define`] evaluates [`SOURCE`] when the module loads and keeps a reference to
//! every value it returns in the environment's instance data (one set per main thread or
//! worker). [`call`] builds an object by calling one of those functions with already
//! converted arguments. Building an object with a JS object literal gives every object of a
//! kind the same hidden class at once, which is several times faster than adding properties
//! one by one from native code — the acquire/release path depends on it. The functions only
//! assemble their arguments into objects: no decision is taken here.

use napi::bindgen_prelude::*;
use napi::{sys, UnknownRef};
use std::cell::Cell;
use std::ptr;

/// Evaluated once per environment: a function of the predicate names (in the core's order,
/// [`define`] passes them) returning the values indexed by [`Shape`]. `KlockError` is the
/// shared class source of both JS packages (bindings/js-api/klock-error.js). Event objects
/// get their kind from the core (`Event::name`) as their first argument.
const SOURCE: &str = concat!(
    "(function (PREDICATES) {\n'use strict';\n",
    include_str!("../../js-api/klock-error.js"),
    r#"
  const lease = (leaseId, sessionId, agentId, resource, p, fence, acquiredAt, expiresAt, ttlMs) =>
    ({ leaseId, sessionId, agentId, resource, predicate: PREDICATES[p], fence, acquiredAt, expiresAt, ttlMs });
  return [
    KlockError,
    lease,
    (leases) => ({ verdict: 'GRANTED', leases }),
    (a, b, c, d, e, f, g, h, i) => ({ verdict: 'GRANTED', leases: [lease(a, b, c, d, e, f, g, h, i)] }),
    (ticket, heldBy) => ({ verdict: 'WAIT', ticket, heldBy }),
    (retryAfterMs, heldBy) => ({ verdict: 'DIE', retryAfterMs, heldBy }),
    (event, ticket, session, leases) => ({ event, ticket, session, leases }),
    (event, ticket, session) => ({ event, ticket, session }),
    (event, ticket, session, retryAfterMs) => ({ event, ticket, session, retryAfterMs }),
    (event, lease, session) => ({ event, lease, session }),
    (event, session, by, lostLeases, lostTickets, retryAfterMs) => ({ event, session, by, lostLeases, lostTickets, retryAfterMs }),
    (event, session, reason) => ({ event, session, reason }),
    (retryAfterMs, heldBy, cycle) => ({ verdict: 'DIE', retryAfterMs, heldBy, cycle }),
    (event, ticket, session, retryAfterMs, cycle) => ({ event, ticket, session, retryAfterMs, cycle }),
    (event, session, leases) => ({ event, session, leases }),
  ];
})"#
);

/// The values [`SOURCE`] returns, in order.
#[derive(Clone, Copy)]
pub enum Shape {
    KlockError = 0,
    Lease,
    Granted,
    GrantedOne,
    Wait,
    Die,
    EventGranted,
    EventWaitTimeout,
    EventDied,
    EventLeaseExpired,
    EventWounded,
    EventSessionClosed,
    /// A DIE or DIED of a wait-for cycle's victim (`detect`): the others plus `cycle`, which
    /// is present only then (docs/SPEC.md §6.1), so the common objects keep their shape.
    DieInCycle,
    EventDiedInCycle,
    /// ACQUIRED (`leases`: lease objects) and RELEASED (`leases`: lease ids).
    EventSessionLeases,
}

const COUNT: usize = Shape::EventSessionLeases as usize + 1;

/// What the module keeps per JS environment.
pub struct Shapes {
    values: Vec<UnknownRef<false>>,
}

/// Evaluates [`SOURCE`] in this environment with the core's predicate names and keeps its
/// values; returns `KlockError`.
pub(crate) fn define<'env>(env: &'env Env) -> Result<Unknown<'env>> {
    let make: Function<'env, Vec<&str>, Array<'env>> = env.run_script(SOURCE)?;
    let list = make.call(predicate_names())?;
    let mut values = Vec::with_capacity(COUNT);
    for i in 0..list.len() {
        let value: Unknown<'env> = list
            .get(i)?
            .ok_or_else(|| Error::from_reason("shape missing"))?;
        values.push(unsafe { UnknownRef::<false>::from_napi_value(env.raw(), value.raw())? });
    }
    if values.len() != COUNT {
        return Err(Error::from_reason(
            "the shape table does not match its source",
        ));
    }
    env.set_instance_data(Shapes { values }, (), |_| forget_cached())?;
    list.get::<Unknown<'env>>(Shape::KlockError as u32)?
        .ok_or_else(|| Error::from_reason("KlockError missing"))
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(Status::from(status), format!("{what} failed")))
    }
}

thread_local! {
    /// The last environment that asked on this thread and its shapes: instance data is
    /// looked up through a global registry, too slow for every lease. A JS environment runs
    /// on one thread, and its instance-data finalizer clears the entry before it goes away.
    static CACHED: Cell<(sys::napi_env, *const Shapes)> = const { Cell::new((ptr::null_mut(), ptr::null())) };
}

fn forget_cached() {
    CACHED.with(|c| c.set((ptr::null_mut(), ptr::null())));
}

unsafe fn shapes<'a>(env: sys::napi_env) -> Result<&'a Shapes> {
    let (cached_env, cached) = CACHED.with(Cell::get);
    if cached_env == env && !cached.is_null() {
        // SAFETY: set below from this environment's live instance data, cleared by its
        // finalizer; `env` is calling us, so it is alive.
        return Ok(unsafe { &*cached });
    }
    let e = Env::from_raw(env);
    let shapes: &Shapes = e
        .get_instance_data::<Shapes>()?
        .ok_or_else(|| Error::from_reason("klock shapes are not defined"))?;
    CACHED.with(|c| c.set((env, shapes as *const Shapes)));
    Ok(shapes)
}

/// The value `shape` stands for in this environment.
pub(crate) unsafe fn get(env: sys::napi_env, shape: usize) -> Result<sys::napi_value> {
    let shapes = unsafe { shapes(env)? };
    unsafe { <&UnknownRef<false>>::to_napi_value(env, &shapes.values[shape]) }
}

/// Builds an object by calling `shape`'s function with `args`.
pub(crate) unsafe fn call(
    env: sys::napi_env,
    shape: Shape,
    args: &[sys::napi_value],
) -> Result<sys::napi_value> {
    let function = unsafe { get(env, shape as usize)? };
    let mut undefined = ptr::null_mut();
    check(
        unsafe { sys::napi_get_undefined(env, &mut undefined) },
        "napi_get_undefined",
    )?;
    let mut result = ptr::null_mut();
    check(
        unsafe {
            sys::napi_call_function(
                env,
                undefined,
                function,
                args.len(),
                args.as_ptr(),
                &mut result,
            )
        },
        "napi_call_function",
    )?;
    Ok(result)
}

/// The predicates' names in the core's order ([`klock_core::Predicate::ALL`]).
pub(crate) fn predicate_names() -> Vec<&'static str> {
    klock_core::Predicate::ALL
        .iter()
        .map(|p| p.name())
        .collect()
}

// The lease constructor indexes the names by the predicate's discriminant: proven here to be
// its position in `Predicate::ALL`, at compile time.
const _: () = {
    let mut i = 0;
    while i < klock_core::Predicate::ALL.len() {
        assert!(klock_core::Predicate::ALL[i] as usize == i);
        i += 1;
    }
};

/// A predicate as the lease constructor takes it: its index in [`predicate_names`].
pub(crate) unsafe fn predicate(
    env: sys::napi_env,
    p: klock_core::Predicate,
) -> Result<sys::napi_value> {
    unsafe { u32::to_napi_value(env, p as u32) }
}

/// `new KlockError(message, code, name)`.
pub(crate) unsafe fn klock_error(
    env: sys::napi_env,
    e: &klock_core::Error,
) -> Result<sys::napi_value> {
    let class = unsafe { get(env, Shape::KlockError as usize)? };
    let argv = unsafe {
        [
            <&str>::to_napi_value(env, &e.message)?,
            u32::to_napi_value(env, e.code.code())?,
            <&str>::to_napi_value(env, e.code.name())?,
        ]
    };
    let mut error = ptr::null_mut();
    check(
        unsafe { sys::napi_new_instance(env, class, argv.len(), argv.as_ptr(), &mut error) },
        "new KlockError",
    )?;
    Ok(error)
}
