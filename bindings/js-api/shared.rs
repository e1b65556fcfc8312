//! What the two JavaScript bindings share: the names and the argument errors of the one
//! JavaScript API (bindings/js-api/kernel.d.ts). `bindings/node` and `bindings/wasm` both
//! include this file as a module (`#[path = "../../js-api/shared.rs"]`), so the Node addon and
//! the wasm package spell every key and word every argument error the same way.
//!
//! Contract: names come from the core's lists, converted by [`camel`] (the only snake_case →
//! camelCase function of the bindings); messages name the argument and say what was expected.
//! Nothing here touches a JS value: each binding reads values its own way and calls these.

use core::fmt::Display;
use klock_core::{Config, Error, ErrorCode, Policy};

/// The largest integer a JS number holds exactly: 2^53 − 1 (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Node's code for a value of the wrong type.
pub const INVALID_ARG_TYPE: &str = "ERR_INVALID_ARG_TYPE";
/// Node's code for a required argument that is `undefined`.
pub const MISSING_ARGS: &str = "ERR_MISSING_ARGS";
/// Node's code for a value of the right type that cannot be accepted.
pub const INVALID_ARG_VALUE: &str = "ERR_INVALID_ARG_VALUE";
/// Node's code for a number outside the accepted range.
pub const OUT_OF_RANGE: &str = "ERR_OUT_OF_RANGE";

/// A core name in the JS API's spelling: `default_ttl_ms` → `defaultTtlMs`. Only an
/// underscore before a lower-case letter joins, so upper-case names (`NOT_OWNER`) stay as
/// they are.
pub fn camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut chars = snake.chars().peekable();
    while let Some(c) = chars.next() {
        match chars.peek() {
            Some(next) if c == '_' && next.is_ascii_lowercase() => {
                out.push(next.to_ascii_uppercase());
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// The keys of a config object: `policy`, then every numeric field of the core, camelCase.
pub fn config_keys() -> Vec<String> {
    Config::field_names().map(camel).collect()
}

/// Builds a config from an object whose keys were checked against [`config_keys`]:
/// `policy` reads the policy key and `number` a numeric key (each `None` when absent, each
/// throwing its binding's argument errors); the core sets the fields it names, and a bad
/// policy is the core's `INVALID_CONFIG` (`kernel_error` converts it), after the types.
pub fn config<E>(
    policy: impl FnOnce() -> Result<Option<String>, E>,
    mut number: impl FnMut(&str) -> Result<Option<u64>, E>,
    kernel_error: impl Fn(Error) -> E,
) -> Result<Config, E> {
    let mut config = Config::default();
    let policy = policy()?;
    for field in Config::NUMERIC_FIELDS {
        if let Some(value) = number(&camel(field))? {
            config.set_number(field, value).map_err(&kernel_error)?;
        }
    }
    if let Some(name) = policy {
        config.policy = Policy::parse(&name).map_err(&kernel_error)?;
    }
    Ok(config)
}

/// `INVALID_CONFIG` for a config key that is not one of [`config_keys`].
pub fn unknown_config_key(key: &str) -> Error {
    Error::new(
        ErrorCode::InvalidConfig,
        format!(
            "unknown config field {key:?}: the fields are {}",
            config_keys().join(", ")
        ),
    )
}

/// How a message names a value's type, from its JS `typeof` (`null` for null).
pub fn describe(type_of: &str) -> &'static str {
    match type_of {
        "undefined" => "undefined",
        "null" => "null",
        "boolean" => "a boolean",
        "number" => "a number",
        "string" => "a string",
        "symbol" => "a symbol",
        "object" => "an object",
        "function" => "a function",
        "bigint" => "a bigint",
        _ => "an unknown value",
    }
}

/// `ERR_MISSING_ARGS`: a top-level argument was not passed.
pub fn missing(what: impl Display, wanted: &str) -> String {
    format!("the argument `{what}` is missing: pass {wanted}")
}

/// `ERR_INVALID_ARG_TYPE`: `got` is a [`describe`] text (a bigint gets a hint).
pub fn wrong_type(what: impl Display, wanted: &str, got: &str) -> String {
    let hint = if got == "a bigint" {
        " (pass a Number: values up to 2^53 - 1 are exact)"
    } else {
        ""
    };
    format!("`{what}` must be {wanted}, got {got}{hint}")
}

/// `ERR_OUT_OF_RANGE`: a number that is not an integer in `0 ..= 2^53 − 1`.
pub fn out_of_range(what: impl Display, x: f64) -> String {
    let shown = if x.is_nan() {
        String::from("NaN")
    } else if x.is_infinite() {
        String::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        format!("{x}")
    };
    format!("`{what}` must be an integer from 0 to 2^53 - 1 ({MAX_SAFE_INTEGER}), got {shown}")
}

/// Whether a JS number is an integer in `0 ..= 2^53 − 1` (NaN fails both comparisons).
pub fn is_safe_integer(x: f64) -> bool {
    x >= 0.0 && x <= MAX_SAFE_INTEGER as f64 && (x as u64) as f64 == x
}

/// `ERR_INVALID_ARG_TYPE`: a list that is not an Array.
pub fn not_array(what: impl Display, got: &str) -> String {
    let got = if got == "an object" {
        "an object that is not an Array"
    } else {
        got
    };
    format!("`{what}` must be an Array, got {got}")
}

/// `ERR_INVALID_ARG_TYPE`: an options object that is not a plain object.
pub fn not_object(what: impl Display, got: &str) -> String {
    format!("`{what}` must be a plain object, got {got}")
}

/// `ERR_INVALID_ARG_VALUE`: an options object with a key it does not take.
pub fn unknown_key<S: AsRef<str>>(what: impl Display, key: &str, allowed: &[S]) -> String {
    let allowed: Vec<&str> = allowed.iter().map(AsRef::as_ref).collect();
    format!(
        "`{what}` has an unknown key `{key}` (allowed: {})",
        allowed.join(", ")
    )
}

/// `ERR_INVALID_ARG_VALUE`: a string with a lone UTF-16 surrogate (it has no UTF-8 form).
pub fn lone_surrogate(what: impl Display) -> String {
    format!("`{what}` is not valid Unicode (it contains a lone UTF-16 surrogate)")
}

/// `ERR_INVALID_ARG_VALUE`: `heartbeat`'s lease list given as a string other than `'all'`.
pub fn not_all(text: &str) -> String {
    format!("`leases` must be an Array of lease ids or the string 'all', got {text:?}")
}

/// `ERR_OUT_OF_RANGE`: a digest version beyond `u32`.
pub fn version_too_large(version: u64) -> String {
    format!(
        "`digest.version` must be at most {}, got {version}",
        u32::MAX
    )
}

/// The keys of a digest object and of its `identity` and `recovery` objects, camelCase.
pub const DIGEST_KEYS: [&str; 3] = ["version", "identity", "recovery"];
/// The keys of `digest.identity`.
pub const IDENTITY_KEYS: [&str; 5] = [
    "agentId",
    "namespace",
    "sessionId",
    "priorityTimestamp",
    "epoch",
];
/// The keys of `digest.recovery`.
pub const RECOVERY_KEYS: [&str; 2] = ["lastPhase", "pendingIntents"];
/// The keys of `acquire`'s options.
pub const OPTION_KEYS: [&str; 3] = ["ttlMs", "wait", "waitTimeoutMs"];
