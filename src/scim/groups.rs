//! The directory's Groups: writes, reads and lists; their members are the directory's Users,
//! and a role group's members get its role (see [`super::users::sync_users`]).

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{
    Base, ListQuery, ScimError, ScimResult, filter, group_members, list_response, log_entry, patch, render,
    schema::{Projection, ResourceKind, normalize},
    store, unique,
    users::sync_users,
};
use crate::{
    admin_log,
    admin_log::Audit,
    db::{Db, Scope},
    error::Error,
    ids::TenantId,
};

/// A group's member entries, checked: each names a User of this directory by its id.
fn member_entries(attrs: &mut Map<String, Value>) -> ScimResult<Vec<(Uuid, Value)>> {
    let mut out: Vec<(Uuid, Value)> = Vec::new();
    for mut entry in attrs.remove("members").and_then(|m| m.as_array().cloned()).unwrap_or_default() {
        let id = entry
            .get("value")
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<Uuid>().ok())
            .ok_or_else(|| ScimError::value("each member needs the 'value' of a User"))?;
        if entry.get("type").and_then(Value::as_str).is_some_and(|t| !t.eq_ignore_ascii_case("User")) {
            return Err(ScimError::value("members are Users (groups do not nest)"));
        }
        if let Some(o) = entry.as_object_mut() {
            o.remove("$ref");
            o.insert("value".into(), json!(id.to_string()));
        }
        if !out.iter().any(|(u, _)| *u == id) {
            out.push((id, entry));
        }
    }
    Ok(out)
}

async fn write_group(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    base: &Base,
    id: Option<Uuid>,
    mut attrs: Map<String, Value>,
) -> crate::error::Result<Map<String, Value>> {
    let members = member_entries(&mut attrs)?;
    let ids: Vec<Uuid> = members.iter().map(|(u, _)| *u).collect();
    let known = store::existing_users(&mut *conn, tenant, &ids).await?;
    if let Some(missing) = ids.iter().find(|u| !known.contains(u)) {
        return Err(ScimError::value(format!("member {missing} is not a User of this directory")).into());
    }
    let name = attrs.get("displayName").and_then(Value::as_str).unwrap_or_default().to_lowercase();
    let external_id = attrs.get("externalId").and_then(Value::as_str).map(str::to_owned);
    let summary = json!({ "displayName": attrs.get("displayName"), "externalId": external_id, "members": ids.len() });
    let value = Value::Object(attrs);
    let (r, before, action) = match id {
        None => (
            store::insert_group(&mut *conn, tenant, &name, external_id.as_deref(), &value).await,
            Vec::new(),
            "scim.group.create",
        ),
        Some(id) => {
            let before: Vec<Uuid> = store::group_members(&mut *conn, tenant, id).await?.into_iter().map(|(u, _)| u).collect();
            let r = store::update_group(&mut *conn, tenant, id, &name, external_id.as_deref(), &value)
                .await
                .and_then(|r| r.ok_or(Error::NotFound { what: "Group" }));
            (r, before, "scim.group.update")
        }
    };
    let r = r.map_err(|e| unique(e, "scim_groups_display_name_key", "this displayName"))?;
    store::set_group_members(&mut *conn, tenant, r.id, &members).await?;
    admin_log::record(&mut *conn, log_entry(tenant, audit, action, ResourceKind::Group, r.id, summary)).await?;
    let mut touched = before;
    touched.extend(ids.iter().copied().filter(|u| !touched.contains(u)).collect::<Vec<_>>());
    sync_users(&mut *conn, tenant, audit, &touched).await?;
    let entries: Vec<Value> = members.into_iter().map(|(_, e)| e).collect();
    Ok(render(ResourceKind::Group, base, &r, Some(("members", group_members(base, &entries)))))
}

pub async fn create_group(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, body: &Value) -> ScimResult<Value> {
    let attrs = normalize(ResourceKind::Group, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let attrs = attrs.clone();
            Box::pin(async move { write_group(conn, tenant, audit, base, None, attrs).await })
        })
        .await?;
    Ok(Value::Object(doc))
}

async fn group_doc(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    base: &Base,
    id: Uuid,
) -> crate::error::Result<(store::Resource, Vec<Value>)> {
    let r = store::get_group(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "Group" })?;
    let entries = store::group_members(&mut *conn, tenant, id).await?.into_iter().map(|(_, e)| e).collect::<Vec<_>>();
    let _ = base;
    Ok((r, entries))
}

pub async fn get_group(db: &Db, tenant: TenantId, base: &Base, id: Uuid, projection: &Projection) -> ScimResult<Value> {
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            Box::pin(async move {
                let (r, entries) = group_doc(conn, tenant, base, id).await?;
                Ok(render(ResourceKind::Group, base, &r, Some(("members", group_members(base, &entries)))))
            })
        })
        .await?;
    Ok(Value::Object(projection.apply(doc)))
}

pub async fn list_groups(db: &Db, tenant: TenantId, base: &Base, query: &ListQuery) -> ScimResult<Value> {
    let by_name = query.filter.as_ref().and_then(|f| filter::equality_on(f, "displayName")).map(str::to_lowercase);
    let docs = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let by_name = by_name.clone();
            Box::pin(async move {
                let groups = store::list_groups(&mut *conn, tenant, by_name.as_deref()).await?;
                let mut members: HashMap<Uuid, Vec<Value>> = HashMap::new();
                for (group, entry) in store::all_group_members(&mut *conn, tenant).await? {
                    members.entry(group).or_default().push(entry);
                }
                Ok(groups
                    .iter()
                    .map(|r| {
                        let m = members.get(&r.id).map(Vec::as_slice).unwrap_or_default();
                        render(ResourceKind::Group, base, r, Some(("members", group_members(base, m))))
                    })
                    .collect::<Vec<_>>())
            })
        })
        .await?;
    Ok(list_response(query, docs))
}

pub async fn replace_group(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, id: Uuid, body: &Value) -> ScimResult<Value> {
    let attrs = normalize(ResourceKind::Group, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let attrs = attrs.clone();
            Box::pin(async move {
                store::get_group(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "Group" })?;
                write_group(conn, tenant, audit, base, Some(id), attrs).await
            })
        })
        .await?;
    Ok(Value::Object(doc))
}

pub async fn patch_group(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, id: Uuid, body: &Value) -> ScimResult<Value> {
    let ops = patch::parse(ResourceKind::Group, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let ops = ops.clone();
            Box::pin(async move {
                let (r, entries) = group_doc(&mut *conn, tenant, base, id).await?;
                let mut doc = match r.attrs {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                if !entries.is_empty() {
                    doc.insert("members".into(), Value::Array(entries));
                }
                patch::apply(ResourceKind::Group, &mut doc, &ops)?;
                let attrs = normalize(ResourceKind::Group, &Value::Object(doc))?;
                write_group(conn, tenant, audit, base, Some(id), attrs).await
            })
        })
        .await?;
    Ok(Value::Object(doc))
}

pub async fn delete_group(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> ScimResult<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            store::get_group(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "Group" })?;
            let members: Vec<Uuid> = store::group_members(&mut *conn, tenant, id).await?.into_iter().map(|(u, _)| u).collect();
            store::delete_group(&mut *conn, tenant, id).await?;
            admin_log::record(&mut *conn, log_entry(tenant, audit, "scim.group.delete", ResourceKind::Group, id, json!({})))
                .await?;
            sync_users(&mut *conn, tenant, audit, &members).await
        })
    })
    .await?;
    Ok(())
}
