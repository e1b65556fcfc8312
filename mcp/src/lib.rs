//! # klock-mcp
//!
//! The Model Context Protocol face of a Klock sidecar: the tools an LLM agent calls to
//! coordinate with other agents, served over stdio with the official Rust SDK (`rmcp`, pinned
//! exactly in this crate's manifest and used nowhere else, so its fast-moving API touches one
//! crate).
//!
//! Contract: [`serve`] answers MCP on stdin/stdout until stdin ends, forwarding every tool call
//! to a [`Coordinator`] (the session logic lives with the caller, `klock mcp` in
//! `klock-agent`) and every notice it sends on the channel to the client as an MCP log
//! message. The tools' names, parameter schemas and descriptions are [`tools`]'s; what a tool
//! answers is the coordinator's [`Reply`], shown to the model as text.

pub mod tools;

use rmcp::service::{Peer, RoleServer};
use rmcp::ServiceExt;
use std::future::Future;
use tokio::sync::mpsc;

pub use tools::{AcquireArgs, AwaitArgs, ReleaseArgs, StatusArgs};

/// What a tool answers: text written for a model (what happened, who holds what until when,
/// what to do next), and whether the call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    /// A failed call (bad input, an unreachable server): the model sees it as a tool error.
    pub failed: bool,
}

/// The session behind the tools, one per sidecar process.
pub trait Coordinator: Send + Sync + 'static {
    /// Ask for leases, waiting at most `wait_s` (≤ 45) for them.
    fn acquire(&self, args: AcquireArgs) -> impl Future<Output = Reply> + Send;
    /// Wait at most `wait_s` (≤ 45) more for a ticket an earlier acquire returned.
    fn await_ticket(&self, args: AwaitArgs) -> impl Future<Output = Reply> + Send;
    /// Release some leases, or all of them.
    fn release(&self, args: ReleaseArgs) -> impl Future<Output = Reply> + Send;
    /// Who holds, waits on and covers one resource.
    fn status(&self, args: StatusArgs) -> impl Future<Output = Reply> + Send;
    /// The server's truth about every lease this agent believes it holds.
    fn reconcile(&self) -> impl Future<Output = Reply> + Send;
    /// Who is working on what in the namespace.
    fn who(&self) -> impl Future<Output = Reply> + Send;
}

/// Serves MCP on stdin/stdout until the client closes stdin (or the connection fails);
/// `notices` become MCP log messages (level warning, logger "klock").
///
/// # Errors
/// The MCP handshake failed.
pub async fn serve<C: Coordinator>(
    coordinator: C,
    notices: mpsc::UnboundedReceiver<String>,
) -> Result<(), String> {
    let running = tools::Tools::new(coordinator)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let forward = tokio::spawn(forward(running.peer().clone(), notices));
    let ended = running.waiting().await;
    forward.abort();
    ended
        .map(|_| ())
        .map_err(|e| format!("the MCP service stopped: {e}"))
}

/// Sends each notice as an MCP log message until the client is gone.
// Logging is deprecated by SEP-2577 (spec 2026-07-28) but is still the one push channel hosts
// show; the same notice is also in the next tool result, which is what outlives it.
#[allow(deprecated)]
async fn forward(peer: Peer<RoleServer>, mut notices: mpsc::UnboundedReceiver<String>) {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    while let Some(text) = notices.recv().await {
        let message = LoggingMessageNotificationParam::new(LoggingLevel::Warning, text.into())
            .with_logger("klock");
        if peer.notify_logging_message(message).await.is_err() {
            break;
        }
    }
}
