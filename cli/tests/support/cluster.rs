//! The test kit's loopback cluster ([`klock_testkit::cluster`]), for the cluster tests
//! (cluster.rs, cluster_tls.rs, cluster_leave.rs), the client failover tests (failover.rs) and
//! the nemesis suite (nemesis.rs), each cluster made with [`super::klock`], the `klock` binary
//! built with these tests.

pub use klock_testkit::cluster::{
    claim_port, klock_cluster, on_leader, peers, Cluster, SECRET, WAIT,
};
