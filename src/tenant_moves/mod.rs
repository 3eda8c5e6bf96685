//! Moving a tenant between deployments (issue 26): export, import, verify and seal.
//!
//! - [`export`] reads everything the tenant owns in one REPEATABLE READ snapshot and streams
//!   it into a sealed file ([`file`]; format: `docs/tenant-export.md`), with a manifest of
//!   per-table row counts and digests. Vault envelopes are opened with the source's key ring
//!   and travel as plaintext inside the file's seal only; tokens and credentials travel as
//!   the hashes the database holds, never as secrets.
//! - [`import`] writes the whole tenant in one transaction, or nothing: it refuses a taken
//!   slug or id, a newer format, a changed file, a digest that does not match, and a second
//!   import of the same export; rows are inserted under the tenant's row-level security
//!   scope, the database parses every typed column, and foreign keys plus an explicit check
//!   of workspace references hold referential integrity.
//! - [`verify`], [`seal`] and [`unseal`] (in `verify.rs`) compare both sides by live
//!   digests and move the source to `moved`.

pub mod file;
mod store;
pub mod tables;
mod vaulted;
mod verify;

use std::{collections::BTreeMap, fs::OpenOptions, io::BufReader, os::unix::fs::OpenOptionsExt, path::Path};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;
use zeroize::Zeroizing;

pub use file::TransferKey;
pub use tables::{MOVE_ACTIONS, Part, TABLES, Table};
use vaulted::{Vaulted, open_sealed, reseal, uuid_of};
pub use verify::{Comparison, seal, unseal, verify};

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    tenants::{self, Status, Tenant},
    vault::KeyRing,
};

/// Rows per `INSERT` of an import.
const BATCH_ROWS: usize = 500;

/// One table's line in a manifest: rows in the file, rows its digest covers, and the digest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSum {
    pub rows: u64,
    pub digested: u64,
    pub digest: String,
}

/// One line of an export's body.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record {
    Begin {
        export_id: Uuid,
        tenant_id: Uuid,
        slug: String,
        schema: i64,
        exported_at: DateTime<Utc>,
        without_activity: bool,
    },
    Row {
        table: String,
        row: Map<String, Value>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        vault: BTreeMap<String, Vaulted>,
    },
    Manifest {
        tables: BTreeMap<String, TableSum>,
        excluded: BTreeMap<String, String>,
    },
}

/// What an export or an import did.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub export_id: Uuid,
    pub tenant: String,
    pub manifest_digest: String,
    pub tables: BTreeMap<String, TableSum>,
}

/// A running digest of one table (see [`canonical`]).
struct Tally {
    rows: u64,
    digested: u64,
    hash: Sha256,
}

impl Tally {
    fn new() -> Tally {
        Tally { rows: 0, digested: 0, hash: Sha256::new() }
    }

    fn add(&mut self, table: &Table, row: &Map<String, Value>) {
        self.rows += 1;
        if table.name == "admin_log" && row.get("action").and_then(Value::as_str).is_some_and(|a| MOVE_ACTIONS.contains(&a)) {
            return;
        }
        self.digested += 1;
        self.hash.update(canonical(table, row).as_bytes());
        self.hash.update(b"\n");
    }

    fn finish(self) -> TableSum {
        TableSum { rows: self.rows, digested: self.digested, digest: hex::encode(self.hash.finalize()) }
    }
}

/// A row as digests see it: keys sorted, volatile columns null. Both deployments render a row
/// the same way (`row_to_json` in UTC), so equal rows give equal text.
fn canonical(table: &Table, row: &Map<String, Value>) -> String {
    let mut row = row.clone();
    for column in table.volatile {
        row.insert((*column).to_owned(), Value::Null);
    }
    // serde_json's map is ordered by key, so this is canonical.
    Value::Object(row).to_string()
}

/// The digest a move records for a whole manifest.
fn manifest_digest(tables: &BTreeMap<String, TableSum>) -> String {
    hex::encode(Sha256::digest(serde_json::to_vec(tables).unwrap_or_default()))
}

pub(super) fn text<'r>(row: &'r Map<String, Value>, column: &str) -> Option<&'r str> {
    row.get(column).and_then(Value::as_str)
}

