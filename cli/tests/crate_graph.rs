//! The crate graph keeps one crate per program (docs/DECISIONS.md): read from `cargo
//! metadata`, the server library is built with neither the agent tools nor the test kit, the
//! agent tools and the Rust client (`klock-client`, which they are built on) with nothing of
//! the server, and the `klock` binary with the test kit only for its tests.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Package name -> (dependency package name, its kinds: "normal", "build", "dev").
type Graph = BTreeMap<String, Vec<(String, Vec<String>)>>;

/// The workspace's resolved graph, by package name.
fn graph() -> Graph {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--manifest-path",
            manifest,
        ])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = Graph::new();
    for node in metadata["resolve"]["nodes"]
        .as_array()
        .expect("a resolve graph")
    {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let kinds = d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k["kind"].as_str().unwrap_or("normal").to_owned())
                    .collect();
                (names[d["pkg"].as_str().unwrap()].to_owned(), kinds)
            })
            .collect();
        graph.insert(names[node["id"].as_str().unwrap()].to_owned(), deps);
    }
    graph
}

/// Every package `root` is built with (normal and build dependencies, transitively): what
/// ships with it, leaving out what only its tests use.
fn shipped_with(graph: &Graph, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_owned()];
    while let Some(name) = todo.pop() {
        for (dep, kinds) in &graph[&name] {
            if kinds.iter().any(|k| k != "dev") && seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn the_server_library_is_built_with_neither_the_agent_tools_nor_the_test_kit() {
    let graph = graph();
    let server = shipped_with(&graph, "klock-server");
    assert!(server.contains("klock-core"), "{server:?}");
    for other in ["klock-agent", "klock-testkit", "klock-cli"] {
        assert!(
            !server.contains(other),
            "klock-server is built with {other}"
        );
    }
}

#[test]
fn the_agent_tools_and_the_rust_client_are_built_with_nothing_of_the_server() {
    let graph = graph();
    let agent = shipped_with(&graph, "klock-agent");
    assert!(agent.contains("klock-client"), "{agent:?}");
    for crate_ in ["klock-agent", "klock-client"] {
        let built = shipped_with(&graph, crate_);
        for other in ["klock-server", "klock-testkit", "klock-cli"] {
            assert!(!built.contains(other), "{crate_} is built with {other}");
        }
    }
    // The public client ships without the agent tools' MCP server.
    assert!(!shipped_with(&graph, "klock-client").contains("klock-mcp"));
}

#[test]
fn the_binary_uses_the_test_kit_only_in_its_tests() {
    let graph = graph();
    let cli = shipped_with(&graph, "klock-cli");
    assert!(
        cli.contains("klock-server") && cli.contains("klock-agent"),
        "{cli:?}"
    );
    assert!(
        !cli.contains("klock-testkit"),
        "klock-cli is built with the test kit"
    );
    let direct = graph["klock-cli"]
        .iter()
        .find(|(name, _)| name == "klock-testkit")
        .map(|(_, kinds)| kinds.clone());
    assert_eq!(
        direct,
        Some(vec![String::from("dev")]),
        "the test kit is a dev-dependency"
    );
}
