//! Argument conversion: JS values to the kernel's inputs, validated.
//!
//! Contract: every function takes the raw JS value and a label for messages (`now`,
//! `options.ttlMs`, `intents[3]`) and either returns the converted value or throws (see
//! [`crate::throw`]) and returns the pending error:
//!
//! | input | accepted | otherwise |
//! |---|---|---|
//! | number (time, id, count) | an integer `0 ..= 2^53 − 1` | `TypeError` `ERR_INVALID_ARG_TYPE` (not a number; `ERR_MISSING_ARGS` for an `undefined` argument), `RangeError` `ERR_OUT_OF_RANGE` (NaN, ±Infinity, fraction, negative, too large) |
//! | string | a string that is valid Unicode | `TypeError` `ERR_INVALID_ARG_TYPE`, `ERR_INVALID_ARG_VALUE` (lone surrogate) |
//! | boolean | `true`/`false` | `TypeError` `ERR_INVALID_ARG_TYPE` |
//! | list | an `Array` of the above | `TypeError` `ERR_INVALID_ARG_TYPE` (naming the bad index) |
//! | options object | a plain object with only the documented keys; `undefined`/`null` = all defaults; a key set to `undefined` = absent | `TypeError` `ERR_INVALID_ARG_TYPE`, `ERR_INVALID_ARG_VALUE` (unknown key; an unknown config key is the kernel's `INVALID_CONFIG`) |
//!
//! Nothing here knows what the values mean: the kernel validates them (empty manifest,
//! unknown ids, bad resources...) and answers with its own errors. Key names and messages
//! are those of the shared module (`bindings/js-api/shared.rs`), the same in the wasm package.

use crate::shared::{self, INVALID_ARG_TYPE, INVALID_ARG_VALUE, MISSING_ARGS};
use crate::throw;
use klock_core::{AcquireOptions, Config, DigestIdentity, DigestRecovery, SessionId, StateDigest};
use napi::bindgen_prelude::*;
use napi::{sys, JsValue, ValueType};
use std::ptr;

/// How messages name a value's type (the JS `typeof`, through [`shared::describe`]).
fn type_name(t: ValueType) -> &'static str {
    shared::describe(match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "boolean",
        ValueType::Number => "number",
        ValueType::String => "string",
        ValueType::Symbol => "symbol",
        ValueType::Object | ValueType::External => "object",
        ValueType::Function => "function",
        ValueType::BigInt => "bigint",
        _ => "unknown",
    })
}

/// The name of a value in messages, formatted only when a message is written.
#[derive(Clone, Copy)]
pub enum Label<'a> {
    /// `now`
    Name(&'a str),
    /// `intents[3]`
    Item(&'a Label<'a>, u32),
    /// `options.ttlMs`
    Key(&'a str, &'a str),
}

impl std::fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Name(name) => f.write_str(name),
            Label::Item(list, i) => write!(f, "{list}[{i}]"),
            Label::Key(object, key) => write!(f, "{object}.{key}"),
        }
    }
}

/// Where a value came from: a top-level argument (`undefined` means it was not passed) or a
/// field or element of one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Argument,
    Field,
}

fn wrong_type(env: &Env, place: Place, what: Label<'_>, wanted: &str, got: ValueType) -> Error {
    if got == ValueType::Undefined && place == Place::Argument {
        return throw::type_error(env, MISSING_ARGS, shared::missing(what, wanted));
    }
    throw::type_error(
        env,
        INVALID_ARG_TYPE,
        shared::wrong_type(what, wanted, type_name(got)),
    )
}

/// A time, id or count: an integer from 0 to 2^53 − 1.
pub fn number(env: &Env, value: Unknown<'_>, what: Label<'_>, place: Place) -> Result<u64> {
    // One call on the hot path: napi_get_value_double fails for anything but a number, and
    // only then is the type looked up for the message.
    let raw = value.value();
    let mut x = 0.0;
    if unsafe { sys::napi_get_value_double(raw.env, raw.value, &mut x) } != sys::Status::napi_ok {
        let t = value.get_type()?;
        return Err(wrong_type(env, place, what, "an integer number", t));
    }
    if !shared::is_safe_integer(x) {
        return Err(throw::range_error(env, shared::out_of_range(what, x)));
    }
    Ok(x as u64)
}

/// A top-level numeric argument.
pub fn number_arg(env: &Env, value: Unknown<'_>, what: &str) -> Result<u64> {
    number(env, value, Label::Name(what), Place::Argument)
}

