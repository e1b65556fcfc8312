//! Admin routes for the operator: `GET /v1/backup`, the online backup (crate::backup's
//! contract: the state after the last committed entry, taken without stopping the engine
//! beyond an in-memory copy).

use super::*;
use crate::backup::Backup;

/// The whole state as a backup file (admin).
#[utoipa::path(
    get,
    path = "/v1/backup",
    tag = "server",
    summary = "An online backup: the state after the last committed entry (admin; klock backup)",
    params(),
    responses((status = 200, description = "a backup file: {format, format_version, server, wall_ms, snapshot}", body = Object), (status = "4XX", description = "a stable code, name and message", body = ErrorBody))
)]
pub(super) async fn backup(State(api): State<Shared>) -> Result<Response, ApiError> {
    // Under the applier's lock: only the copy of the state (module contract).
    let snapshot = api.engine.read(|m| m.snapshot()).await?;
    let index = snapshot.applied;
    let encoded = tokio::task::spawn_blocking(move || serde_json::to_vec(&Backup::of(snapshot)))
        .await
        .map_err(|e| ApiError::other(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e.to_string()))?
        .map_err(|e| {
            ApiError::other(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e.to_string())
        })?;
    tracing::info!(
        index,
        bytes = encoded.len(),
        "backup taken at entry {index}"
    );
    Ok(([("content-type", "application/json")], encoded).into_response())
}
