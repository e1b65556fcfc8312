//! Argument conversion: JavaScript values to the kernel's Rust types, by the same rules and
//! with the same messages as the Node addon (bindings/node/src/input.rs; the messages and key
//! names are the shared module's, bindings/js-api/shared.rs).
//!
//! Contract: a conversion either yields exactly the value the caller meant or throws, before
//! the kernel is touched, so bad input never changes state:
//! - numbers (times, ids, TTLs) must be of type `number` (never BigInt, string, boolean or
//!   `null`): `TypeError` `ERR_INVALID_ARG_TYPE` (`ERR_MISSING_ARGS` for an `undefined`
//!   argument); integers in `0 ..= 2^53 − 1` only, anything else is a `RangeError`
//!   `ERR_OUT_OF_RANGE`, so every value is exact;
//! - strings must be of type `string` and valid UTF-16 (a lone surrogate is a `TypeError`
//!   `ERR_INVALID_ARG_VALUE`: it has no UTF-8 form);
//! - lists must be real arrays (`Array.isArray`), never a bare string;
//! - option objects must be plain objects holding only the documented keys (a typo is a
//!   `TypeError` `ERR_INVALID_ARG_VALUE`, never a silently ignored setting); `undefined` or
//!   `null` for an optional object, and `undefined` for one of its keys, mean "the default".
//!
//! Reading a list or an object can run the caller's code (a getter, a Proxy). Every such read
//! goes through an import that catches (`Reflect.get`, `Object.keys`, `Array.isArray`), so a
//! throw comes back as an `Err` and is rethrown as it is: an exception never unwinds through
//! Rust frames, which would leave the kernel's borrow taken forever.

use crate::errors::{range_error, type_error};
use crate::shared::{self, INVALID_ARG_TYPE, INVALID_ARG_VALUE, MISSING_ARGS};
use js_sys::{Array, JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_namespace = Array, js_name = isArray)]
    fn is_array(value: &JsValue) -> Result<bool, JsValue>;

    #[wasm_bindgen(catch, js_namespace = Object, js_name = keys)]
    fn object_keys(value: &JsValue) -> Result<Array, JsValue>;
}

/// Where a value came from: a top-level argument (`undefined` means it was not passed) or a
/// field or element of one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Argument,
    Field,
}

/// How messages name a value's type ([`shared::describe`] of its `typeof`).
fn kind(value: &JsValue) -> &'static str {
    if value.is_null() {
        return "null";
    }
    shared::describe(&value.js_typeof().as_string().unwrap_or_default())
}

/// The error for a value of the wrong type.
fn wrong_type(value: &JsValue, what: &str, wanted: &str, place: Place) -> JsValue {
    if value.is_undefined() && place == Place::Argument {
        type_error(MISSING_ARGS, &shared::missing(what, wanted))
    } else {
        type_error(
            INVALID_ARG_TYPE,
            &shared::wrong_type(what, wanted, kind(value)),
        )
    }
}

/// A time, id or count: an integer from 0 to 2^53 − 1.
pub fn number(value: &JsValue, what: &str, place: Place) -> Result<u64, JsValue> {
    let Some(x) = value.as_f64() else {
        return Err(wrong_type(value, what, "an integer number", place));
    };
    if !shared::is_safe_integer(x) {
        return Err(range_error(&shared::out_of_range(what, x)));
    }
    Ok(x as u64)
}

/// A top-level numeric argument.
pub fn number_arg(value: &JsValue, what: &str) -> Result<u64, JsValue> {
    number(value, what, Place::Argument)
}

/// A string that is valid Unicode (no lone surrogate).
pub fn string(value: &JsValue, what: &str, place: Place) -> Result<String, JsValue> {
    let Some(text) = value.as_string() else {
        return Err(wrong_type(value, what, "a string", place));
    };
    // The copy into wasm memory turns a lone surrogate into U+FFFD. Only then is the slow
    // exact check (one call per UTF-16 unit) needed, to tell it from a real U+FFFD.
    if text.contains('\u{FFFD}') && !value.unchecked_ref::<JsString>().is_valid_utf16() {
        return Err(type_error(INVALID_ARG_VALUE, &shared::lone_surrogate(what)));
    }
    Ok(text)
}

/// A top-level string argument.
pub fn string_arg(value: &JsValue, what: &str) -> Result<String, JsValue> {
    string(value, what, Place::Argument)
}

/// `true` or `false`.
pub fn boolean(value: &JsValue, what: &str, place: Place) -> Result<bool, JsValue> {
    value
        .as_bool()
        .ok_or_else(|| wrong_type(value, what, "true or false", place))
}

