//! Strict JSON reading.
//!
//! Contract: [`parse`] accepts only well-formed JSON whose objects have no duplicate keys
//! (a duplicated key would silently hide one of its values). [`Fields`] reads one object:
//! it is created with the exact list of keys the object may hold and refuses any other key,
//! and every typed getter refuses a value of the wrong type. Every error names where in the
//! vector it happened, so a typo always fails loudly and never turns into a check of nothing.

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `text` as JSON, refusing duplicate object keys.
pub fn parse(text: &str) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictValue::deserialize(&mut de).map_err(|e| format!("invalid JSON: {e}"))?;
    de.end().map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(value.0)
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let StrictValue(value) = access.next_value()?;
            if map.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate key `{key}`")));
            }
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

/// A short rendering of a JSON value for error messages.
pub fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 80 {
        format!(
            "{}...",
            &text[..text.char_indices().nth(77).map_or(text.len(), |(i, _)| i)]
        )
    } else {
        text
    }
}

/// One JSON object whose keys were checked against an allowed list.
#[derive(Debug)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    ctx: String,
}

impl<'a> Fields<'a> {
    /// `value` must be an object holding only keys of `allowed`; `ctx` names it in errors.
    pub fn new(
        value: &'a Value,
        ctx: impl Into<String>,
        allowed: &[&str],
    ) -> Result<Fields<'a>, String> {
        let ctx = ctx.into();
        let Value::Object(map) = value else {
            return Err(format!("{ctx} must be an object, got {}", show(value)));
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let list = if allowed.is_empty() {
                    String::from("none")
                } else {
                    allowed.join(", ")
                };
                return Err(format!("{ctx}: unknown key `{key}` (allowed here: {list})"));
            }
        }
        Ok(Fields { map, ctx })
    }

    /// Where this object is, for error messages.
    pub fn ctx(&self) -> &str {
        &self.ctx
    }

    /// Whether `key` is present.
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// The keys present, in the map's order.
    pub fn keys(&self) -> impl Iterator<Item = &'a String> {
        self.map.keys()
    }

    fn wrong(&self, key: &str, wanted: &str, got: &Value) -> String {
        format!("{}: `{key}` must be {wanted}, got {}", self.ctx, show(got))
    }

    /// A required key.
    pub fn required(&self, key: &str) -> Result<&'a Value, String> {
        self.map
            .get(key)
            .ok_or_else(|| format!("{}: missing required key `{key}`", self.ctx))
    }

    /// An optional non-negative integer.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    /// A required non-negative integer.
    pub fn req_u64(&self, key: &str) -> Result<u64, String> {
        self.required(key)?;
        Ok(self.u64(key)?.expect("present"))
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Result<Option<String>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    /// A required string.
    pub fn req_str(&self, key: &str) -> Result<String, String> {
        self.required(key)?;
        Ok(self.str(key)?.expect("present"))
    }

    /// An optional boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "true or false", v)),
        }
    }

    /// An optional list of strings.
    pub fn str_list(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => str_list(v)
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a list of strings", v)),
        }
    }

    /// An optional `[lo, hi]` inclusive range with `lo <= hi`.
    pub fn range(&self, key: &str) -> Result<Option<(u64, u64)>, String> {
        let Some(v) = self.map.get(key) else {
            return Ok(None);
        };
        match v.as_array().map(Vec::as_slice) {
            Some([lo, hi]) => match (lo.as_u64(), hi.as_u64()) {
                (Some(lo), Some(hi)) if lo <= hi => Ok(Some((lo, hi))),
                _ => Err(self.wrong(key, "[lo, hi] with integers lo <= hi", v)),
            },
            _ => Err(self.wrong(key, "[lo, hi] with integers lo <= hi", v)),
        }
    }

    /// An optional value that is a non-negative integer or `null`.
    pub fn u64_or_null(&self, key: &str) -> Result<Option<Option<u64>>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(v) => v
                .as_u64()
                .map(|n| Some(Some(n)))
                .ok_or_else(|| self.wrong(key, "a non-negative integer or null", v)),
        }
    }

    /// An optional list (of anything; the caller checks the items).
    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(v) => Err(self.wrong(key, "a list", v)),
        }
    }

    /// An optional object (of anything; the caller checks the entries).
    pub fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }
}

/// `value` as a list of strings, if it is one.
pub fn str_list(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|item| item.as_str().map(String::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused() {
        assert!(parse(r#"{"a": 1, "b": {"c": 1, "c": 2}}"#)
            .unwrap_err()
            .contains("duplicate key `c`"));
        assert!(parse(r#"{"a": 1, "b": [1, 2.5, null, true, "x"]}"#).is_ok());
        assert!(parse(r#"{"a": 1} x"#).is_err());
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused() {
        let v = parse(r#"{"now": -1, "do": "x", "extra": 1}"#).unwrap();
        assert!(Fields::new(&v, "step", &["now", "do"])
            .unwrap_err()
            .contains("unknown key `extra`"));
        let f = Fields::new(&v, "step", &["now", "do", "extra"]).unwrap();
        assert!(f.u64("now").is_err());
        assert!(f.str("extra").is_err());
        assert_eq!(f.str("do").unwrap().as_deref(), Some("x"));
        let v = parse(r#"{"r": [3, 2], "n": 1.0}"#).unwrap();
        let f = Fields::new(&v, "x", &["r", "n"]).unwrap();
        assert!(f.range("r").is_err());
        assert!(f.u64("n").is_err());
    }
}
