//! The hot path's entry points: `Kernel.prototype.acquire`, `release`, and the queries the
//! friendly client makes after every call (`nextDeadlineIfQuiet`, else `pendingEvents` and
//! `nextDeadline`), without napi-rs's per-call borrow bookkeeping; and the machinery
//! ([`boundary`], [`receiver_of`], [`install_methods`]) with which [`crate::ledger`] installs
//! the `Ledger` calls of every lease block the same way.
//!
//! Contract: napi-rs v3 registers every `&mut self` call in a process-wide borrow table
//! (a mutex and a hash map), about 100 ns per call — a third of an acquire+release pair
//! through the binding. [`install`] replaces these two methods on the prototype, when the
//! module loads, by plain Node-API callbacks that behave exactly like the `#[napi]` methods
//! (same conversions, same errors, same answers: both call the same functions in
//! [`crate::kernel`]). They stay sound without the table because of the order of work:
//! every argument is converted first (converting may run user code, e.g. an array getter,
//! which may call the kernel again), then `this` is unwrapped with napi-rs's own type-tag
//! check (a receiver of another class is refused), the kernel is called, and the `&mut`
//! borrow ends before the answer is converted (which runs only this module's object
//! constructors). A panic is caught at the boundary and thrown as an `Error`. The queries
//! take no argument and only read (`&self`): they unwrap `this` the same way and call the
//! `#[napi]` methods themselves, so their answers and errors are theirs.

use crate::kernel::{self, Kernel};
use crate::throw;
use napi::bindgen_prelude::*;
use napi::sys;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

thread_local! {
    /// The manifest of the current acquire: its strings' allocations are reused. Taken out
    /// for the call, so a re-entrant call finds it empty and allocates its own.
    static MANIFEST: Cell<Vec<String>> = const { Cell::new(Vec::new()) };
}

/// Runs `work` with the reusable manifest buffer.
pub(crate) fn with_manifest<R>(work: impl FnOnce(&mut Vec<String>) -> R) -> R {
    let mut manifest = MANIFEST.with(Cell::take);
    let result = work(&mut manifest);
    MANIFEST.with(|slot| slot.set(manifest));
    result
}

pub(crate) type Call = unsafe fn(sys::napi_env, sys::napi_callback_info) -> Result<sys::napi_value>;

/// Runs a callback body at the Node-API boundary: errors are thrown, panics too.
pub(crate) unsafe fn boundary(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    call: Call,
) -> sys::napi_value {
    match catch_unwind(AssertUnwindSafe(|| unsafe { call(env, info) })) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => {
            unsafe { JsError::from(error).throw_into(env) };
            ptr::null_mut()
        }
        Err(_) => {
            let error =
                Error::from_reason("klock: a panic in the native kernel (a bug: please report it)");
            unsafe { JsError::from(error).throw_into(env) };
            ptr::null_mut()
        }
    }
}

/// `this` as a Kernel; anything else is a `TypeError`, as for the other methods.
unsafe fn receiver<const N: usize>(
    env: &Env,
    cb: &mut CallbackInfo<N>,
    method: &str,
) -> Result<*mut Kernel> {
    unsafe { receiver_of::<Kernel, N>(env, cb, "Kernel", method) }
}

/// `this` as an object of the `#[napi]` class `T` (named `class`); anything else is a
/// `TypeError`.
pub(crate) unsafe fn receiver_of<T: TypeName + MaybeTypeTag, const N: usize>(
    env: &Env,
    cb: &mut CallbackInfo<N>,
    class: &str,
    method: &str,
) -> Result<*mut T> {
    unsafe { cb.unwrap_raw::<T>() }.map_err(|_| {
        throw::type_error(
            env,
            crate::shared::INVALID_ARG_TYPE,
            format!("{class}.prototype.{method} was called on an object that is not a {class}"),
        )
    })
}

pub(crate) fn args<const N: usize>(
    env: sys::napi_env,
    cb: &CallbackInfo<N>,
) -> [Unknown<'static>; N] {
    cb.args
        .map(|value| unsafe { Unknown::from_raw_unchecked(env, value) })
}

unsafe fn acquire(env: sys::napi_env, info: sys::napi_callback_info) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<4>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [session, intents, options, now] = args(env, &cb);
    let verdict = with_manifest(|manifest| {
        let call = kernel::acquire_args(&e, session, intents, options, now, manifest)?;
        // SAFETY: unwrap_raw checks the receiver's type tag; the borrow ends with this call.
        let kernel: &mut Kernel = unsafe { &mut *receiver(&e, &mut cb, "acquire")? };
        kernel.run_acquire(&e, call, manifest)
    })?;
    unsafe { ToNapiValue::to_napi_value(env, verdict) }
}

