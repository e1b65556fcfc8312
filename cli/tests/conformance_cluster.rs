//! Every conformance vector through a three-node cluster of real `klock serve --node-id`
//! processes (issue 24, "How we will know"): each vector on a cluster of its own, started with
//! the vector's config on a manual clock, its steps sent to a follower; after the last step
//! the three nodes' state hashes are equal at one index (`klock_testkit::conformance`).

mod support;

/// Half of the vectors (`half` 0 or 1 of the sorted files): two tests, so that each stays
/// well inside the test runner's time bound on a loaded machine.
fn half_of_the_vectors_pass(half: usize) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    let paths: Vec<String> = files.into_iter().skip(half).step_by(2).collect();
    let summary = klock_testkit::conformance::run_cluster(support::klock(), &paths);
    let lines = summary.lines().join("\n");
    assert!(summary.ok(), "{lines}");
    assert!(summary.passed() >= 50, "{lines}");
}

#[test]
fn the_even_vectors_pass_through_a_three_node_cluster() {
    half_of_the_vectors_pass(0);
}

#[test]
fn the_odd_vectors_pass_through_a_three_node_cluster() {
    half_of_the_vectors_pass(1);
}

#[test]
fn a_vector_the_cluster_does_not_meet_fails() {
    // A vector the kernel does not meet (a second writer granted), shared with the HTTP
    // run's test (testkit/tests/conformance_http.rs).
    let wrong = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/fixtures/unmet-vector.json");
    let paths = [wrong.to_string_lossy().into_owned()];
    let summary = klock_testkit::conformance::run_cluster(support::klock(), &paths);
    let lines = summary.lines().join("\n");
    assert!(!summary.ok(), "{lines}");
    assert!(
        lines.contains("step 4") && lines.contains("0 passed, 1 failed"),
        "{lines}"
    );
}

#[test]
fn a_request_without_its_time_is_refused_by_every_node_of_a_manual_clock_cluster() {
    let mut cluster = support::cluster::Cluster::unstarted(support::klock(), 3);
    cluster.extra = vec![String::from("--clock"), String::from("manual")];
    cluster.start_all();
    cluster.init();
    let leader = cluster.leader();
    for node in [leader, (leader + 1) % 3] {
        let body = br#"{"agent_id": "a"}"#;
        let path = "/v1/ns/default/sessions";
        let a = klock_testkit::http_client::request(cluster.ports[node], "POST", path, &[], body)
            .unwrap();
        // The clock's own refusal, as one manual-clock server answers it; not a 503 that a
        // client would retry for its whole budget.
        assert_eq!(a.status, 400, "node {}: {a:?}", node + 1);
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("every request must carry `now`"),
            "node {}: {a:?}",
            node + 1
        );
    }
}
