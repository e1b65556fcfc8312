//! `ResourceName::parse` and `parse_intent` on arbitrary text: never panic, only
//! `INVALID_RESOURCE` / `INVALID_PREDICATE` errors, and normalisation is idempotent
//! (`parse(parse(x)) == parse(x)`) with a canonical shape whose parents are canonical too.
//!
//! `cargo +nightly fuzz run resource_parser -- -max_total_time=120` (from core/).

#![no_main]

use klock_core::{parse_intent, ErrorCode, ResourceName, MAX_RESOURCE_BYTES};
use libfuzzer_sys::fuzz_target;

fn check_canonical(name: &ResourceName, input: &str) {
    let canonical = name.as_str();
    let again = ResourceName::parse(canonical).expect("a canonical name parses");
    assert_eq!(
        &again, name,
        "normalisation is not idempotent for {input:?}"
    );
    assert!(
        canonical.len() <= input.len() && canonical.len() <= MAX_RESOURCE_BYTES,
        "normalising {input:?} grew it"
    );
    let (kind, path) = canonical.split_once(':').expect("TYPE:path");
    assert!(!kind.is_empty() && path.starts_with('/'), "{canonical:?}");
    assert!(!path.contains("//"), "{canonical:?}");
    assert!(
        !path.split('/').any(|s| s == "." || s == ".."),
        "{canonical:?}"
    );
    assert!(path == "/" || !path.ends_with('/'), "{canonical:?}");
    assert_eq!(name.is_root(), path == "/");
    // The parent chain is canonical, strictly shorter each step, and ends at the root.
    let mut current = name.clone();
    while let Some(parent) = current.parent_str() {
        let p = ResourceName::parse(parent).expect("a parent parses");
        assert_eq!(
            p.as_str(),
            parent,
            "parent of {:?} is not canonical",
            current.as_str()
        );
        assert!(parent.len() < current.as_str().len());
        current = p;
    }
    assert!(current.is_root());
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match ResourceName::parse(&text) {
        Ok(name) => check_canonical(&name, &text),
        Err(e) => assert_eq!(e.code, ErrorCode::InvalidResource, "{text:?}: {e}"),
    }
    match parse_intent(&text) {
        Ok((predicate, resource)) => {
            let canonical = format!("{} {}", predicate.name(), resource.as_str());
            let again = parse_intent(&canonical).expect("a canonical intent parses");
            assert_eq!(
                again,
                (predicate, resource),
                "intent normalisation is not idempotent for {text:?}"
            );
        }
        Err(e) => assert!(
            matches!(
                e.code,
                ErrorCode::InvalidPredicate | ErrorCode::InvalidResource
            ),
            "{text:?}: {e}"
        ),
    }
});
