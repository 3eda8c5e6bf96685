//! The SQL of a move. Table names come from the registry ([`super::tables`]), never from
//! input: the import refuses a row of a table the registry does not export before any SQL.

use futures::{StreamExt, stream::BoxStream};
use sqlx::{AssertSqlSafe, Executor, PgConnection, Postgres, pool::PoolConnection};

use super::tables::Table;
use crate::{
    db::Db,
    error::{Error, Result},
    ids::TenantId,
};

/// A connection inside one REPEATABLE READ, READ ONLY transaction scoped to `tenant` (row-level
/// security admits its rows only), with timestamps rendered in UTC so both deployments write
/// the same text. The caller ends it with [`end`].
pub async fn snapshot(db: &Db, tenant: TenantId) -> Result<PoolConnection<Postgres>> {
    let mut conn = db.pool().acquire().await?;
    conn.execute(AssertSqlSafe(format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL ROLE gatehouse_app; SET LOCAL TimeZone = 'UTC'; \
         SELECT set_config('gatehouse.tenant_id', '{}', true)",
        tenant.0.as_hyphenated()
    )))
    .await?;
    Ok(conn)
}

/// Ends a [`snapshot`] (it wrote nothing).
pub async fn end(mut conn: PoolConnection<Postgres>) -> Result<()> {
    conn.execute("ROLLBACK").await?;
    Ok(())
}

/// Renders timestamps in UTC for the rest of the caller's transaction.
pub async fn utc(conn: &mut PgConnection) -> Result<()> {
    conn.execute("SET LOCAL TimeZone = 'UTC'").await?;
    Ok(())
}

/// Switches the caller's transaction to `tenant`'s scope (`platform` on or off with it).
pub async fn scope(conn: &mut PgConnection, tenant: TenantId, platform: bool) -> Result<()> {
    // A SELECT run for its effect: its one row (the settings' new values) is dropped.
    sqlx::query!(
        "SELECT set_config('gatehouse.platform', $1, true) AS platform, set_config('gatehouse.tenant_id', $2, true) AS tenant",
        if platform { "on" } else { "" },
        tenant.0.to_string(),
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// The newest migration applied: an export imports only into the same schema.
pub async fn schema(conn: &mut PgConnection) -> Result<i64> {
    Ok(sqlx::query_scalar!("SELECT max(version) FROM _sqlx_migrations WHERE success").fetch_one(conn).await?.unwrap_or(0))
}

/// The database clock.
pub async fn now(conn: &mut PgConnection) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(conn).await?)
}

/// A table's primary-key columns, in key order (the order rows are read and digested in).
pub async fn primary_key(conn: &mut PgConnection, table: &Table) -> Result<Vec<String>> {
    // `$1::text::regclass`: the name is sent as text and cast, as a bound `&str` always was
    // (the macros know no Rust type for a `regclass` parameter).
    let columns = sqlx::query_scalar!(
        r#"SELECT a.attname::text AS "attname!" FROM pg_index i
           JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          WHERE i.indrelid = $1::text::regclass AND i.indisprimary
          ORDER BY k.n"#,
        table.name,
    )
    .fetch_all(conn)
    .await?;
    if columns.is_empty() {
        return Err(anyhow::anyhow!("{} has no primary key", table.name).into());
    }
    Ok(columns)
}

fn tenant_column(table: &Table) -> &'static str {
    if table.name == "tenants" { "id" } else { "tenant_id" }
}

/// Every row of `tenant` in `table`, as `row_to_json` text, in primary-key order, streamed.
pub fn rows<'c>(conn: &'c mut PgConnection, table: &Table, key: &[String], tenant: TenantId) -> BoxStream<'c, Result<String>> {
    let order = key.iter().map(|c| format!("t.{c}")).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT row_to_json(t)::text FROM {} t WHERE t.{} = $1 ORDER BY {order}", table.name, tenant_column(table));
    sqlx::query_scalar::<_, String>(AssertSqlSafe(sql)).bind(tenant).fetch(conn).map(|r| r.map_err(Error::from)).boxed()
}

/// Inserts rows given as JSON objects (every column named; `json_populate_recordset` parses
/// each value with its column's own type, so a malformed id or time is refused here).
pub async fn insert(conn: &mut PgConnection, table: &Table, rows: &[serde_json::Value]) -> Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let sql = format!("INSERT INTO {0} SELECT * FROM json_populate_recordset(NULL::{0}, $1::json)", table.name);
    Ok(sqlx::query(AssertSqlSafe(sql)).bind(serde_json::Value::Array(rows.to_vec())).execute(conn).await?.rows_affected())
}

/// Moves that are not settled (an export waits for them: a lease would expire at both ends).
pub async fn unsettled(conn: &mut PgConnection, tenant: TenantId) -> Result<(i64, i64)> {
    let copies =
        sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM copies WHERE tenant_id = $1 AND state = 'pending'"#, tenant.0)
            .fetch_one(&mut *conn)
            .await?;
    let revocations = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM oauth_revocations WHERE tenant_id = $1 AND outcome IS NULL"#,
        tenant.0,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((copies, revocations))
}

/// Rows of `table` that name a workspace the tenant does not have (for tables whose rows go
/// with their workspace, where no foreign key says so).
pub async fn orphans(conn: &mut PgConnection, table: &str, tenant: TenantId) -> Result<i64> {
    let sql = format!(
        "SELECT count(*) FROM {table} x WHERE x.tenant_id = $1
            AND NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.tenant_id = $1 AND w.id = x.workspace_id)"
    );
    Ok(sqlx::query_scalar(AssertSqlSafe(sql)).bind(tenant).fetch_one(conn).await?)
}
