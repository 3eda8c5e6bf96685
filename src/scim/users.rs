//! The directory's Users: writes, reads and lists, and the member each one is linked to.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{
    Base, ListQuery, ScimResult, filter, list_response, log_entry, patch, render,
    schema::{Projection, ResourceKind, normalize},
    store, unique, user_groups,
};
use crate::{
    admin_log::{self, Audit},
    db::{Db, Scope},
    error::Error,
    ids::TenantId,
    members::{self, Role},
};

/// The derived columns of a user's attributes.
pub(super) fn user_keys(attrs: &Map<String, Value>) -> (String, Option<String>, bool, Option<String>) {
    let user_name = attrs.get("userName").and_then(Value::as_str).unwrap_or_default().to_lowercase();
    let external_id = attrs.get("externalId").and_then(Value::as_str).map(str::to_owned);
    let active = attrs.get("active").and_then(Value::as_bool).unwrap_or(true);
    let emails = attrs.get("emails").and_then(Value::as_array);
    let email = emails
        .and_then(|e| e.iter().find(|e| e.get("primary") == Some(&Value::Bool(true))).or_else(|| e.first()))
        .and_then(|e| e.get("value"))
        .and_then(Value::as_str)
        .map(|e| e.trim().to_lowercase());
    (user_name, external_id, active, email)
}

/// Brings the tenant's member linked to a User in line with it, inside the User's write:
/// an inactive (or deleted) User's member is removed through the fence; an active one gets
/// the role of its role groups.
async fn sync_member(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    user: Uuid,
    email: Option<&str>,
    active: bool,
) -> crate::error::Result<()> {
    let Some(email) = email else { return Ok(()) };
    for m in members::tx::by_email(&mut *conn, tenant, email).await? {
        if !active {
            // The removal ends the sessions and raises the fence; the personal tokens are
            // revoked too, so an invitation later does not bring them back. (MCP OAuth grants
            // name the member row, which is gone: they never authenticate again.)
            members::tx::remove_in(&mut *conn, tenant, audit, m.id).await?;
            crate::tokens::revoke_for_principal_in(&mut *conn, tenant, audit, &m.principal()).await?;
            continue;
        }
        let (mine, any) = store::role_groups(&mut *conn, tenant, user).await?;
        if !any {
            continue;
        }
        let rank = |r: &str| match r {
            "admin" => (3, Role::Admin),
            "operator" => (2, Role::Operator),
            _ => (1, Role::Member),
        };
        let role = mine.iter().map(|r| rank(r)).max_by_key(|(n, _)| *n).map_or(Role::Member, |(_, r)| r);
        members::tx::set_role_in(&mut *conn, tenant, audit, &m, role).await?;
    }
    Ok(())
}

pub(super) async fn sync_users(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    users: &[Uuid],
) -> crate::error::Result<()> {
    for user in users {
        if let Some((email, active)) = store::user_keys(&mut *conn, tenant, *user).await? {
            sync_member(&mut *conn, tenant, audit, *user, email.as_deref(), active).await?;
        }
    }
    Ok(())
}

/// What a user's admin-log row tells: never the whole document, only what identifies it.
fn user_summary(attrs: &Map<String, Value>) -> Value {
    let (user_name, external_id, active, email) = user_keys(attrs);
    json!({ "userName": user_name, "externalId": external_id, "active": active, "email": email })
}

/// Writes a user's validated attributes (a new user when `id` is `None`), with its
/// admin-log row and the member sync, and returns it as shown.
async fn write_user(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    base: &Base,
    id: Option<Uuid>,
    attrs: Map<String, Value>,
) -> crate::error::Result<Map<String, Value>> {
    let (user_name, external_id, active, email) = user_keys(&attrs);
    let keys =
        store::UserKeys { user_name_key: &user_name, external_id: external_id.as_deref(), active, email: email.as_deref() };
    let summary = user_summary(&attrs);
    let value = Value::Object(attrs);
    let (r, action) = match id {
        None => (store::insert_user(&mut *conn, tenant, &keys, &value).await, "scim.user.create"),
        Some(id) => (
            store::update_user(&mut *conn, tenant, id, &keys, &value)
                .await
                .and_then(|r| r.ok_or(Error::NotFound { what: "User" })),
            "scim.user.update",
        ),
    };
    let r = r.map_err(|e| unique(e, "scim_users_user_name_key", "this userName"))?;
    admin_log::record(&mut *conn, log_entry(tenant, audit, action, ResourceKind::User, r.id, summary)).await?;
    sync_member(&mut *conn, tenant, audit, r.id, email.as_deref(), active).await?;
    let groups = store::groups_of(&mut *conn, tenant, r.id).await?;
    Ok(render(ResourceKind::User, base, &r, Some(("groups", user_groups(base, &groups)))))
}

