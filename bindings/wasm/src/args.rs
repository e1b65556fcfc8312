//! Argument conversion: JavaScript values to the kernel's Rust types.
//!
//! Contract: a conversion either yields exactly the value the caller meant or throws, before
//! the kernel is touched, so bad input never changes state:
//! - numbers (times, ids, TTLs) must be of type `number` (never BigInt, string, boolean or
//!   `null`): `TypeError`; they must be integers in `0 ..= 2^53 − 1` (`NaN`, `Infinity`,
//!   fractions, negatives and larger values are a `RangeError`), so every value is exact;
//! - strings must be of type `string` and valid UTF-16 (a lone surrogate is a `TypeError`,
//!   it has no UTF-8 form);
//! - lists must be real arrays (`Array.isArray`), never a bare string;
//! - option objects must be plain objects holding only the documented keys (a typo is a
//!   `TypeError`, never a silently ignored setting); `undefined` or `null` for an optional
//!   value means "the default".
//!
//! Messages name the argument and say what was expected.

use crate::errors::{range_error, type_error};
use js_sys::{Array, JsString, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// The largest integer a JS number holds exactly: 2^53 − 1 (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A short description of a value's type for messages: `string`, `bigint`, `null`, `array`...
fn kind(value: &JsValue) -> String {
    if value.is_null() {
        String::from("null")
    } else if Array::is_array(value) {
        String::from("an array")
    } else {
        value
            .js_typeof()
            .as_string()
            .unwrap_or_else(|| String::from("?"))
    }
}

/// Checks that a JS number is an integer in `0 ..= 2^53 − 1` and converts it.
pub fn number_to_u64(number: f64, what: &str) -> Result<u64, JsValue> {
    if number.is_finite() && number.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(&number) {
        // Exact: an integer-valued f64 in this range converts without loss.
        Ok(number as u64)
    } else {
        Err(range_error(&format!(
            "{what} must be an integer from 0 to 2^53 - 1 (Number.MAX_SAFE_INTEGER), got {number}"
        )))
    }
}

/// A required non-negative integer.
pub fn u64_arg(value: &JsValue, what: &str) -> Result<u64, JsValue> {
    match value.as_f64() {
        Some(n) => number_to_u64(n, what),
        None => Err(type_error(&format!(
            "{what} must be a number, got {}",
            kind(value)
        ))),
    }
}

/// An optional non-negative integer (`undefined` / `null` = not given).
pub fn opt_u64_arg(value: &JsValue, what: &str) -> Result<Option<u64>, JsValue> {
    if value.is_undefined() || value.is_null() {
        Ok(None)
    } else {
        u64_arg(value, what).map(Some)
    }
}

/// A string argument.
pub fn str_arg(value: &JsValue, what: &str) -> Result<String, JsValue> {
    let Some(text) = value.as_string() else {
        return Err(type_error(&format!(
            "{what} must be a string, got {}",
            kind(value)
        )));
    };
    // The copy into wasm memory turns a lone surrogate into U+FFFD. Only then is the slow
    // exact check (one call per UTF-16 unit) needed, to tell it from a real U+FFFD.
    if text.contains('\u{FFFD}') && !value.unchecked_ref::<JsString>().is_valid_utf16() {
        return Err(type_error(&format!(
            "{what} must be valid Unicode text (it contains a lone surrogate)"
        )));
    }
    Ok(text)
}

/// A boolean argument.
pub fn bool_arg(value: &JsValue, what: &str) -> Result<bool, JsValue> {
    value.as_bool().ok_or_else(|| {
        type_error(&format!(
            "{what} must be true or false, got {}",
            kind(value)
        ))
    })
}

/// A real array argument.
fn array_arg(value: &JsValue, what: &str, of: &str) -> Result<Array, JsValue> {
    if Array::is_array(value) {
        Ok(value.clone().unchecked_into())
    } else {
        Err(type_error(&format!(
            "{what} must be an array of {of}, got {}",
            kind(value)
        )))
    }
}

/// An array of strings.
pub fn str_list(value: &JsValue, what: &str) -> Result<Vec<String>, JsValue> {
    let array = array_arg(value, what, "strings")?;
    (0..array.length())
        .map(|i| str_arg(&array.get(i), &format!("{what}[{i}]")))
        .collect()
}

/// An array of non-negative integers.
pub fn u64_list(value: &JsValue, what: &str) -> Result<Vec<u64>, JsValue> {
    let array = array_arg(value, what, "numbers")?;
    (0..array.length())
        .map(|i| u64_arg(&array.get(i), &format!("{what}[{i}]")))
        .collect()
}

/// A plain object holding only `allowed` keys (`undefined` / `null` = an empty one).
pub struct Fields {
    object: Option<Object>,
    what: String,
}

impl Fields {
    /// Checks the shape: an object (not an array, not a function) with only `allowed` keys.
    ///
    /// `unknown` builds the error for a key that is not allowed (callers choose the class).
    pub fn new(
        value: &JsValue,
        what: &str,
        allowed: &[&str],
        unknown: impl Fn(&str) -> JsValue,
    ) -> Result<Fields, JsValue> {
        let what = what.to_owned();
        if value.is_undefined() || value.is_null() {
            return Ok(Fields { object: None, what });
        }
        if !value.is_object() || Array::is_array(value) {
            return Err(type_error(&format!(
                "{what} must be an object, got {}",
                kind(value)
            )));
        }
        let object: Object = value.clone().unchecked_into();
        for key in Object::keys(&object).iter() {
            let key = key.as_string().unwrap_or_default();
            if !allowed.contains(&key.as_str()) {
                return Err(unknown(&key));
            }
        }
        Ok(Fields {
            object: Some(object),
            what,
        })
    }

    /// The value of `key` (`undefined` when absent).
    pub fn get(&self, key: &str) -> JsValue {
        match &self.object {
            None => JsValue::UNDEFINED,
            Some(o) => Reflect::get(o, &JsString::from(key)).unwrap_or(JsValue::UNDEFINED),
        }
    }

    /// Where a key sits, for messages: `options.ttl_ms`.
    pub fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.what)
    }

    /// A required key's value.
    pub fn required(&self, key: &str) -> Result<JsValue, JsValue> {
        let value = self.get(key);
        if value.is_undefined() {
            return Err(type_error(&format!(
                "{} is missing the key {key:?}",
                self.what
            )));
        }
        Ok(value)
    }
}

/// The standard message for an unknown key.
pub fn unknown_key(what: &str, key: &str, allowed: &[&str]) -> String {
    format!(
        "{what} has an unknown key {key:?} (allowed: {})",
        allowed.join(", ")
    )
}
