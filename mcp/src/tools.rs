//! The tools: names, parameter schemas and descriptions written for a model, routed to the
//! [`Coordinator`].
//!
//! Contract: six tools, `klock_acquire`, `klock_await`, `klock_release`, `klock_status`,
//! `klock_reconcile`, `klock_who`. Parameters are checked by their JSON schema (unknown fields
//! are refused); every answer is one text block, a tool error when the [`Reply`] failed.

use crate::{Coordinator, Reply};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The longest a tool call blocks: MCP clients commonly time out at 60 s.
pub const MAX_WAIT_S: u64 = 45;

/// `wait_s`, or `default` seconds when not given, never more than [`MAX_WAIT_S`]: a longer
/// wait is cut to it (the answer is then WAIT with a ticket, and the tool descriptions say so).
fn bounded_wait(wait_s: Option<u64>, default: u64) -> Duration {
    Duration::from_secs(wait_s.unwrap_or(default).min(MAX_WAIT_S))
}

/// `klock_acquire`'s parameters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireArgs {
    /// Everything this piece of work will touch, all at once, each as "PREDICATE TYPE:/path":
    /// e.g. "MUTATES FILE:/src/app.py", "CONSUMES FILE:/src/lib.py", "DELETES FILE:/build".
    /// Predicates: MUTATES or DELETES or RENAMES (exclusive), CONSUMES (read; shared with
    /// other readers), PROVIDES, DEPENDS_ON. A directory path covers everything under it.
    pub intents: Vec<String>,
    /// Seconds the leases live without renewal; this sidecar renews them in the background,
    /// so this only matters if the sidecar dies. Default 60.
    pub ttl_s: Option<u64>,
    /// Seconds to wait for other agents to finish, at most 45 (default 30). If still
    /// blocked then, the answer is WAIT with a ticket: call klock_await with it.
    pub wait_s: Option<u64>,
}

impl AcquireArgs {
    /// How long this call may block: `wait_s`, 30 s by default, at most [`MAX_WAIT_S`].
    pub fn wait(&self) -> Duration {
        bounded_wait(self.wait_s, 30)
    }
}

/// `klock_await`'s parameters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwaitArgs {
    /// The ticket from a WAIT answer of klock_acquire.
    pub ticket: u64,
    /// Seconds to wait, at most 45 (default 45).
    pub wait_s: Option<u64>,
}

impl AwaitArgs {
    /// How long this call may block: `wait_s`, [`MAX_WAIT_S`] by default and at most.
    pub fn wait(&self) -> Duration {
        bounded_wait(self.wait_s, MAX_WAIT_S)
    }
}

/// `klock_release`'s parameters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseArgs {
    /// The lease ids to release (from klock_acquire's answer).
    pub lease_ids: Option<Vec<u64>>,
    /// true to release every lease this agent holds and withdraw its waits.
    pub all: Option<bool>,
}

/// `klock_status`'s parameters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// The resource, "TYPE:/path", e.g. "FILE:/src/app.py".
    pub resource: String,
}

/// The MCP server: the tool router over a coordinator.
pub struct Tools<C: Coordinator> {
    coordinator: Arc<C>,
    tool_router: ToolRouter<Self>,
}

impl<C: Coordinator> Clone for Tools<C> {
    fn clone(&self) -> Self {
        Tools {
            coordinator: self.coordinator.clone(),
            tool_router: self.tool_router.clone(),
        }
    }
}