pub async fn create_user(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, body: &Value) -> ScimResult<Value> {
    let attrs = normalize(ResourceKind::User, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let attrs = attrs.clone();
            Box::pin(async move { write_user(conn, tenant, audit, base, None, attrs).await })
        })
        .await?;
    Ok(Value::Object(doc))
}

pub async fn get_user(db: &Db, tenant: TenantId, base: &Base, id: Uuid, projection: &Projection) -> ScimResult<Value> {
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            Box::pin(async move {
                let r = store::get_user(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "User" })?;
                let groups = store::groups_of(&mut *conn, tenant, id).await?;
                Ok(render(ResourceKind::User, base, &r, Some(("groups", user_groups(base, &groups)))))
            })
        })
        .await?;
    Ok(Value::Object(projection.apply(doc)))
}

/// Lists users. The filter is evaluated on the rendered users (so every attribute filters as
/// it reads); `userName eq "…"`, what directories send to find one user, reads the index.
pub async fn list_users(db: &Db, tenant: TenantId, base: &Base, query: &ListQuery) -> ScimResult<Value> {
    let by_name = query.filter.as_ref().and_then(|f| filter::equality_on(f, "userName")).map(str::to_lowercase);
    let docs = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let by_name = by_name.clone();
            Box::pin(async move {
                let users = store::list_users(&mut *conn, tenant, by_name.as_deref()).await?;
                let mut groups: HashMap<Uuid, Vec<(Uuid, String)>> = HashMap::new();
                for (user, group, name) in store::all_memberships(&mut *conn, tenant).await? {
                    groups.entry(user).or_default().push((group, name));
                }
                Ok(users
                    .iter()
                    .map(|r| {
                        let g = groups.get(&r.id).map(Vec::as_slice).unwrap_or_default();
                        render(ResourceKind::User, base, r, Some(("groups", user_groups(base, g))))
                    })
                    .collect::<Vec<_>>())
            })
        })
        .await?;
    Ok(list_response(query, docs))
}

pub async fn replace_user(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, id: Uuid, body: &Value) -> ScimResult<Value> {
    let attrs = normalize(ResourceKind::User, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let attrs = attrs.clone();
            Box::pin(async move {
                store::get_user(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "User" })?;
                write_user(conn, tenant, audit, base, Some(id), attrs).await
            })
        })
        .await?;
    Ok(Value::Object(doc))
}

pub async fn patch_user(db: &Db, tenant: TenantId, audit: &Audit, base: &Base, id: Uuid, body: &Value) -> ScimResult<Value> {
    let ops = patch::parse(ResourceKind::User, body)?;
    let doc = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let ops = ops.clone();
            Box::pin(async move {
                let r = store::get_user(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "User" })?;
                let mut doc = match r.attrs {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                patch::apply(ResourceKind::User, &mut doc, &ops)?;
                let attrs = normalize(ResourceKind::User, &Value::Object(doc))?;
                write_user(conn, tenant, audit, base, Some(id), attrs).await
            })
        })
        .await?;
    Ok(Value::Object(doc))
}

/// Deletes a user; its member is removed in the same transaction.
pub async fn delete_user(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> ScimResult<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let r = store::get_user(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "User" })?;
            let attrs = r.attrs.as_object().cloned().unwrap_or_default();
            let (_, _, _, email) = user_keys(&attrs);
            sync_member(&mut *conn, tenant, audit, id, email.as_deref(), false).await?;
            store::delete_user(&mut *conn, tenant, id).await?;
            admin_log::record(
                &mut *conn,
                log_entry(tenant, audit, "scim.user.delete", ResourceKind::User, id, user_summary(&attrs)),
            )
            .await
        })
    })
    .await?;
    Ok(())
}