/// An optional top-level numeric argument: `undefined` is `None`.
pub fn optional_number_arg(env: &Env, value: Unknown<'_>, what: &str) -> Result<Option<u64>> {
    if value.get_type()? == ValueType::Undefined {
        return Ok(None);
    }
    number_arg(env, value, what).map(Some)
}

/// An optional top-level string argument: `undefined` or `null` is `None`.
pub fn optional_string_arg(env: &Env, value: Unknown<'_>, what: &str) -> Result<Option<String>> {
    if matches!(value.get_type()?, ValueType::Undefined | ValueType::Null) {
        return Ok(None);
    }
    string(env, value, what).map(Some)
}

/// A string that is valid Unicode (no lone surrogate).
pub fn string_at(env: &Env, value: Unknown<'_>, what: Label<'_>, place: Place) -> Result<String> {
    let mut text = String::new();
    string_into(env, value, what, place, &mut text)?;
    Ok(text)
}

/// Like [`string_at`], into `out` (its allocation is reused).
pub fn string_into(
    env: &Env,
    value: Unknown<'_>,
    what: Label<'_>,
    place: Place,
    out: &mut String,
) -> Result<()> {
    let raw = value.value();
    let mut len = 0usize;
    // The length query fails for anything but a string: the type is looked up only then.
    let status = unsafe {
        sys::napi_get_value_string_utf8(raw.env, raw.value, ptr::null_mut(), 0, &mut len)
    };
    if status != sys::Status::napi_ok {
        let t = value.get_type()?;
        return Err(wrong_type(env, place, what, "a string", t));
    }
    let mut bytes = std::mem::take(out).into_bytes();
    bytes.clear();
    bytes.reserve(len + 1);
    let mut written = 0usize;
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            raw.env,
            raw.value,
            bytes.as_mut_ptr().cast(),
            len + 1,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(Error::from_reason("napi_get_value_string_utf8 failed"));
    }
    // SAFETY: napi wrote `written` bytes (at most `len`) into the reserved capacity.
    unsafe { bytes.set_len(written) };
    // V8 writes UTF-8, a lone surrogate becoming U+FFFD; checked, never trusted blindly.
    *out =
        String::from_utf8(bytes).map_err(|_| Error::from_reason("napi returned invalid UTF-8"))?;
    // A U+FFFD (EF BF BD) may be a replaced lone surrogate: look closer only then (a memchr
    // for EF first, not a char search).
    if out.as_bytes().contains(&0xEF) && out.contains('\u{FFFD}') {
        let units: Utf16String = unsafe { value.cast()? };
        if String::from_utf16(&units).is_err() {
            return Err(throw::type_error(
                env,
                INVALID_ARG_VALUE,
                shared::lone_surrogate(what),
            ));
        }
    }
    Ok(())
}

/// A top-level string argument.
pub fn string(env: &Env, value: Unknown<'_>, what: &str) -> Result<String> {
    string_at(env, value, Label::Name(what), Place::Argument)
}

/// `true` or `false`.
pub fn boolean(env: &Env, value: Unknown<'_>, what: Label<'_>, place: Place) -> Result<bool> {
    let t = value.get_type()?;
    if t != ValueType::Boolean {
        return Err(wrong_type(env, place, what, "true or false", t));
    }
    unsafe { value.cast() }
}

/// Whether `value` is an Array.
pub fn is_array(value: &Unknown<'_>) -> Result<bool> {
    let mut result = false;
    let v = value.value();
    let status = unsafe { sys::napi_is_array(v.env, v.value, &mut result) };
    if status != sys::Status::napi_ok {
        return Err(Error::from_reason("napi_is_array failed"));
    }
    Ok(result)
}

/// An object (not an Array), for the caller to read or write by name (its other keys are
/// left alone: the friendly client passes the kernel's own lease objects).
pub fn object<'env>(
    env: &Env,
    value: Unknown<'env>,
    what: Label<'_>,
    place: Place,
) -> Result<Object<'env>> {
    let t = value.get_type()?;
    if t != ValueType::Object || is_array(&value)? {
        if t == ValueType::Undefined && place == Place::Argument {
            return Err(wrong_type(env, place, what, "an object", t));
        }
        let got = if t == ValueType::Object {
            "an Array"
        } else {
            type_name(t)
        };
        return Err(throw::type_error(
            env,
            INVALID_ARG_TYPE,
            shared::not_object(what, got),
        ));
    }
    unsafe { value.cast() }
}