/// Writes `tenant`'s export to `to` (a new file of mode 0600, renamed into place only when
/// whole). `without_activity` leaves the activity history out.
pub async fn export(
    db: &Db,
    audit: &Audit,
    ring: &KeyRing,
    key: &TransferKey,
    slug: &str,
    to: &Path,
    without_activity: bool,
) -> Result<Summary> {
    let tenant = tenants::by_slug(db, slug).await?;
    if !matches!(tenant.status, Status::Active | Status::Suspended) {
        return Err(Error::Conflict {
            code: "tenant_not_exportable",
            message: format!("a {} tenant cannot be exported", tenant.status.as_str()),
        });
    }
    let export_id = Uuid::now_v7();
    // The intent is logged before the snapshot is taken, so the export carries its own row
    // and the admin log reads as one continuous history at the destination.
    db.serializable(Scope::Tenant(tenant.id), |conn, _| {
        Box::pin(async move {
            let after = json!({ "export_id": export_id, "without_activity": without_activity });
            let target = format!("tenant:{slug}");
            let entry =
                Entry { tenant: Some(tenant.id), audit, action: "tenant.export", target, before: None, after: Some(after) };
            admin_log::record(conn, entry).await
        })
    })
    .await?;

    let partial = to.with_extension("partial");
    let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&partial).map_err(|e| {
        Error::invalid("export_target_unwritable", Some("to"), format!("cannot create {}: {e}", partial.display()))
    })?;
    let written = async {
        let mut conn = store::snapshot(db, tenant.id).await?;
        let written = write_body(&mut conn, ring, key, &tenant, export_id, file, without_activity).await;
        // Read only: ending it changes nothing, and a failed export ends it too.
        store::end(conn).await?;
        written
    }
    .await;
    match written {
        Ok(tables) => {
            std::fs::rename(&partial, to).map_err(anyhow::Error::from)?;
            Ok(Summary { export_id, tenant: tenant.slug, manifest_digest: manifest_digest(&tables), tables })
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// Writes the export's records (begin, every row with its sealed values opened, manifest) of
/// `tenant` (its id and slug) into `file`, sealed under `key`.
async fn write_body(
    conn: &mut sqlx::PgConnection,
    ring: &KeyRing,
    key: &TransferKey,
    tenant: &Tenant,
    export_id: Uuid,
    file: std::fs::File,
    without_activity: bool,
) -> Result<BTreeMap<String, TableSum>> {
    let (tenant, slug) = (tenant.id, tenant.slug.as_str());
    let (copies, revocations) = store::unsettled(&mut *conn, tenant).await?;
    if copies > 0 || revocations > 0 {
        return Err(Error::Conflict {
            code: "moves_unsettled",
            message: format!(
                "{copies} copy move(s) and {revocations} provider revocation(s) are not settled yet; export once they are"
            ),
        });
    }
    let mut out = file::Sealer::new(file, key)?;
    let begin = Record::Begin {
        export_id,
        tenant_id: tenant.0,
        slug: slug.to_owned(),
        schema: store::schema(&mut *conn).await?,
        exported_at: store::now(&mut *conn).await?,
        without_activity,
    };
    out.line(&serde_json::to_vec(&begin).map_err(anyhow::Error::from)?)?;
    let mut sums = BTreeMap::new();
    for table in tables::exported().filter(|t| !(without_activity && t.name == "activity")) {
        let pk = store::primary_key(&mut *conn, table).await?;
        let mut tally = Tally::new();
        let mut rows = store::rows(&mut *conn, table, &pk, tenant);
        while let Some(text) = rows.next().await {
            let mut row: Map<String, Value> = serde_json::from_str(&text?).map_err(anyhow::Error::from)?;
            let vault = open_sealed(ring, tenant, table, &mut row)?;
            tally.add(table, &row);
            let record = Record::Row { table: table.name.to_owned(), row, vault };
            out.line(&Zeroizing::new(serde_json::to_vec(&record).map_err(anyhow::Error::from)?))?;
        }
        drop(rows);
        sums.insert(table.name.to_owned(), tally.finish());
    }
    let excluded = TABLES
        .iter()
        .filter_map(|t| match t.part {
            Part::Excluded(why) => Some((t.name.to_owned(), why.to_owned())),
            Part::Export => None,
        })
        .chain(without_activity.then(|| ("activity".to_owned(), "left out by --without-activity".to_owned())))
        .collect();
    let manifest = Record::Manifest { tables: sums.clone(), excluded };
    out.line(&serde_json::to_vec(&manifest).map_err(anyhow::Error::from)?)?;
    out.finish()?;
    Ok(sums)
}

fn invalid_file(message: impl Into<String>) -> Error {
    Error::invalid("export_invalid", Some("from"), message)
}

fn record(line: &[u8]) -> Result<Record> {
    serde_json::from_slice(line).map_err(|_| invalid_file("a line of the export is not a record of this format"))
}

/// What the import checks before it opens its transaction: the begin record.
struct Begin {
    export_id: Uuid,
    tenant: TenantId,
    slug: String,
    schema: i64,
    without_activity: bool,
}

fn read_begin(from: &Path, key: &TransferKey) -> Result<(file::Opener, Begin)> {
    let mut body = file::Opener::open(from, key)?;
    let first = body.line()?.ok_or_else(|| invalid_file("the export is empty"))?;
    let Record::Begin { export_id, tenant_id, slug, schema, without_activity, .. } = record(&first)? else {
        return Err(invalid_file("the export does not start with its begin record"));
    };
    Ok((body, Begin { export_id, tenant: TenantId(tenant_id), slug, schema, without_activity }))
}

/// Checks only the file's header (format name and version), without a key.
pub fn check_header(from: &Path) -> Result<file::Header> {
    let f = std::fs::File::open(from)
        .map_err(|e| Error::invalid("export_missing", Some("from"), format!("cannot read {}: {e}", from.display())))?;
    Ok(file::read_header(&mut BufReader::new(f))?.0)
}

/// Imports the export at `from` in one transaction (see the module doc for what it refuses).
pub async fn import(db: &Db, audit: &Audit, ring: &KeyRing, key: &TransferKey, from: &Path) -> Result<Summary> {
    check_header(from)?;
    let (_, begin) = read_begin(from, key)?;
    let here = db.read(|conn, _| Box::pin(async move { store::schema(conn).await })).await?;
    if begin.schema != here {
        return Err(Error::Conflict {
            code: "export_schema_mismatch",
            message: format!(
                "the export was written at schema {} and this deployment is at {here}: migrate the older side first",
                begin.schema
            ),
        });
    }
    let (tenant, export_id) = (begin.tenant, begin.export_id);
    let begin = &begin;
    let tables = db
        .serializable(Scope::Platform { reason: "import a tenant" }, |conn, _| {
            Box::pin(async move {
                // Every attempt reads the file again from its start.
                let (body, _) = read_begin(from, key)?;
                import_in(conn, audit, ring, body, begin).await
            })
        })
        .await?;
    tracing::info!(tenant = %tenant.0, %export_id, "tenant imported");
    Ok(Summary { export_id, tenant: begin.slug.clone(), manifest_digest: manifest_digest(&tables), tables })
}

/// A table's rows waiting for their `INSERT`.
struct Pending {
    table: &'static Table,
    rows: Vec<Value>,
    tally: Tally,
}

async fn flush(conn: &mut sqlx::PgConnection, tenant: TenantId, p: &mut Pending) -> Result<()> {
    // The tenant row and ops failures are written in platform context (their policies admit
    // nothing else); every other table under the tenant's own scope, so row-level security
    // checks every row's tenant again.
    let platform = matches!(p.table.name, "tenants" | "ops_failures");
    if platform {
        store::scope(conn, tenant, true).await?;
    }
    let inserted = store::insert(conn, p.table, &p.rows).await.map_err(|e| {
        e.on_constraint("tenants_slug_key", || Error::Conflict {
            code: "slug_taken",
            message: "a tenant with the export's slug already exists here".into(),
        })
        .on_constraint("tenants_pkey", || Error::Conflict {
            code: "tenant_exists",
            message: "this tenant already exists here (imported before?)".into(),
        })
    })?;
    if platform {
        store::scope(conn, tenant, false).await?;
    }
    if inserted != p.rows.len() as u64 {
        return Err(anyhow::anyhow!("{}: {} of {} rows inserted", p.table.name, inserted, p.rows.len()).into());
    }
    p.rows.clear();
    Ok(())
}

async fn import_in(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    ring: &KeyRing,
    mut body: file::Opener,
    begin: &Begin,
) -> Result<BTreeMap<String, TableSum>> {
    let tenant = begin.tenant;
    store::utc(conn).await?;
    store::scope(conn, tenant, false).await?;
    let mut order = tables::exported().filter(|t| !(begin.without_activity && t.name == "activity"));
    let mut pending: Option<Pending> = None;
    let mut sums: BTreeMap<String, TableSum> = BTreeMap::new();
    let manifest = loop {
        let line = body.line()?.ok_or_else(|| invalid_file("the export ends without its manifest"))?;
        match record(&line)? {
            Record::Row { table, mut row, vault } => {
                // Tables arrive in registry order: the next table starts where the last ended.
                if pending.as_ref().is_none_or(|p| p.table.name != table) {
                    if let Some(mut done) = pending.take() {
                        flush(conn, tenant, &mut done).await?;
                        sums.insert(done.table.name.to_owned(), done.tally.finish());
                    }
                    let next = order.by_ref().find(|t| t.name == table);
                    let next = next.ok_or_else(|| invalid_file(format!("rows of {table} are out of order or not exported")))?;
                    pending = Some(Pending { table: next, rows: Vec::new(), tally: Tally::new() });
                }
                let Some(p) = pending.as_mut() else { unreachable!("set above") };
                let owner = if p.table.name == "tenants" { "id" } else { "tenant_id" };
                if uuid_of(&row, owner) != Some(tenant.0) {
                    return Err(invalid_file(format!("a row of {table} belongs to another tenant")));
                }
                if p.table.name == "tenants" && text(&row, "slug") != Some(begin.slug.as_str()) {
                    return Err(invalid_file("the tenant row does not match the export's begin record"));
                }
                p.tally.add(p.table, &row);
                reseal(ring, tenant, p.table, &mut row, &vault)?;
                p.rows.push(Value::Object(row));
                if p.rows.len() >= BATCH_ROWS {
                    flush(conn, tenant, p).await?;
                }
            }
            Record::Manifest { tables, .. } => break tables,
            Record::Begin { .. } => return Err(invalid_file("a second begin record")),
        }
    };
    if let Some(mut done) = pending.take() {
        flush(conn, tenant, &mut done).await?;
        sums.insert(done.table.name.to_owned(), done.tally.finish());
    }
    if body.line()?.is_some() {
        return Err(invalid_file("records after the manifest"));
    }
    // Tables without rows have no line in the body; the manifest must say zero for them.
    for t in order {
        sums.entry(t.name.to_owned()).or_insert_with(|| Tally::new().finish());
    }
    for (name, sum) in &manifest {
        sums.entry(name.clone()).or_insert_with(|| Tally::new().finish());
        if sums.get(name) != Some(sum) {
            return Err(Error::Conflict {
                code: "export_digest_mismatch",
                message: format!("{name}: the rows read do not match the manifest's count and digest"),
            });
        }
    }
    if sums.len() != manifest.len() {
        return Err(Error::Conflict { code: "export_digest_mismatch", message: "the manifest does not list every table".into() });
    }
    if !sums.contains_key("tenants") || sums["tenants"].rows != 1 {
        return Err(invalid_file("the export holds no tenant row"));
    }
    // Referential integrity where no foreign key holds it: rows that go with their workspace
    // must name one of the tenant's workspaces.
    use crate::workspaces::tables::{Fate, Rows, TABLES as WORKSPACE_TABLES};
    for t in WORKSPACE_TABLES.iter().filter(|t| t.rows == Rows::Column && t.fate != Fate::Keep) {
        if tables::find(t.name).is_some_and(|r| r.part == Part::Export) && store::orphans(conn, t.name, tenant).await? > 0 {
            return Err(Error::Conflict {
                code: "export_integrity",
                message: format!("rows of {} name a workspace the export does not hold", t.name),
            });
        }
    }
    let digest = manifest_digest(&sums);
    let record = tenants::tx::MoveRecord {
        tenant,
        direction: "in",
        export_id: begin.export_id,
        manifest_digest: &digest,
        base_url: None,
        prior_status: None,
    };
    tenants::tx::record_move(conn, &record).await.map_err(|e| {
        e.on_constraint("tenant_moves_import_once", || Error::Conflict {
            code: "export_already_imported",
            message: "this export was imported here before".into(),
        })
    })?;
    let rows: BTreeMap<&String, u64> = sums.iter().map(|(k, v)| (k, v.rows)).collect();
    let after = json!({ "export_id": begin.export_id, "manifest_digest": digest, "rows": rows });
    let entry = Entry {
        tenant: Some(tenant),
        audit,
        action: "tenant.import",
        target: format!("tenant:{}", begin.slug),
        before: None,
        after: Some(after),
    };
    admin_log::record(conn, entry).await?;
    Ok(sums)
}
