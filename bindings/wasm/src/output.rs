//! Output conversion: the kernel's owned answers to plain JavaScript values.
//!
//! Contract: every answer becomes plain objects, arrays, strings, numbers, booleans and `null`
//! with the field names of the core's `serde` shape (snake_case, e.g. `lease_id`,
//! `expires_at`; enums as their stable upper-case names; tagged by `verdict`, `event` or
//! `status`). Values are written with `serde_json` and read back with the engine's own
//! `JSON.parse`, one boundary crossing per answer. Integers up to 2^53 − 1 are exact (every id,
//! fence and time the kernel produces from inputs that were themselves ≤ 2^53 − 1, except a
//! time within one TTL of that limit, which is rounded to the nearest double and never throws).

use serde::Serialize;
use wasm_bindgen::JsValue;

/// Any serialisable answer as a plain JS value.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> JsValue {
    // The core's output types have string keys only and no custom serialisers, so writing
    // them cannot fail, and the engine parses what serde_json writes.
    let text = serde_json::to_string(value).expect("kernel outputs always serialise");
    js_sys::JSON::parse(&text).expect("serde_json writes valid JSON")
}
