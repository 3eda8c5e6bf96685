//! SSO connection SQL, tenant first.

use std::collections::BTreeMap;

use sqlx::PgConnection;
use uuid::Uuid;

use super::{AuthMethod, Connection, Jit};
use crate::{error::Result, ids::TenantId, members::Role};

/// A connection's stored settings (`key_id` and `envelope` empty on an update that keeps the
/// sealed material).
pub struct NewRow<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub auth_method: AuthMethod,
    pub key_id: &'a str,
    pub envelope: &'a str,
    pub groups_claim: &'a str,
    pub role_mapping: &'a BTreeMap<String, Role>,
    pub default_role: Role,
    pub jit: Jit,
}

struct Row {
    id: Uuid,
    name: String,
    issuer: String,
    client_id: String,
    auth_method: String,
    groups_claim: String,
    role_mapping: serde_json::Value,
    default_role: String,
    jit: String,
    version: i64,
    created_by: String,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    email_domains: Vec<String>,
    envelope: String,
}

impl Row {
    fn connection(self) -> Result<(Connection, String)> {
        let role_mapping: BTreeMap<String, String> = serde_json::from_value(self.role_mapping).unwrap_or_default();
        let role_mapping = role_mapping.into_iter().map(|(k, v)| Ok((k, Role::parse(&v)?))).collect::<Result<_>>()?;
        let c = Connection {
            id: self.id,
            name: self.name,
            issuer: self.issuer,
            client_id: self.client_id,
            auth_method: AuthMethod::parse(&self.auth_method)?,
            email_domains: self.email_domains,
            groups_claim: self.groups_claim,
            role_mapping,
            default_role: Role::parse(&self.default_role)?,
            jit: Jit::parse(&self.jit)?,
            version: self.version,
            created_by: self.created_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
        };
        Ok((c, self.envelope))
    }
}

fn mapping_json(m: &BTreeMap<String, Role>) -> serde_json::Value {
    serde_json::Value::Object(m.iter().map(|(k, r)| (k.clone(), serde_json::Value::from(r.as_str()))).collect())
}