/// An `Array`, element by element.
pub fn list<'env, T>(
    env: &Env,
    value: Unknown<'env>,
    what: Label<'_>,
    place: Place,
    mut item: impl FnMut(Unknown<'env>, Label<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    if !is_array(&value)? {
        let t = value.get_type()?;
        if t == ValueType::Undefined && place == Place::Argument {
            return Err(wrong_type(env, place, what, "an Array", t));
        }
        return Err(throw::type_error(
            env,
            INVALID_ARG_TYPE,
            shared::not_array(what, type_name(t)),
        ));
    }
    let array: Array<'env> = unsafe { value.cast()? };
    let mut out = Vec::with_capacity(array.len() as usize);
    for i in 0..array.len() {
        let element: Unknown<'env> = array
            .get(i)?
            .ok_or_else(|| Error::from_reason("array element vanished"))?;
        out.push(item(element, Label::Item(&what, i))?);
    }
    Ok(out)
}

/// A list of strings (a manifest).
pub fn strings(env: &Env, value: Unknown<'_>, what: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    strings_into(env, value, what, &mut out)?;
    Ok(out)
}

/// Like [`strings`], into `out`, reusing its strings' allocations: `out` holds exactly the
/// list's strings afterwards (on success).
pub fn strings_into(
    env: &Env,
    value: Unknown<'_>,
    what: &str,
    out: &mut Vec<String>,
) -> Result<()> {
    let mut n = 0usize;
    list(env, value, Label::Name(what), Place::Argument, |v, at| {
        if n == out.len() {
            out.push(String::new());
        }
        string_into(env, v, at, Place::Field, &mut out[n])?;
        n += 1;
        Ok(())
    })?;
    out.truncate(n);
    Ok(())
}

/// A list of ids.
pub fn numbers(env: &Env, value: Unknown<'_>, what: &str) -> Result<Vec<u64>> {
    list(env, value, Label::Name(what), Place::Argument, |v, at| {
        number(env, v, at, Place::Field)
    })
}

/// A plain object read key by key, refusing keys it does not know.
pub struct Fields<'env> {
    object: Object<'env>,
    what: String,
}

impl<'env> Fields<'env> {
    /// `None` for `undefined`/`null` when `optional`; otherwise the value must be an object
    /// holding only keys of `allowed` (a key whose value is `undefined` counts as absent); an
    /// unknown key is a `TypeError` `ERR_INVALID_ARG_VALUE`.
    pub fn new<S: AsRef<str>>(
        env: &Env,
        value: Unknown<'env>,
        what: &str,
        allowed: &[S],
        optional: bool,
        place: Place,
    ) -> Result<Option<Fields<'env>>> {
        Fields::refusing(env, value, what, allowed, optional, place, |key| {
            throw::type_error(
                env,
                INVALID_ARG_VALUE,
                shared::unknown_key(what, key, allowed),
            )
        })
    }

    /// Like [`Fields::new`], with `unknown` making the error for an unknown key.
    pub fn refusing<S: AsRef<str>>(
        env: &Env,
        value: Unknown<'env>,
        what: &str,
        allowed: &[S],
        optional: bool,
        place: Place,
        unknown: impl Fn(&str) -> Error,
    ) -> Result<Option<Fields<'env>>> {
        let t = value.get_type()?;
        if optional && matches!(t, ValueType::Undefined | ValueType::Null) {
            return Ok(None);
        }
        if t != ValueType::Object || is_array(&value)? {
            let got = if t == ValueType::Object {
                "an Array"
            } else {
                type_name(t)
            };
            if t == ValueType::Undefined && place == Place::Argument {
                return Err(wrong_type(env, place, Label::Name(what), "an object", t));
            }
            return Err(throw::type_error(
                env,
                INVALID_ARG_TYPE,
                shared::not_object(what, got),
            ));
        }
        let object: Object<'env> = unsafe { value.cast()? };
        for key in Object::keys(&object)? {
            if !allowed.iter().any(|a| a.as_ref() == key) {
                return Err(unknown(&key));
            }
        }
        Ok(Some(Fields {
            object,
            what: what.to_owned(),
        }))
    }

    /// The value of `key`, `None` when absent or `undefined`.
    pub fn get(&self, key: &str) -> Result<Option<Unknown<'env>>> {
        let value: Unknown<'env> = self.object.get_named_property_unchecked(key)?;
        Ok(if value.get_type()? == ValueType::Undefined {
            None
        } else {
            Some(value)
        })
    }

    fn label<'a>(&'a self, key: &'a str) -> Label<'a> {
        Label::Key(&self.what, key)
    }

    /// An optional number field.
    pub fn number(&self, env: &Env, key: &str) -> Result<Option<u64>> {
        self.get(key)?
            .map(|v| number(env, v, self.label(key), Place::Field))
            .transpose()
    }

    /// A required number field.
    pub fn req_number(&self, env: &Env, key: &str) -> Result<u64> {
        let value: Unknown<'env> = self.object.get_named_property_unchecked(key)?;
        number(env, value, self.label(key), Place::Field)
    }

    /// An optional boolean field.
    pub fn boolean(&self, env: &Env, key: &str) -> Result<Option<bool>> {
        self.get(key)?
            .map(|v| boolean(env, v, self.label(key), Place::Field))
            .transpose()
    }

    /// An optional string field.
    pub fn string(&self, env: &Env, key: &str) -> Result<Option<String>> {
        self.get(key)?
            .map(|v| string_at(env, v, self.label(key), Place::Field))
            .transpose()
    }

    /// A required string field.
    pub fn req_string(&self, env: &Env, key: &str) -> Result<String> {
        let value: Unknown<'env> = self.object.get_named_property_unchecked(key)?;
        string_at(env, value, self.label(key), Place::Field)
    }

    /// A required object field.
    pub fn req_object(&self, env: &Env, key: &str, allowed: &[&str]) -> Result<Fields<'env>> {
        let value: Unknown<'env> = self.object.get_named_property_unchecked(key)?;
        Ok(Fields::new(
            env,
            value,
            &self.label(key).to_string(),
            allowed,
            false,
            Place::Field,
        )?
        .expect("required"))
    }

    /// A required list-of-strings field.
    pub fn req_strings(&self, env: &Env, key: &str) -> Result<Vec<String>> {
        let value: Unknown<'env> = self.object.get_named_property_unchecked(key)?;
        list(env, value, self.label(key), Place::Field, |v, at| {
            string_at(env, v, at, Place::Field)
        })
    }
}

