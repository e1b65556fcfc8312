//! Output conversion: the kernel's owned answers to plain JavaScript values, in the shapes of
//! the one JS API (bindings/js-api/kernel.d.ts).
//!
//! Contract: every answer is the core's own `serde` shape (so it can never drift from the
//! core) with every object key in camelCase (`lease_id` → `leaseId`, by the shared
//! [`camel`]), as plain objects, arrays, strings, numbers, booleans and `null`. Values are
//! written with `serde_json` (the keys renamed while they are written, no intermediate tree)
//! and read back with the engine's own `JSON.parse`: one boundary crossing per answer.
//! Integers up to 2^53 − 1 are exact (every id, fence and time the kernel produces from inputs
//! that were themselves ≤ 2^53 − 1, except a time within one TTL of that limit, which is
//! rounded to the nearest double and never throws).

use crate::shared::camel;
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};
use std::io::{self, Write};
use wasm_bindgen::JsValue;

/// serde_json's compact output with object keys in camelCase. A key is written between
/// `begin_object_key` and `end_object_key`; the core's keys are plain ASCII names, which
/// serde_json writes as one fragment (only escapes split a string).
#[derive(Default)]
struct CamelKeys {
    in_key: bool,
}

impl Formatter for CamelKeys {
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.in_key = true;
        CompactFormatter.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.in_key = false;
        CompactFormatter.end_object_key(writer)
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.in_key {
            writer.write_all(camel(fragment).as_bytes())
        } else {
            writer.write_all(fragment.as_bytes())
        }
    }
}

/// Any serialisable answer as a plain JS value with camelCase keys.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> JsValue {
    let mut text = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut text, CamelKeys::default());
    // The core's output types have string keys only and no custom serialisers that can fail,
    // so writing them cannot fail, and the engine parses what serde_json writes.
    value
        .serialize(&mut serializer)
        .expect("kernel outputs always serialise");
    let text = String::from_utf8(text).expect("serde_json writes UTF-8");
    js_sys::JSON::parse(&text).expect("serde_json writes valid JSON")
}
