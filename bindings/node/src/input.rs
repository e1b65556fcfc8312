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
//! | options object | a plain object with only the documented keys; `undefined`/`null` = all defaults; a key set to `undefined` = absent | `TypeError` `ERR_INVALID_ARG_TYPE`, `ERR_INVALID_ARG_VALUE` (unknown key) |
//!
//! Nothing here knows what the values mean: the kernel validates them (empty manifest,
//! unknown ids, bad resources...) and answers with its own errors.

use crate::throw::{self, INVALID_ARG_TYPE, INVALID_ARG_VALUE, MISSING_ARGS};
use klock_core::{AcquireOptions, Config, DigestIdentity, DigestRecovery, SessionId, StateDigest};
use napi::bindgen_prelude::*;
use napi::{sys, JsValue, ValueType};
use std::ptr;

/// The largest integer a JS number holds exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "a boolean",
        ValueType::Number => "a number",
        ValueType::String => "a string",
        ValueType::Symbol => "a symbol",
        ValueType::Object => "an object",
        ValueType::Function => "a function",
        ValueType::External => "an external",
        ValueType::BigInt => "a bigint",
        _ => "an unknown value",
    }
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
        return throw::type_error(
            env,
            MISSING_ARGS,
            format!("the argument `{what}` is missing: pass {wanted}"),
        );
    }
    let hint = if got == ValueType::BigInt {
        " (pass a Number: values up to 2^53 - 1 are exact)"
    } else {
        ""
    };
    throw::type_error(
        env,
        INVALID_ARG_TYPE,
        format!("`{what}` must be {wanted}, got {}{hint}", type_name(got)),
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
    // In range (NaN fails both comparisons), then integral: the cast truncates.
    if !(x >= 0.0 && x <= MAX_SAFE_INTEGER as f64 && (x as u64) as f64 == x) {
        return Err(throw::range_error(
            env,
            format!(
                "`{what}` must be an integer from 0 to 2^53 - 1 ({MAX_SAFE_INTEGER}), got {}",
                show_number(x)
            ),
        ));
    }
    Ok(x as u64)
}

fn show_number(x: f64) -> String {
    if x.is_nan() {
        String::from("NaN")
    } else if x.is_infinite() {
        String::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        format!("{x}")
    }
}

/// A top-level numeric argument.
pub fn number_arg(env: &Env, value: Unknown<'_>, what: &str) -> Result<u64> {
    number(env, value, Label::Name(what), Place::Argument)
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
                format!("`{what}` is not valid Unicode (it contains a lone UTF-16 surrogate)"),
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

fn is_array(value: &Unknown<'_>) -> Result<bool> {
    let mut result = false;
    let v = value.value();
    let status = unsafe { sys::napi_is_array(v.env, v.value, &mut result) };
    if status != sys::Status::napi_ok {
        return Err(Error::from_reason("napi_is_array failed"));
    }
    Ok(result)
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
        let got = if t == ValueType::Object {
            "an object that is not an Array"
        } else {
            type_name(t)
        };
        if t == ValueType::Undefined && place == Place::Argument {
            return Err(wrong_type(env, place, what, "an Array", t));
        }
        return Err(throw::type_error(
            env,
            INVALID_ARG_TYPE,
            format!("`{what}` must be an Array, got {got}"),
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
    /// holding only keys of `allowed` (a key whose value is `undefined` counts as absent).
    pub fn new(
        env: &Env,
        value: Unknown<'env>,
        what: &str,
        allowed: &[&str],
        optional: bool,
        place: Place,
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
                format!("`{what}` must be a plain object, got {got}"),
            ));
        }
        let object: Object<'env> = unsafe { value.cast()? };
        let fields = Fields {
            object,
            what: what.to_owned(),
        };
        fields.refuse_unknown(env, allowed)?;
        Ok(Some(fields))
    }

    fn refuse_unknown(&self, env: &Env, allowed: &[&str]) -> Result<()> {
        for key in Object::keys(&self.object)? {
            if !allowed.contains(&key.as_str()) {
                return Err(throw::type_error(
                    env,
                    INVALID_ARG_VALUE,
                    format!(
                        "`{}` has an unknown key `{key}` (allowed: {})",
                        self.what,
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
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

/// The config keys, as JS names.
pub const CONFIG_KEYS: &[&str] = &[
    "policy",
    "seed",
    "defaultTtlMs",
    "maxTtlMs",
    "defaultWaitTimeoutMs",
    "backoffBaseMs",
    "backoffCapMs",
    "graceMs",
    "sessionIdleMs",
    "maxLeasesPerSession",
    "maxLeaseLifetimeMs",
];

/// A kernel configuration: missing keys take SPEC.md's defaults. The policy name is checked
/// by the kernel (`INVALID_CONFIG`), after the types here.
pub fn config(env: &Env, value: Unknown<'_>) -> Result<(Config, Option<String>)> {
    let mut c = Config::default();
    let Some(f) = Fields::new(env, value, "config", CONFIG_KEYS, true, Place::Argument)? else {
        return Ok((c, None));
    };
    let policy = f.string(env, "policy")?;
    let slots: [(&str, &mut u64); 10] = [
        ("seed", &mut c.seed),
        ("defaultTtlMs", &mut c.default_ttl_ms),
        ("maxTtlMs", &mut c.max_ttl_ms),
        ("defaultWaitTimeoutMs", &mut c.default_wait_timeout_ms),
        ("backoffBaseMs", &mut c.backoff_base_ms),
        ("backoffCapMs", &mut c.backoff_cap_ms),
        ("graceMs", &mut c.grace_ms),
        ("sessionIdleMs", &mut c.session_idle_ms),
        ("maxLeasesPerSession", &mut c.max_leases_per_session),
        ("maxLeaseLifetimeMs", &mut c.max_lease_lifetime_ms),
    ];
    for (key, slot) in slots {
        if let Some(v) = f.number(env, key)? {
            *slot = v;
        }
    }
    Ok((c, policy))
}

/// Acquire options: `{ ttlMs?, wait?, waitTimeoutMs? }`.
pub fn acquire_options(env: &Env, value: Unknown<'_>) -> Result<AcquireOptions> {
    let mut options = AcquireOptions::default();
    let Some(f) = Fields::new(
        env,
        value,
        "options",
        &["ttlMs", "wait", "waitTimeoutMs"],
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
        &["version", "identity", "recovery"],
        false,
        Place::Argument,
    )?
    .expect("required");
    let version = f.req_number(env, "version")?;
    let Ok(version) = u32::try_from(version) else {
        return Err(throw::range_error(
            env,
            format!(
                "`digest.version` must be at most {}, got {version}",
                u32::MAX
            ),
        ));
    };
    let id = f.req_object(
        env,
        "identity",
        &[
            "agentId",
            "namespace",
            "sessionId",
            "priorityTimestamp",
            "epoch",
        ],
    )?;
    let identity = DigestIdentity {
        agent_id: id.req_string(env, "agentId")?,
        namespace: id.req_string(env, "namespace")?,
        session_id: SessionId(id.req_number(env, "sessionId")?),
        priority_timestamp: id.req_number(env, "priorityTimestamp")?,
        epoch: id.req_number(env, "epoch")?,
    };
    let rec = f.req_object(env, "recovery", &["lastPhase", "pendingIntents"])?;
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
