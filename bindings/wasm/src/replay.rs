//! `Replayer` (wasm only, not part of the one JS API): a server's history export replayed by
//! this kernel, for the dashboard's replay mode.
//!
//! Contract: translation only, like the rest of this crate. The export is the JSON of
//! `GET /v1/ns/{ns}/history` (server/README.md): `start.state`, the kernel's exported state
//! (imported with `Kernel::import_state`, which checks it), and `steps`, each `{index, now,
//! commands}`: the kernel calls one log entry made. A step is made again by
//! `Kernel::replay_step` (settle at `now`, make each call; an error is an answer), the rule
//! the server's history replays by too (server/src/history.rs). So after step `i` the kernel
//! is in the state the server's was after that entry, and `stateHash()` equals the server's
//! `GET /v1/state/hash?index=`. The export text is parsed
//! here, in Rust, so the state's 64-bit numbers (the jitter generator's state) stay exact.
//! Answers come out in the core's serde shapes, snake_case, as the server's JSON has them.

use crate::args::number_arg;
use klock_core::{Command, Kernel, KernelState, Replayed};
use serde::Deserialize;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

#[derive(Deserialize)]
struct Export {
    start: Start,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Start {
    state: KernelState,
}

#[derive(Deserialize)]
struct Step {
    index: u64,
    now: u64,
    commands: Vec<Command>,
}

fn bad_export(message: String) -> JsValue {
    js_sys::Error::new(&format!("not a klock history export: {message}")).into()
}

/// The kernel at a position of the export, and the export's steps (shared by clones).
#[wasm_bindgen(js_name = Replayer, skip_typescript)]
pub struct Replayer {
    kernel: RefCell<Kernel>,
    /// Steps applied so far.
    position: RefCell<usize>,
    steps: Rc<Vec<Step>>,
}

fn apply(kernel: &mut Kernel, step: &Step, record: Option<&mut Vec<Value>>) {
    let Some(out) = record else {
        kernel.replay_step(step.now, &step.commands, |_| {});
        return;
    };
    let (mut settled, mut calls) = (Vec::new(), Vec::new());
    kernel.replay_step(step.now, &step.commands, |part| match part {
        Replayed::Settled(event) => settled.push(event),
        Replayed::Answer(command, answer) => {
            let answer = match answer {
                Ok(output) => json!({"ok": output}),
                Err(e) => {
                    json!({"error": {"code": e.code.code(), "name": e.code.name(), "message": e.message}})
                }
            };
            calls.push((command, answer, Vec::new()));
        }
        Replayed::Emitted(event) => {
            if let Some((_, _, events)) = calls.last_mut() {
                events.push(event);
            }
        }
    });
    let calls: Vec<_> = (calls.into_iter())
        .map(|(command, answer, events)| json!({"command": command, "answer": answer, "events": events}))
        .collect();
    out.push(json!({"index": step.index, "now": step.now, "settled": settled, "calls": calls}));
}

#[wasm_bindgen(js_class = Replayer)]
impl Replayer {
    /// The kernel at the start of an export (its JSON text), before its first step.
    #[wasm_bindgen(constructor)]
    pub fn new(export: &str) -> Result<Replayer, JsValue> {
        let export: Export = serde_json::from_str(export).map_err(|e| bad_export(e.to_string()))?;
        let kernel = Kernel::import_state(&export.start.state)
            .map_err(|e| bad_export(format!("start.state: {}", e.message)))?;
        Ok(Replayer {
            kernel: RefCell::new(kernel),
            position: RefCell::new(0),
            steps: Rc::new(export.steps),
        })
    }

    /// How many steps the export holds.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.steps.len()
    }

    /// How many steps have been applied.
    #[wasm_bindgen(getter)]
    pub fn position(&self) -> usize {
        *self.position.borrow()
    }

    /// Each step's log index (`Float64Array`).
    pub fn indexes(&self) -> Vec<f64> {
        self.steps.iter().map(|s| s.index as f64).collect()
    }

    /// Each step's time in ms (`Float64Array`).
    pub fn times(&self) -> Vec<f64> {
        self.steps.iter().map(|s| s.now as f64).collect()
    }

    /// Applies the steps up to (not including) `to` (at most the length; a position already
    /// past it is an error: clone an earlier replayer to go back). With `record`, returns the
    /// JSON text of what each applied step did: `[{index, now, settled: [event], calls:
    /// [{command, answer: {ok} | {error}, events}]}]`; otherwise `"[]"`.
    pub fn run(&self, to: JsValue, record: bool) -> Result<String, JsValue> {
        let to = (number_arg(&to, "to")? as usize).min(self.steps.len());
        let mut position = self.position.borrow_mut();
        if to < *position {
            return Err(js_sys::RangeError::new(&format!(
                "this replayer is at step {}, past {to}: replay from an earlier clone",
                *position
            ))
            .into());
        }
        let mut kernel = self.kernel.borrow_mut();
        let mut out = record.then(Vec::new);
        for step in &self.steps[*position..to] {
            apply(&mut kernel, step, out.as_mut());
        }
        *position = to;
        Ok(out.map_or_else(|| String::from("[]"), |o| Value::Array(o).to_string()))
    }

    /// The state hash (`KernelState::hash`) as 16 hex digits, as the server reports it.
    #[wasm_bindgen(js_name = stateHash)]
    pub fn state_hash(&self) -> String {
        format!("{:016x}", self.kernel.borrow().export_state().hash())
    }

    /// The kernel's time: the last step's `now`.
    pub fn now(&self) -> f64 {
        self.kernel.borrow().now() as f64
    }

    /// The JSON text of the kernel's snapshot (docs/SPEC.md §10) at its own time, snake_case
    /// as the server's overview has it. At the kernel's own time nothing is left to settle
    /// (every step settled it), so taking it changes no state (the dashboard's tests compare
    /// the state hash after snapshots with the server's).
    pub fn snapshot(&self) -> String {
        let mut kernel = self.kernel.borrow_mut();
        let now = kernel.now();
        serde_json::to_string(&kernel.snapshot(now)).expect("a snapshot serializes")
    }

    /// A replayer at the same position, sharing the steps.
    #[wasm_bindgen(js_name = clone)]
    pub fn fork(&self) -> Replayer {
        Replayer {
            kernel: RefCell::new(self.kernel.borrow().clone()),
            position: RefCell::new(*self.position.borrow()),
            steps: Rc::clone(&self.steps),
        }
    }
}
