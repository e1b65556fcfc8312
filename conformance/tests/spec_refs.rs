//! Every citation of the specification names a section that exists in `docs/SPEC.md`.
//!
//! Vectors must cite it in `spec` as `docs/SPEC.md §N[, §M...]`; in the rest of the tree, any
//! line that mentions SPEC and a `§N` or `§N.M` (other than a KLIS document's section) is a
//! citation of it. A renumbered or deleted section fails here, naming the file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The section number at the start of `text` (`6`, `13.2`), if any.
fn section_number(text: &str) -> Option<String> {
    let number: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let number = number.trim_end_matches('.');
    (!number.is_empty()).then(|| number.to_owned())
}

/// The section numbers of docs/SPEC.md: `## N.` and `### N.M` headings.
fn sections() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/SPEC.md")).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let heading = line
            .strip_prefix("### ")
            .or_else(|| line.strip_prefix("## "));
        if let Some(number) = heading.and_then(section_number) {
            out.insert(number);
        }
    }
    out
}

/// The `§N` / `§N.M` citations on one line, leaving out sections of KLIS documents.
fn citations(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in line.match_indices('§') {
        let before = &line[..i];
        if before
            .trim_end()
            .rsplit(' ')
            .next()
            .is_some_and(|w| w.starts_with("KLIS-"))
        {
            continue;
        }
        out.extend(section_number(&line[i + '§'.len_utf8()..]));
    }
    out
}

#[test]
fn every_vector_cites_existing_sections() {
    let known = sections();
    assert!(known.contains("6") && known.contains("13.1"), "{known:?}");
    let dir = root().join("tests/vectors");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let spec = value["spec"].as_str().unwrap_or_default();
        let name = path.display();
        assert!(
            spec.starts_with("docs/SPEC.md §"),
            "{name}: `spec` must cite docs/SPEC.md §N, got {spec:?}"
        );
        for number in citations(spec) {
            assert!(
                known.contains(&number),
                "{name}: cites §{number}, which docs/SPEC.md does not have"
            );
        }
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} vectors");
}

#[test]
fn every_citation_in_the_tree_names_an_existing_section() {
    let known = sections();
    let mut stack: Vec<PathBuf> = [
        "core",
        "conformance",
        "server",
        "bindings",
        "python",
        "node",
        "dashboard",
        "tests",
        "docs",
        "include",
        "scripts",
        "README.md",
    ]
    .iter()
    .map(|p| root().join(p))
    .collect();
    let skip = [
        "target",
        "node_modules",
        "pkg-web",
        "pkg-nodejs",
        ".venv",
        "__pycache__",
    ];
    let kinds = [
        "rs", "py", "pyi", "js", "mjs", "ts", "c", "h", "md", "json", "sh", "toml",
    ];
    let mut bad = Vec::new();
    let mut cited = 0;
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if skip
                .iter()
                .any(|s| path.file_name().is_some_and(|n| n == *s))
            {
                continue;
            }
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
            continue;
        }
        if path
            .extension()
            .is_none_or(|x| !kinds.iter().any(|k| x == *k))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if !line.contains("SPEC") {
                continue;
            }
            for number in citations(line) {
                cited += 1;
                if !known.contains(&number) {
                    bad.push(format!("{}:{}: §{number}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(cited > 50, "only {cited} citations found");
    assert!(
        bad.is_empty(),
        "citations of sections docs/SPEC.md does not have:\n{}",
        bad.join("\n")
    );
}