fn result(reply: Reply) -> CallToolResult {
    let content = vec![ContentBlock::text(reply.text)];
    if reply.failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

#[tool_router]
impl<C: Coordinator> Tools<C> {
    /// The server for this coordinator.
    pub fn new(coordinator: C) -> Tools<C> {
        Tools {
            coordinator: Arc::new(coordinator),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        name = "klock_acquire",
        description = "Claim the files (or other resources) you are about to change, BEFORE changing them, so other agents working in the same repository do not edit them at the same time. Name everything the task will touch in one call: all of it is granted together or nothing is. Answers: GRANTED (the lease ids and fences; you may edit now; leases are renewed for you until you release them), WAIT (another agent holds it: the answer names who and what; call klock_await with the ticket), or DIE (an older agent has priority: nothing was granted; if you hold other leases, release them all with klock_release and then ask again for everything at once after the given delay). Release when done."
    )]
    async fn klock_acquire(&self, Parameters(args): Parameters<AcquireArgs>) -> CallToolResult {
        result(self.coordinator.acquire(args).await)
    }

    #[tool(
        name = "klock_await",
        description = "Keep waiting for a ticket that klock_acquire answered with WAIT. Blocks at most 45 s. Answers GRANTED (with the leases: you may edit now), WAIT again (still blocked: call klock_await again, or do other work and come back), TIMED_OUT or DIED (nothing held: ask again with klock_acquire)."
    )]
    async fn klock_await(&self, Parameters(args): Parameters<AwaitArgs>) -> CallToolResult {
        result(self.coordinator.await_ticket(args).await)
    }

    #[tool(
        name = "klock_release",
        description = "Give back leases when your edits are finished (and committed or saved), so waiting agents can proceed. Pass lease_ids, or all: true for everything (which also withdraws waits). Releasing twice is harmless."
    )]
    async fn klock_release(&self, Parameters(args): Parameters<ReleaseArgs>) -> CallToolResult {
        result(self.coordinator.release(args).await)
    }

    #[tool(
        name = "klock_status",
        description = "Before touching a resource, see who holds it (agent, predicate, lease, seconds until expiry), who waits for it, and who holds a directory above it or a file below it (covering)."
    )]
    async fn klock_status(&self, Parameters(args): Parameters<StatusArgs>) -> CallToolResult {
        result(self.coordinator.status(args).await)
    }

    #[tool(
        name = "klock_reconcile",
        description = "Check with the server which of your leases are still valid (ACTIVE with fence and seconds left, or EXPIRED / RELEASED). Use it after a long pause, or when told a lease was lost: stop editing anything whose lease is not ACTIVE and acquire it again."
    )]
    async fn klock_reconcile(&self) -> CallToolResult {
        result(self.coordinator.reconcile().await)
    }

    #[tool(
        name = "klock_who",
        description = "Who is working on what in this namespace: every agent's leases (resource, predicate, seconds left), who waits for them, the most contended resources, and agents whose leases recently expired (crashed or stuck agents). Use it to pick work that nobody else is doing."
    )]
    async fn klock_who(&self) -> CallToolResult {
        result(self.coordinator.who().await)
    }
}

#[tool_handler(router = self.tool_router)]
impl<C: Coordinator> ServerHandler for Tools<C> {
    // Logging is deprecated by SEP-2577 but still how hosts show the notices (crate::forward).
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("klock", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Klock coordinates agents that work on the same files. Call klock_acquire before editing files and klock_release when done; klock_who shows who works on what. If a tool result reports a lost lease, stop editing what it covered.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A coordinator that is never called: the tests read the tool list only.
    struct Idle;

    impl Coordinator for Idle {
        async fn acquire(&self, _: AcquireArgs) -> Reply {
            unimplemented!()
        }
        async fn await_ticket(&self, _: AwaitArgs) -> Reply {
            unimplemented!()
        }
        async fn release(&self, _: ReleaseArgs) -> Reply {
            unimplemented!()
        }
        async fn status(&self, _: StatusArgs) -> Reply {
            unimplemented!()
        }
        async fn reconcile(&self) -> Reply {
            unimplemented!()
        }
        async fn who(&self) -> Reply {
            unimplemented!()
        }
    }

    #[test]
    fn no_call_blocks_longer_than_45_s() {
        let acquire = |wait_s| AcquireArgs {
            intents: vec![String::from("MUTATES FILE:/x")],
            ttl_s: None,
            wait_s,
        };
        let wait = |wait_s| AwaitArgs { ticket: 1, wait_s };
        assert_eq!(acquire(None).wait(), Duration::from_secs(30));
        assert_eq!(acquire(Some(10)).wait(), Duration::from_secs(10));
        assert_eq!(acquire(Some(100)).wait(), Duration::from_secs(45));
        assert_eq!(acquire(Some(u64::MAX)).wait(), Duration::from_secs(45));
        assert_eq!(wait(None).wait(), Duration::from_secs(45));
        assert_eq!(wait(Some(0)).wait(), Duration::ZERO);
        assert_eq!(wait(Some(46)).wait(), Duration::from_secs(45));
    }

    #[test]
    fn six_tools_with_strict_schemas() {
        let tools = Tools::new(Idle).tool_router.list_all();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        let expected = [
            "klock_acquire",
            "klock_await",
            "klock_reconcile",
            "klock_release",
            "klock_status",
            "klock_who",
        ];
        assert_eq!(names, expected);
        for tool in &tools {
            let schema = &tool.input_schema;
            let with_params = schema.get("properties").and_then(|p| p.as_object());
            if with_params.is_some_and(|p| !p.is_empty()) {
                assert_eq!(schema["additionalProperties"], false, "{}", tool.name);
            }
            let description = tool.description.as_deref().unwrap_or_default();
            assert!(
                description.len() > 80,
                "{} needs a description for a model",
                tool.name
            );
        }
        let acquire = tools.iter().find(|t| t.name == "klock_acquire").unwrap();
        assert_eq!(
            acquire.input_schema["required"],
            serde_json::json!(["intents"])
        );
    }
}
