//! The resolved scripts replay exactly on the kernel, and every mutant of them does not.
//!
//! This is the reference replayer (what each host's replayer does through its binding, here
//! through serde and [`Kernel::apply`]) and the proof that the mutants are real differences:
//! a mutant that replayed cleanly on the kernel itself would prove nothing about a host.

use klock_conformance::{mutants, script};
use klock_core::{Command, Config, Kernel};
use serde_json::{json, Value};
use std::path::Path;

/// Replays one script; `Err` names the first step and part that differ.
fn replay(script: &Value) -> Result<(), String> {
    let config: Config =
        serde_json::from_value(script["config"].clone()).map_err(|e| format!("config: {e}"))?;
    let mut kernel = Kernel::new(config).map_err(|e| e.to_string())?;
    let steps = script["steps"].as_array().ok_or("no steps")?;
    for (i, step) in steps.iter().enumerate() {
        let call: Command = serde_json::from_value(step["call"].clone())
            .map_err(|e| format!("step {}: call: {e}", i + 1))?;
        let now = step["now"].as_u64().ok_or("now")?;
        let result = match kernel.apply(&call, now) {
            Ok(output) => json!({ "ok": output }),
            Err(e) => json!({ "error": {
                "code": e.code.code(), "name": e.code.name(), "message": e.message
            }}),
        };
        let events: Vec<_> = std::iter::from_fn(|| kernel.poll_event()).collect();
        let at = step["snapshot_at"].as_u64().ok_or("snapshot_at")?;
        let got = [
            ("result", result),
            ("events", json!(events)),
            ("snapshot", json!(kernel.snapshot(at))),
        ];
        for (part, value) in got {
            if value != step[part] {
                return Err(format!("step {}: {part} differs", i + 1));
            }
        }
    }
    Ok(())
}

fn scripts() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let value = klock_conformance::json::parse(&text).unwrap();
            let vector = klock_conformance::vector::parse(&value).unwrap();
            script::resolve(&path.display().to_string(), &vector).unwrap()
        })
        .collect()
}

#[test]
fn every_script_replays_exactly_and_every_mutant_fails() {
    let scripts = scripts();
    assert!(scripts.len() >= 100, "only {} scripts", scripts.len());
    for s in &scripts {
        replay(s).unwrap_or_else(|e| panic!("{}: {e}", s["vector"]));
    }
    let all = mutants::mutants(&scripts);
    assert!(all.len() > 200, "only {} mutants", all.len());
    let survivors: Vec<_> = all
        .iter()
        .filter(|m| replay(&m.script).is_ok())
        .map(|m| m.script["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        survivors.is_empty(),
        "mutants that replay cleanly: {survivors:#?}"
    );
}

#[test]
fn mutants_cover_every_part_and_kind_of_change() {
    let all = mutants::mutants(&scripts());
    let names: Vec<String> = all
        .iter()
        .map(|m| m.script["name"].as_str().unwrap().to_owned())
        .collect();
    for needle in [
        ": result.error.message changed",
        ": result.ok.verdict.leases[].fence changed",
        ": events[WOUNDED].retry_after_ms changed",
        ": snapshot.stats.counters.died changed",
        ": events[] one item fewer",
        ": snapshot one key more",
        ": snapshot one key fewer",
    ] {
        assert!(
            names.iter().any(|n| n.contains(needle)),
            "no mutant {needle:?}"
        );
    }
}