/// An `Array`, element by element (`what[i]` names an element).
pub fn list<T>(
    value: &JsValue,
    what: &str,
    place: Place,
    item: impl Fn(&JsValue, &str) -> Result<T, JsValue>,
) -> Result<Vec<T>, JsValue> {
    if !is_array(value)? {
        if value.is_undefined() && place == Place::Argument {
            return Err(wrong_type(value, what, "an Array", place));
        }
        return Err(type_error(
            INVALID_ARG_TYPE,
            &shared::not_array(what, kind(value)),
        ));
    }
    // A length an Array (or a Proxy of one) reports; anything else reads as empty.
    let length = Reflect::get(value, &JsValue::from_str("length"))?
        .as_f64()
        .unwrap_or(0.0) as u32;
    (0..length)
        .map(|i| item(&Reflect::get_u32(value, i)?, &format!("{what}[{i}]")))
        .collect()
}

/// A list of strings (a manifest).
pub fn strings(value: &JsValue, what: &str, place: Place) -> Result<Vec<String>, JsValue> {
    list(value, what, place, |v, at| string(v, at, Place::Field))
}

/// A list of ids.
pub fn numbers(value: &JsValue, what: &str) -> Result<Vec<u64>, JsValue> {
    list(value, what, Place::Argument, |v, at| {
        number(v, at, Place::Field)
    })
}

/// A plain object read key by key, refusing keys it does not know.
pub struct Fields {
    object: JsValue,
    what: String,
}

impl Fields {
    /// `None` for `undefined`/`null` when `optional`; otherwise the value must be a plain
    /// object holding only keys of `allowed`; an unknown key is a `TypeError`
    /// `ERR_INVALID_ARG_VALUE`.
    pub fn new<S: AsRef<str>>(
        value: &JsValue,
        what: &str,
        allowed: &[S],
        optional: bool,
        place: Place,
    ) -> Result<Option<Fields>, JsValue> {
        Fields::refusing(value, what, allowed, optional, place, |key| {
            type_error(INVALID_ARG_VALUE, &shared::unknown_key(what, key, allowed))
        })
    }

    /// Like [`Fields::new`], with `unknown` making the error for an unknown key.
    pub fn refusing<S: AsRef<str>>(
        value: &JsValue,
        what: &str,
        allowed: &[S],
        optional: bool,
        place: Place,
        unknown: impl Fn(&str) -> JsValue,
    ) -> Result<Option<Fields>, JsValue> {
        if optional && (value.is_undefined() || value.is_null()) {
            return Ok(None);
        }
        let array = value.is_object() && is_array(value)?;
        if !value.is_object() || array {
            if value.is_undefined() && place == Place::Argument {
                return Err(wrong_type(value, what, "an object", place));
            }
            let got = if array { "an Array" } else { kind(value) };
            return Err(type_error(INVALID_ARG_TYPE, &shared::not_object(what, got)));
        }
        for key in object_keys(value)?.iter() {
            let key = key.as_string().unwrap_or_default();
            if !allowed.iter().any(|a| a.as_ref() == key) {
                return Err(unknown(&key));
            }
        }
        Ok(Some(Fields {
            object: value.clone(),
            what: what.to_owned(),
        }))
    }

    /// The value of `key` (`undefined` when absent); a throwing getter's exception.
    fn value(&self, key: &str) -> Result<JsValue, JsValue> {
        Reflect::get(&self.object, &JsString::from(key))
    }

    /// `what.key`, for messages.
    fn label(&self, key: &str) -> String {
        format!("{}.{key}", self.what)
    }

    /// The value of `key`, `None` when absent or `undefined`.
    fn get(&self, key: &str) -> Result<Option<JsValue>, JsValue> {
        Ok(Some(self.value(key)?).filter(|v| !v.is_undefined()))
    }

    /// An optional number field.
    pub fn number(&self, key: &str) -> Result<Option<u64>, JsValue> {
        self.get(key)?
            .map(|v| number(&v, &self.label(key), Place::Field))
            .transpose()
    }

    /// A required number field.
    pub fn req_number(&self, key: &str) -> Result<u64, JsValue> {
        number(&self.value(key)?, &self.label(key), Place::Field)
    }

    /// An optional boolean field.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, JsValue> {
        self.get(key)?
            .map(|v| boolean(&v, &self.label(key), Place::Field))
            .transpose()
    }

    /// An optional string field.
    pub fn string(&self, key: &str) -> Result<Option<String>, JsValue> {
        self.get(key)?
            .map(|v| string(&v, &self.label(key), Place::Field))
            .transpose()
    }

    /// A required string field.
    pub fn req_string(&self, key: &str) -> Result<String, JsValue> {
        string(&self.value(key)?, &self.label(key), Place::Field)
    }

    /// A required object field.
    pub fn req_object(&self, key: &str, allowed: &[&str]) -> Result<Fields, JsValue> {
        let fields = Fields::new(
            &self.value(key)?,
            &self.label(key),
            allowed,
            false,
            Place::Field,
        )?;
        Ok(fields.expect("required"))
    }

    /// A required list-of-strings field.
    pub fn req_strings(&self, key: &str) -> Result<Vec<String>, JsValue> {
        strings(&self.value(key)?, &self.label(key), Place::Field)
    }
}
