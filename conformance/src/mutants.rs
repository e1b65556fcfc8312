//! Mutants of resolved scripts: proof that a host's replayer compares every recorded value.
//!
//! Contract: [`mutants`] takes the resolved scripts of a run and returns, for every distinct
//! place a recorded answer can hold a value (a *field path*: `result`, `events` or `snapshot`
//! of a step, down to the leaf, with list positions collapsed and events told apart by kind),
//! one script in which exactly that value differs from what the kernel answered: a number
//! bumped, a string or boolean changed, a `null` made a number, a list one item shorter, an
//! object with one key too many or one too few. Each mutant keeps its script's steps up to
//! the mutated one only. A replayer that reproduces the kernel exactly must fail every
//! mutant; one that passes a mutant ignores that value (or that kind of difference). The
//! first occurrence of each path is taken, in script order, so the set is deterministic.
//! Calls, times and the config are inputs, not answers, and are never mutated.

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// One mutant: a name saying what was changed where, and the mutated script.
pub struct Mutant {
    pub name: String,
    pub script: Value,
}

/// The parts of a step that are answers.
const ANSWERS: [&str; 3] = ["result", "events", "snapshot"];

/// Every mutant of `scripts` (each a resolved script), one per distinct field path and kind
/// of change.
pub fn mutants(scripts: &[Value]) -> Vec<Mutant> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for script in scripts {
        let Some(steps) = script["steps"].as_array() else {
            continue;
        };
        for (index, step) in steps.iter().enumerate() {
            for part in ANSWERS {
                let mut places = Vec::new();
                collect(&step[part], part.to_owned(), &mut vec![], &mut places);
                for (path, pointer, change) in places {
                    let key = format!("{path} {}", change.label());
                    if !seen.insert(key.clone()) {
                        continue;
                    }
                    let mut mutated = script.clone();
                    let kept = mutated["steps"].as_array_mut().expect("checked above");
                    kept.truncate(index + 1);
                    let target = kept[index][part]
                        .pointer_mut(&pointer)
                        .expect("the pointer was collected from this value");
                    change.apply(target);
                    out.push(Mutant {
                        name: format!("{:04}", out.len() + 1),
                        script: annotate(mutated, &key, index),
                    });
                }
            }
        }
    }
    out
}

/// Records in the mutant's `name` what was changed, so a report line says it.
fn annotate(mut script: Value, key: &str, index: usize) -> Value {
    let name = script["name"].as_str().unwrap_or_default().to_owned();
    script["name"] = Value::String(format!("MUTANT step {}: {key} (of: {name})", index + 1));
    script
}

/// How one value is changed.
#[derive(Clone, Copy)]
enum Change {
    /// Leaf: a number +1 (or −1 at the top), a string extended, a boolean flipped, null → 0.
    Leaf,
    /// A non-empty list loses its last item.
    Shorter,
    /// An object gains a key.
    ExtraKey,
    /// A non-empty object loses its first key.
    MissingKey,
}

impl Change {
    fn label(self) -> &'static str {
        match self {
            Change::Leaf => "changed",
            Change::Shorter => "one item fewer",
            Change::ExtraKey => "one key more",
            Change::MissingKey => "one key fewer",
        }
    }

    fn apply(self, value: &mut Value) {
        match self {
            Change::Leaf => {
                *value = match value.take() {
                    Value::Null => Value::from(0),
                    Value::Bool(b) => Value::Bool(!b),
                    Value::Number(n) => match n.as_u64() {
                        Some(0) | None => Value::from(1),
                        Some(x) if x >= (1 << 53) - 1 => Value::from(x - 1),
                        Some(x) => Value::from(x + 1),
                    },
                    Value::String(s) => Value::String(s + "~"),
                    other => other,
                }
            }
            Change::Shorter => {
                if let Value::Array(items) = value {
                    items.pop();
                }
            }
            Change::ExtraKey => {
                if let Value::Object(map) = value {
                    map.insert(String::from("mutant"), Value::from(1));
                }
            }
            Change::MissingKey => {
                if let Value::Object(map) = value {
                    if let Some(first) = map.keys().next().cloned() {
                        map.remove(&first);
                    }
                }
            }
        }
    }
}

/// Collects `(field path, JSON pointer, change)` for every place in `value`.
fn collect(
    value: &Value,
    path: String,
    pointer: &mut Vec<String>,
    out: &mut Vec<(String, String, Change)>,
) {
    let here = || {
        pointer
            .iter()
            .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
            .collect::<String>()
    };
    match value {
        Value::Array(items) => {
            if !items.is_empty() {
                out.push((format!("{path}[]"), here(), Change::Shorter));
            }
            for (i, item) in items.iter().enumerate() {
                pointer.push(i.to_string());
                collect(item, format!("{path}[{}]", kind_of(item)), pointer, out);
                pointer.pop();
            }
        }
        Value::Object(map) => {
            out.push((path.clone(), here(), Change::ExtraKey));
            if !map.is_empty() {
                out.push((path.clone(), here(), Change::MissingKey));
            }
            for (key, item) in map {
                pointer.push(key.clone());
                collect(item, format!("{path}.{key}"), pointer, out);
                pointer.pop();
            }
        }
        _ => out.push((path, here(), Change::Leaf)),
    }
}

/// The tag that tells list items apart: an event's kind, an output's or status's name.
fn kind_of(item: &Value) -> String {
    let tag = |map: &Map<String, Value>| {
        ["event", "output", "status", "verdict"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str).map(str::to_owned))
    };
    match item {
        Value::Object(map) => tag(map).unwrap_or_default(),
        _ => String::new(),
    }
}