/// A kernel configuration: missing keys take SPEC.md's defaults. The keys are the core's
/// field names in camelCase; an unknown key and an unknown policy are the kernel's
/// `INVALID_CONFIG`, checked after the values' types.
pub fn config(env: &Env, value: Unknown<'_>) -> Result<Config> {
    let keys = shared::config_keys();
    let unknown = |key: &str| throw::kernel_error(env, &shared::unknown_config_key(key));
    let fields = Fields::refusing(env, value, "config", &keys, true, Place::Argument, unknown)?;
    let Some(f) = fields else {
        return Ok(Config::default());
    };
    shared::config(
        || f.string(env, "policy"),
        |key| f.number(env, key),
        |e| throw::kernel_error(env, &e),
    )
}

/// Acquire options: `{ ttlMs?, wait?, waitTimeoutMs? }`.
pub fn acquire_options(env: &Env, value: Unknown<'_>) -> Result<AcquireOptions> {
    let mut options = AcquireOptions::default();
    let Some(f) = Fields::new(
        env,
        value,
        "options",
        &shared::OPTION_KEYS,
        true,
        Place::Argument,
    )?
    else {
        return Ok(options);
    };
    options.ttl_ms = f.number(env, "ttlMs")?;
    if let Some(wait) = f.boolean(env, "wait")? {
        options.wait = wait;
    }
    options.wait_timeout_ms = f.number(env, "waitTimeoutMs")?;
    Ok(options)
}

/// A StateDigest as [`crate::output::StateDigest`] writes it (every key required).
pub fn digest(env: &Env, value: Unknown<'_>) -> Result<StateDigest> {
    let f = Fields::new(
        env,
        value,
        "digest",
        &shared::DIGEST_KEYS,
        false,
        Place::Argument,
    )?
    .expect("required");
    let version = f.req_number(env, "version")?;
    let Ok(version) = u32::try_from(version) else {
        return Err(throw::range_error(env, shared::version_too_large(version)));
    };
    let id = f.req_object(env, "identity", &shared::IDENTITY_KEYS)?;
    let identity = DigestIdentity {
        agent_id: id.req_string(env, "agentId")?,
        namespace: id.req_string(env, "namespace")?,
        session_id: SessionId(id.req_number(env, "sessionId")?),
        priority_timestamp: id.req_number(env, "priorityTimestamp")?,
        epoch: id.req_number(env, "epoch")?,
    };
    let rec = f.req_object(env, "recovery", &shared::RECOVERY_KEYS)?;
    let recovery = DigestRecovery {
        last_phase: rec.req_string(env, "lastPhase")?,
        pending_intents: rec.req_strings(env, "pendingIntents")?,
    };
    Ok(StateDigest {
        version,
        identity,
        recovery,
    })
}