unsafe fn release(env: sys::napi_env, info: sys::napi_callback_info) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<3>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [session, lease, now] = args(env, &cb);
    let call = kernel::release_args(&e, session, lease, now)?;
    // SAFETY: as in `acquire`.
    let kernel: &mut Kernel = unsafe { &mut *receiver(&e, &mut cb, "release")? };
    let released = kernel.run_release(&e, call)?;
    unsafe { bool::to_napi_value(env, released) }
}

unsafe fn pending_events(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<0>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    // SAFETY: as in `acquire`; a shared borrow, nothing is converted while it lives.
    let kernel: &Kernel = unsafe { &*receiver(&e, &mut cb, "pendingEvents")? };
    let count = kernel.pending_events(e)?;
    unsafe { u32::to_napi_value(env, count) }
}

unsafe fn next_deadline(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<0>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    // SAFETY: as in `pending_events`.
    let kernel: &Kernel = unsafe { &*receiver(&e, &mut cb, "nextDeadline")? };
    let deadline = kernel.next_deadline(e)?;
    unsafe { ToNapiValue::to_napi_value(env, deadline) }
}

unsafe fn next_deadline_if_quiet(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<0>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    // SAFETY: as in `pending_events`.
    let kernel: &Kernel = unsafe { &*receiver(&e, &mut cb, "nextDeadlineIfQuiet")? };
    let answer = kernel.next_deadline_if_quiet(e)?;
    unsafe { ToNapiValue::to_napi_value(env, answer) }
}

unsafe extern "C" fn next_deadline_if_quiet_callback(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    unsafe { boundary(env, info, next_deadline_if_quiet) }
}

unsafe extern "C" fn pending_events_callback(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    unsafe { boundary(env, info, pending_events) }
}

unsafe extern "C" fn next_deadline_callback(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    unsafe { boundary(env, info, next_deadline) }
}

unsafe extern "C" fn acquire_callback(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    unsafe { boundary(env, info, acquire) }
}

unsafe extern "C" fn release_callback(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    unsafe { boundary(env, info, release) }
}

/// Replaces `acquire`, `release`, `pendingEvents`, `nextDeadline` and `nextDeadlineIfQuiet` on
/// `Kernel.prototype`.
pub(crate) fn install(env: &Env, prototype: &Object<'_>) -> Result<()> {
    let methods: [(&std::ffi::CStr, sys::napi_callback); 5] = [
        (c"acquire", Some(acquire_callback)),
        (c"release", Some(release_callback)),
        (c"pendingEvents", Some(pending_events_callback)),
        (c"nextDeadline", Some(next_deadline_callback)),
        (
            c"nextDeadlineIfQuiet",
            Some(next_deadline_if_quiet_callback),
        ),
    ];
    install_methods(env, prototype, &methods, "Kernel")
}

/// Replaces `methods` on a class's `prototype` by plain Node-API callbacks (writable,
/// configurable, not enumerable, as class methods are).
pub(crate) fn install_methods(
    env: &Env,
    prototype: &Object<'_>,
    methods: &[(&std::ffi::CStr, sys::napi_callback)],
    class: &str,
) -> Result<()> {
    let mut descriptors = Vec::with_capacity(methods.len());
    for &(name, method) in methods {
        let mut function = ptr::null_mut();
        let status = unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.count_bytes() as isize,
                method,
                ptr::null_mut(),
                &mut function,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Error::new(
                Status::from(status),
                format!("cannot create the fast {class} methods"),
            ));
        }
        descriptors.push(sys::napi_property_descriptor {
            utf8name: name.as_ptr(),
            name: ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: function,
            attributes: sys::PropertyAttributes::writable | sys::PropertyAttributes::configurable,
            data: ptr::null_mut(),
        });
    }
    let status = unsafe {
        sys::napi_define_properties(
            env.raw(),
            prototype.raw(),
            descriptors.len(),
            descriptors.as_ptr(),
        )
    };
    if status != sys::Status::napi_ok {
        return Err(Error::new(
            Status::from(status),
            format!("cannot install the fast {class} methods"),
        ));
    }
    Ok(())
}
