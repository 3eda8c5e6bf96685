//! Verify, seal and unseal: both deployments compared by a live digest per table, computed
//! the same way as the export's manifest (volatile columns and the move's own admin-log rows
//! left out), and the source tenant moved to `moved` in the transaction that records where it
//! went.

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{TableSum, Tally, manifest_digest, store, tables};
use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    tenants::{self, Status},
};

/// Both sides' sums per table.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub tables: BTreeMap<String, (TableSum, TableSum)>,
}

impl Comparison {
    /// True when every table has the same rows on both sides.
    pub fn equal(&self) -> bool {
        self.tables.values().all(|(a, b)| a.digested == b.digested && a.digest == b.digest)
    }

    fn differing(&self) -> Vec<&str> {
        self.tables
            .iter()
            .filter(|(_, (a, b))| a.digested != b.digested || a.digest != b.digest)
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

/// Live sums of every exported table of `tenant`, read in the caller's transaction.
async fn sums(conn: &mut sqlx::PgConnection, tenant: TenantId, without_activity: bool) -> Result<BTreeMap<String, TableSum>> {
    store::utc(conn).await?;
    let mut out = BTreeMap::new();
    for table in tables::exported().filter(|t| !(without_activity && t.name == "activity")) {
        let pk = store::primary_key(conn, table).await?;
        let mut tally = Tally::new();
        let mut rows = store::rows(conn, table, &pk, tenant);
        while let Some(text) = rows.next().await {
            let row: Map<String, Value> = serde_json::from_str(&text?).map_err(anyhow::Error::from)?;
            tally.add(table, &row);
        }
        drop(rows);
        out.insert(table.name.to_owned(), tally.finish());
    }
    Ok(out)
}

/// Live sums in one REPEATABLE READ snapshot of `db`.
async fn snapshot_sums(db: &Db, tenant: TenantId, without_activity: bool) -> Result<BTreeMap<String, TableSum>> {
    let mut conn = store::snapshot(db, tenant).await?;
    let sums = sums(&mut conn, tenant, without_activity).await;
    store::end(conn).await?;
    sums
}

fn compare(source: BTreeMap<String, TableSum>, mut destination: BTreeMap<String, TableSum>) -> Comparison {
    let tables = source.into_iter().map(|(name, s)| {
        let d = destination.remove(&name).unwrap_or_default();
        (name, (s, d))
    });
    Comparison { tables: tables.collect() }
}

/// The destination's copy of the tenant: it must have imported it.
async fn destination_tenant(dest: &Db, tenant: TenantId) -> Result<(uuid::Uuid, String)> {
    dest.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(tenants::tx::imported(conn, tenant)))
        .await?
        .ok_or(Error::Conflict { code: "not_imported", message: "the destination has not imported this tenant".into() })
}

async fn log(db: &Db, audit: &Audit, tenant: TenantId, slug: &str, action: &'static str, after: Value) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let after = after.clone();
        Box::pin(async move {
            let entry =
                Entry { tenant: Some(tenant), audit, action, target: format!("tenant:{slug}"), before: None, after: Some(after) };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

/// Compares the source's live rows with the destination's, table by table, and logs the
/// outcome on both sides.
pub async fn verify(source: &Db, dest: &Db, audit: &Audit, slug: &str, without_activity: bool) -> Result<Comparison> {
    let tenant = tenants::by_slug(source, slug).await?;
    let (export_id, _) = destination_tenant(dest, tenant.id).await?;
    let comparison = compare(
        snapshot_sums(source, tenant.id, without_activity).await?,
        snapshot_sums(dest, tenant.id, without_activity).await?,
    );
    let after = json!({ "export_id": export_id, "equal": comparison.equal(), "differing": comparison.differing() });
    log(source, audit, tenant.id, slug, "tenant.verify", after.clone()).await?;
    log(dest, audit, tenant.id, slug, "tenant.verify", after).await?;
    Ok(comparison)
}

/// Checks a base URL a seal records: absolute http(s), no query or fragment.
fn base_url(text: &str) -> Result<String> {
    let invalid = || Error::invalid("invalid_base_url", Some("to"), "the new base URL is an absolute http(s) URL without query");
    let url = url::Url::parse(text).map_err(|_| invalid())?;
    if !matches!(url.scheme(), "http" | "https") || url.query().is_some() || url.fragment().is_some() || url.host().is_none() {
        return Err(invalid());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn verify_failed(c: &Comparison) -> Error {
    Error::Conflict { code: "verify_failed", message: format!("source and destination differ in: {}", c.differing().join(", ")) }
}

/// Seals the source: verifies both sides again inside the source's own transaction (so no
/// write lands between the comparison and the seal), then moves the tenant to `moved` and
/// records `to`, the destination's base URL, in the same transaction.
pub async fn seal(source: &Db, dest: &Db, audit: &Audit, slug: &str, to: &str, without_activity: bool) -> Result<Comparison> {
    let to = base_url(to)?;
    let tenant = tenants::by_slug(source, slug).await?;
    if !matches!(tenant.status, Status::Active | Status::Suspended) {
        return Err(Error::Conflict {
            code: "illegal_transition",
            message: format!("a {} tenant cannot be sealed", tenant.status.as_str()),
        });
    }
    let (export_id, _) = destination_tenant(dest, tenant.id).await?;
    let theirs = snapshot_sums(dest, tenant.id, without_activity).await?;
    let (to, theirs) = (&to, &theirs);
    let comparison = source
        .serializable(Scope::Tenant(tenant.id), |conn, _| {
            Box::pin(async move {
                let comparison = compare(sums(&mut *conn, tenant.id, without_activity).await?, theirs.clone());
                if !comparison.equal() {
                    return Err(verify_failed(&comparison));
                }
                let ours: BTreeMap<String, TableSum> =
                    comparison.tables.iter().map(|(k, (s, _))| (k.clone(), s.clone())).collect();
                let digest = manifest_digest(&ours);
                store::scope(conn, tenant.id, true).await?;
                tenants::tx::update_status(&mut *conn, tenant.id, tenant.status, Status::Moved).await?.ok_or(
                    Error::Precondition { code: "status_changed", message: "the tenant's status changed; retry".into() },
                )?;
                let record = tenants::tx::MoveRecord {
                    tenant: tenant.id,
                    direction: "out",
                    export_id,
                    manifest_digest: &digest,
                    base_url: Some(to.as_str()),
                    prior_status: Some(tenant.status),
                };
                tenants::tx::record_move(&mut *conn, &record).await?;
                let entry = Entry {
                    tenant: Some(tenant.id),
                    audit,
                    action: "tenant.seal",
                    target: format!("tenant:{slug}"),
                    before: Some(json!({ "status": tenant.status })),
                    after: Some(json!({ "status": Status::Moved, "moved_to": to, "export_id": export_id })),
                };
                admin_log::record(conn, entry).await?;
                Ok(comparison)
            })
        })
        .await?;
    log(dest, audit, tenant.id, slug, "tenant.seal", json!({ "source": "sealed", "moved_to": to, "export_id": export_id }))
        .await?;
    Ok(comparison)
}

/// Lifts the seal, back to the status the tenant had before it, only while the destination
/// still holds exactly what the source does (it has served no write since).
pub async fn unseal(source: &Db, dest: &Db, audit: &Audit, slug: &str, without_activity: bool) -> Result<Status> {
    let tenant = tenants::by_slug(source, slug).await?;
    if tenant.status != Status::Moved {
        return Err(Error::Conflict { code: "not_sealed", message: "the tenant is not sealed".into() });
    }
    let (export_id, _) = destination_tenant(dest, tenant.id).await?;
    let theirs = snapshot_sums(dest, tenant.id, without_activity).await?;
    let theirs = &theirs;
    let prior = source
        .serializable(Scope::Tenant(tenant.id), |conn, _| {
            Box::pin(async move {
                let comparison = compare(sums(&mut *conn, tenant.id, without_activity).await?, theirs.clone());
                if !comparison.equal() {
                    return Err(Error::Conflict {
                        code: "destination_written",
                        message: format!(
                            "the destination changed since the seal ({}): it is the tenant's home now",
                            comparison.differing().join(", ")
                        ),
                    });
                }
                store::scope(conn, tenant.id, true).await?;
                let prior = tenants::tx::unseal_record(&mut *conn, tenant.id)
                    .await?
                    .ok_or(Error::Conflict { code: "not_sealed", message: "the tenant has no live seal".into() })?;
                tenants::tx::update_status(&mut *conn, tenant.id, Status::Moved, prior).await?.ok_or(Error::Precondition {
                    code: "status_changed",
                    message: "the tenant's status changed; retry".into(),
                })?;
                let entry = Entry {
                    tenant: Some(tenant.id),
                    audit,
                    action: "tenant.unseal",
                    target: format!("tenant:{slug}"),
                    before: Some(json!({ "status": Status::Moved })),
                    after: Some(json!({ "status": prior, "export_id": export_id })),
                };
                admin_log::record(conn, entry).await?;
                Ok(prior)
            })
        })
        .await?;
    log(dest, audit, tenant.id, slug, "tenant.unseal", json!({ "source": "unsealed", "export_id": export_id })).await?;
    Ok(prior)
}