pub async fn insert(conn: &mut PgConnection, tenant: TenantId, row: &NewRow<'_>, created_by: &str) -> Result<()> {
    sqlx::query!(
        "INSERT INTO sso_connections (tenant_id, id, name, issuer, client_id, auth_method, key_id, envelope, groups_claim,
                                      role_mapping, default_role, jit, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        tenant.0,
        row.id,
        row.name,
        row.issuer,
        row.client_id,
        row.auth_method.as_str(),
        row.key_id,
        row.envelope,
        row.groups_claim,
        mapping_json(row.role_mapping),
        row.default_role.as_str(),
        row.jit.as_str(),
        created_by,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Updates by compare-and-set on `version`; `reseal`: the envelope too. False: the version
/// moved on (or the row is gone).
pub async fn update(conn: &mut PgConnection, tenant: TenantId, row: &NewRow<'_>, version: i64, reseal: bool) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE sso_connections SET name = $4, issuer = $5, client_id = $6, auth_method = $7,
                key_id = CASE WHEN $8 THEN $9 ELSE key_id END, envelope = CASE WHEN $8 THEN $10 ELSE envelope END,
                groups_claim = $11, role_mapping = $12, default_role = $13, jit = $14,
                version = version + 1, updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND version = $3",
        tenant.0,
        row.id,
        version,
        row.name,
        row.issuer,
        row.client_id,
        row.auth_method.as_str(),
        reseal,
        row.key_id,
        row.envelope,
        row.groups_claim,
        mapping_json(row.role_mapping),
        row.default_role.as_str(),
        row.jit.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Replaces the connection's domains (a domain another connection holds violates
/// `sso_domains_domain_key`).
pub async fn set_domains(conn: &mut PgConnection, tenant: TenantId, id: Uuid, domains: &[String]) -> Result<()> {
    sqlx::query!("DELETE FROM sso_domains WHERE tenant_id = $1 AND connection_id = $2", tenant.0, id).execute(&mut *conn).await?;
    sqlx::query!(
        "INSERT INTO sso_domains (domain, tenant_id, connection_id) SELECT d, $1, $2 FROM unnest($3::text[]) AS d",
        tenant.0,
        id,
        domains,
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn delete(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    sqlx::query!("DELETE FROM sso_domains WHERE tenant_id = $1 AND connection_id = $2", tenant.0, id).execute(&mut *conn).await?;
    Ok(sqlx::query!("DELETE FROM sso_connections WHERE tenant_id = $1 AND id = $2", tenant.0, id)
        .execute(conn)
        .await?
        .rows_affected()
        == 1)
}

pub async fn count(conn: &mut PgConnection, tenant: TenantId) -> Result<i64> {
    Ok(sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM sso_connections WHERE tenant_id = $1"#, tenant.0)
        .fetch_one(conn)
        .await?)
}

/// A connection with its sealed envelope.
pub async fn get_sealed(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<(Connection, String)>> {
    let row = sqlx::query_as!(
        Row,
        r#"SELECT c.id, c.name, c.issuer, c.client_id, c.auth_method, c.groups_claim, c.role_mapping, c.default_role, c.jit,
                  c.version, c.created_by, c.created_at, c.updated_at, c.envelope,
                  ARRAY(SELECT d.domain FROM sso_domains d WHERE d.tenant_id = c.tenant_id AND d.connection_id = c.id
                        ORDER BY d.domain) AS "email_domains!"
           FROM sso_connections c WHERE c.tenant_id = $1 AND c.id = $2"#,
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?;
    row.map(Row::connection).transpose()
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Connection>> {
    Ok(get_sealed(conn, tenant, id).await?.map(|(c, _)| c))
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Connection>> {
    let rows = sqlx::query_as!(
        Row,
        r#"SELECT c.id, c.name, c.issuer, c.client_id, c.auth_method, c.groups_claim, c.role_mapping, c.default_role, c.jit,
                  c.version, c.created_by, c.created_at, c.updated_at, c.envelope,
                  ARRAY(SELECT d.domain FROM sso_domains d WHERE d.tenant_id = c.tenant_id AND d.connection_id = c.id
                        ORDER BY d.domain) AS "email_domains!"
           FROM sso_connections c WHERE c.tenant_id = $1 ORDER BY c.created_at, c.id"#,
        tenant.0,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(|r| Ok(r.connection()?.0)).collect()
}

pub async fn required(conn: &mut PgConnection, tenant: TenantId) -> Result<bool> {
    Ok(sqlx::query_scalar!("SELECT sso_required FROM tenants WHERE id = $1", tenant.0)
        .fetch_optional(conn)
        .await?
        .unwrap_or(false))
}

/// Platform context (tenants are written only there).
pub async fn set_required(conn: &mut PgConnection, tenant: TenantId, required: bool) -> Result<()> {
    sqlx::query!("UPDATE tenants SET sso_required = $2, updated_at = now() WHERE id = $1", tenant.0, required)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn enforced(conn: &mut PgConnection, tenant: TenantId) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT t.sso_required AND EXISTS (SELECT 1 FROM sso_connections c WHERE c.tenant_id = t.id) AS "enforced!"
           FROM tenants t WHERE t.id = $1"#,
        tenant.0,
    )
    .fetch_optional(conn)
    .await?
    .unwrap_or(false))
}

/// Platform context: the connection a sign-in goes through (see [`super::route`]). Only
/// active tenants route.
pub async fn route(conn: &mut PgConnection, slug: Option<&str>, domain: Option<&str>) -> Result<Option<(TenantId, Uuid)>> {
    let row = match slug {
        Some(slug) => {
            sqlx::query!(
                r#"SELECT c.tenant_id AS "tenant_id: TenantId", c.id FROM sso_connections c JOIN tenants t ON t.id = c.tenant_id
                   WHERE t.slug = $1 AND t.status = 'active'
                   ORDER BY EXISTS (SELECT 1 FROM sso_domains d WHERE d.tenant_id = c.tenant_id AND d.connection_id = c.id
                                    AND d.domain = $2) DESC, c.created_at, c.id
                   LIMIT 1"#,
                slug,
                domain,
            )
            .fetch_optional(conn)
            .await?
            .map(|r| (r.tenant_id, r.id))
        }
        None => match domain {
            Some(domain) => sqlx::query!(
                r#"SELECT d.tenant_id AS "tenant_id: TenantId", d.connection_id FROM sso_domains d JOIN tenants t ON t.id = d.tenant_id
                   WHERE d.domain = $1 AND t.status = 'active'"#,
                domain,
            )
            .fetch_optional(conn)
            .await?
            .map(|r| (r.tenant_id, r.connection_id)),
            None => None,
        },
    };
    Ok(row)
}

pub async fn any(conn: &mut PgConnection) -> Result<bool> {
    Ok(sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM sso_connections) AS "any!""#).fetch_one(conn).await?)
}
