//! Peer-binding SQL, and the one query that resolves a peer connector's target.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Binding, Target};
use crate::{error::Result, ids::TenantId};

/// The binding of `connector`, with its target's slug and status (both absent once the
/// target row is gone).
pub async fn get(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
) -> Result<Option<(Binding, Option<String>)>> {
    let row = sqlx::query!(
        r#"SELECT b.connector_id, b.target_workspace_id, w.slug AS "target_slug?", w.status AS "target_status?",
                  b.created_by, b.created_at, b.invalidated_at, b.invalidated_reason
             FROM peer_bindings b
             LEFT JOIN workspaces w ON w.tenant_id = b.tenant_id AND w.id = b.target_workspace_id
            WHERE b.tenant_id = $1 AND b.workspace_id = $2 AND b.connector_id = $3"#,
        tenant.0,
        workspace,
        connector,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let binding = Binding {
            connector: r.connector_id,
            target_id: r.target_workspace_id,
            target: r.target_slug,
            created_by: r.created_by,
            created_at: r.created_at,
            invalidated_at: r.invalidated_at,
            invalidated_reason: r.invalidated_reason,
        };
        (binding, r.target_status)
    }))
}

/// Up to `limit` candidates of resolution: active, primary (not a fork) workspaces of the
/// tenant bound to the blueprint named `blueprint`, by slug.
pub async fn candidates(conn: &mut PgConnection, tenant: TenantId, blueprint: &str, limit: i64) -> Result<Vec<Target>> {
    Ok(sqlx::query_as!(
        Target,
        "SELECT w.id, w.slug, w.status FROM workspaces w
           JOIN blueprints b ON b.tenant_id = w.tenant_id AND b.id = w.blueprint_id
          WHERE w.tenant_id = $1 AND b.slug = $2 AND w.status = 'active' AND w.fork_of IS NULL
          ORDER BY w.slug LIMIT $3",
        tenant.0,
        blueprint,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// Binds `connector` to `target`, replacing any earlier (or invalidated) binding, only if the
/// target is still active when the statement runs: `None` when it is not.
pub async fn upsert(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    target: Uuid,
    created_by: &str,
) -> Result<Option<Binding>> {
    Ok(sqlx::query_as!(
        Binding,
        // FOR SHARE: a concurrent status change of the target waits for this binding to
        // commit (its trigger then sees and invalidates it), or this waits for that change and
        // is retried; so no valid binding ever points at an archived target, whatever the
        // isolation level of the transaction that archives it.
        r#"WITH t AS (SELECT id, slug FROM workspaces WHERE tenant_id = $1 AND id = $4 AND status = 'active' FOR SHARE),
              b AS (
             INSERT INTO peer_bindings AS b (tenant_id, workspace_id, connector_id, target_workspace_id, created_by)
             SELECT $1, $2, $3, t.id, $5 FROM t
             ON CONFLICT (tenant_id, workspace_id, connector_id) DO UPDATE
                SET target_workspace_id = EXCLUDED.target_workspace_id, created_by = EXCLUDED.created_by,
                    created_at = now(), invalidated_at = NULL, invalidated_reason = NULL
             RETURNING b.*)
         SELECT b.connector_id AS "connector!", b.target_workspace_id AS "target_id!", t.slug AS "target?",
                b.created_by AS "created_by!", b.created_at AS "created_at!", b.invalidated_at AS "invalidated_at?",
                b.invalidated_reason AS "invalidated_reason?"
           FROM b JOIN t ON t.id = b.target_workspace_id"#,
        tenant.0,
        workspace,
        connector,
        target,
        created_by,
    )
    .fetch_optional(conn)
    .await?)
}

/// Deletes the binding; whether there was one, and where it pointed.
pub async fn delete(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!(
        "DELETE FROM peer_bindings WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3
         RETURNING target_workspace_id",
        tenant.0,
        workspace,
        connector,
    )
    .fetch_optional(conn)
    .await?)
}
