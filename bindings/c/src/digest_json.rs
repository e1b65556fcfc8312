//! A digest's JSON text, read strictly (klock_digest_from_json()).
//!
//! Contract: the text must be exactly one JSON object of the KLIS-8 shape that
//! klock_digest_to_json() writes — `version` (an integer `0 ..= 2^32 − 1`), `identity`
//! {`agent_id`, `namespace` (strings), `session_id`, `priority_timestamp`, `epoch` (integers
//! `0 ..= 2^64 − 1`)} and `recovery` {`last_phase` (a string), `pending_intents` (strings)} —
//! with every key present and no other key, as the Python and JavaScript hosts read a digest.
//! Anything else (not JSON, trailing text, nesting beyond serde_json's depth limit, a missing or
//! unknown key, a wrong type, a negative, fractional, float-written or too large number, a lone
//! surrogate) is `KLOCK_INVALID_ARGUMENT` with a message naming the field. A duplicated key
//! counts once, the last one winning, as in JSON.parse and Python's json.
//!
//! A C string cannot hold NUL (U+0000): an `agent_id` or `namespace` holding one can never be a
//! kernel id (ids are printable, SPEC.md §5), so it is `KLOCK_INVALID_DIGEST`, the error every
//! other host gives when such a digest is resumed; a NUL in `last_phase` or a pending intent
//! (free text the kernel does not check) is `KLOCK_INVALID_ARGUMENT`: no digest the kernel
//! writes holds one, so the text is not a stored digest. Nothing is ever cut short silently.
//! The shared cases are in tests/bad-digests.json.

use crate::status::{klock_status, Failure, Outcome};
use klock_core::{DigestIdentity, DigestRecovery, SessionId, StateDigest};
use serde_json::{Map, Value};

fn invalid(message: String) -> Failure {
    Failure::new(klock_status::KLOCK_INVALID_ARGUMENT, message)
}

/// A short rendering of a JSON value for messages.
fn show(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(37).collect::<String>())
    } else {
        text
    }
}

/// The object at `path`, holding exactly `keys`.
fn object<'a>(v: &'a Value, path: &str, keys: &[&str]) -> Outcome<&'a Map<String, Value>> {
    let Value::Object(map) = v else {
        return Err(invalid(format!(
            "{path} must be a JSON object, got {}",
            show(v)
        )));
    };
    if let Some(unknown) = map.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(invalid(format!(
            "{path} has an unknown key {unknown:?} (allowed: {})",
            keys.join(", ")
        )));
    }
    if let Some(missing) = keys.iter().find(|k| !map.contains_key(**k)) {
        return Err(invalid(format!("{path} is missing the key {missing:?}")));
    }
    Ok(map)
}

fn field<'a>(map: &'a Map<String, Value>, path: &str, key: &str) -> (&'a Value, String) {
    // `object` checked that every key is present.
    (&map[key], format!("{path}.{key}"))
}

/// An integer `0 ..= 2^64 − 1` written without fraction or exponent.
fn uint(v: &Value, path: &str) -> Outcome<u64> {
    // serde_json keeps integer literals as u64 / i64 and everything else (a fraction, an
    // exponent, -0, an integer beyond 64 bits) as f64, so as_u64 accepts exactly the first kind.
    v.as_u64().ok_or_else(|| {
        invalid(format!(
            "{path} must be an integer from 0 to 2^64 - 1 written without a fraction or exponent, got {}",
            show(v)
        ))
    })
}

/// A string; a NUL inside gives `nul` as the status.
fn string(v: &Value, path: &str, nul: klock_status) -> Outcome<String> {
    let Value::String(s) = v else {
        return Err(invalid(format!("{path} must be a string, got {}", show(v))));
    };
    if let Some(at) = s.find('\0') {
        return Err(Failure::new(
            nul,
            format!(
                "{path} holds NUL (U+0000) at byte {at}: no kernel id holds one, and a C string cannot"
            ),
        ));
    }
    Ok(s.clone())
}

/// Parses a digest's JSON text strictly (see the module documentation).
pub fn parse(text: &str) -> Outcome<StateDigest> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("not a digest's JSON: {e}")))?;
    let top = object(&value, "digest", &["version", "identity", "recovery"])?;
    let (v, path) = field(top, "digest", "version");
    let version = uint(v, &path)?;
    let version = u32::try_from(version)
        .map_err(|_| invalid(format!("{path} must be at most 2^32 - 1, got {version}")))?;

    let (v, path) = field(top, "digest", "identity");
    let keys = [
        "agent_id",
        "namespace",
        "session_id",
        "priority_timestamp",
        "epoch",
    ];
    let i = object(v, &path, &keys)?;
    let id = |key: &str| field(i, &path, key);
    let (v, p) = id("agent_id");
    let agent_id = string(v, &p, klock_status::KLOCK_INVALID_DIGEST)?;
    let (v, p) = id("namespace");
    let namespace = string(v, &p, klock_status::KLOCK_INVALID_DIGEST)?;
    let (v, p) = id("session_id");
    let session_id = SessionId(uint(v, &p)?);
    let (v, p) = id("priority_timestamp");
    let priority_timestamp = uint(v, &p)?;
    let (v, p) = id("epoch");
    let epoch = uint(v, &p)?;

    let (v, path) = field(top, "digest", "recovery");
    let r = object(v, &path, &["last_phase", "pending_intents"])?;
    let (v, p) = field(r, &path, "last_phase");
    let last_phase = string(v, &p, klock_status::KLOCK_INVALID_ARGUMENT)?;
    let (v, p) = field(r, &path, "pending_intents");
    let Value::Array(items) = v else {
        return Err(invalid(format!(
            "{p} must be an array of strings, got {}",
            show(v)
        )));
    };
    let pending_intents = items
        .iter()
        .enumerate()
        .map(|(n, item)| {
            string(
                item,
                &format!("{p}[{n}]"),
                klock_status::KLOCK_INVALID_ARGUMENT,
            )
        })
        .collect::<Outcome<Vec<String>>>()?;

    Ok(StateDigest {
        version,
        identity: DigestIdentity {
            agent_id,
            namespace,
            session_id,
            priority_timestamp,
            epoch,
        },
        recovery: DigestRecovery {
            last_phase,
            pending_intents,
        },
    })
}
