//! Schema migrations: embedded in the binary, applied at start and by `gatehouse migrate`.
//!
//! sqlx's migrator holds a PostgreSQL advisory lock (keyed on the database name) while it
//! applies, so several replicas starting at once apply each migration exactly once; the
//! others wait and then find nothing left to do.

use sqlx::{Connection, PgConnection, migrate::Migrator};

use crate::{config::Secret, error::Result};

/// Every migration in `migrations/`, compiled in. Append-only: never edit a landed one.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Applies pending migrations as the role in `owner_url` (the schema owner).
pub async fn run(owner_url: &Secret) -> Result<()> {
    let mut conn = PgConnection::connect(owner_url.expose()).await?;
    MIGRATOR.run(&mut conn).await.map_err(|e| anyhow::anyhow!("migration failed: {e}"))?;
    conn.close().await?;
    Ok(())
}

/// True when every migration this binary knows is applied (readiness).
pub async fn is_current(db: &super::Db) -> Result<bool> {
    let applied: Vec<i64> = db
        .probe(|conn, _| {
            Box::pin(async move {
                Ok(sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
                    .fetch_all(conn)
                    .await?)
            })
        })
        .await?;
    Ok(MIGRATOR.iter().filter(|m| m.migration_type.is_up_migration()).all(|m| applied.binary_search(&m.version).is_ok()))
}
