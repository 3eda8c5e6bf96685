//! `/api/v1/tenants/{tenant}/kv…`: the tenant's key-value store, for any authenticated actor
//! of the tenant (people and machines alike).

use axum::{
    Json,
    extract::{Path, Query, State},
    http::StatusCode,
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::ApiJson,
    kv::{self, BoundedValue, Entry, Expect, Key, Next, Page},
};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    after: Option<String>,
    limit: Option<u32>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PutBody {
    value: Value,
    ttl_ms: Option<u64>,
}

/// `expect`: `{"absent": true}` or `{"value": …}`; `next`: `{"value": …}` or `{"delete": true}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CasBody {
    key: String,
    expect: Slot,
    next: Slot,
    ttl_ms: Option<u64>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Slot {
    value: Option<Value>,
    #[serde(default)]
    absent: bool,
    #[serde(default)]
    delete: bool,
}

/// A page of keys, in order, optionally under a prefix.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/kv", tag = "kv", params(ListQuery), responses((status = 200, body = Page)))]
async fn list_keys(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Page>> {
    Ok(Json(kv::list(&state.db, ctx.tenant.id, &q.prefix, q.after.as_deref(), q.limit.unwrap_or(100)).await?))
}

/// One key's value.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/kv/{key}", tag = "kv", responses((status = 200, body = Entry)))]
async fn get_key(ctx: TenantCtx, State(state): State<AppState>, Path((_, key)): Path<(String, String)>) -> Result<Json<Entry>> {
    let key = Key::parse(&key)?;
    Ok(Json(kv::get(&state.db, ctx.tenant.id, &key).await?.ok_or(Error::NotFound { what: "key" })?))
}

/// Sets a key unconditionally, with an optional TTL.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/kv/{key}", tag = "kv", request_body = PutBody, responses((status = 200, body = Entry)))]
async fn put_key(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, key)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<Json<Entry>> {
    let (key, value, ttl) = (Key::parse(&key)?, BoundedValue::parse(body.value)?, kv::validate_ttl(body.ttl_ms)?);
    Ok(Json(kv::set(&state.db, ctx.tenant.id, &ctx.audit, &key, &value, ttl).await?))
}

/// Deletes a key.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/kv/{key}", tag = "kv", responses((status = 204, description = "Deleted")))]
async fn delete_key(ctx: TenantCtx, State(state): State<AppState>, Path((_, key)): Path<(String, String)>) -> Result<StatusCode> {
    let key = Key::parse(&key)?;
    if kv::delete(&state.db, ctx.tenant.id, &ctx.audit, &key).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound { what: "key" })
    }
}

/// The answer of a compare-and-set that won.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Swapped {
    swapped: bool,
}

/// 200 `{"swapped": true}` when this call won; 412 `precondition_failed` when the
/// expectation did not hold (and nothing was written).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/kv-cas", tag = "kv", request_body = CasBody, responses((status = 200, body = Swapped), (status = 412, response = crate::error::Problem)))]
async fn compare_and_set(ctx: TenantCtx, State(state): State<AppState>, ApiJson(body): ApiJson<CasBody>) -> Result<Json<Value>> {
    let key = Key::parse(&body.key)?;
    let expect = match body.expect {
        Slot { absent: true, value: None, delete: false } => Expect::Absent,
        Slot { absent: false, value: Some(v), delete: false } => Expect::Value(BoundedValue::parse(v)?),
        _ => return Err(Error::invalid("invalid_expect", Some("expect"), "expect is {\"absent\": true} or {\"value\": …}")),
    };
    let next = match body.next {
        Slot { delete: true, value: None, absent: false } => Next::Delete,
        Slot { delete: false, value: Some(v), absent: false } => Next::Value(BoundedValue::parse(v)?),
        _ => return Err(Error::invalid("invalid_next", Some("next"), "next is {\"value\": …} or {\"delete\": true}")),
    };
    let ttl = kv::validate_ttl(body.ttl_ms)?;
    if kv::compare_and_set(&state.db, ctx.tenant.id, &ctx.audit, &key, &expect, &next, ttl).await? {
        Ok(Json(json!({ "swapped": true })))
    } else {
        Err(Error::Precondition { code: "precondition_failed", message: "the key does not hold what was expected".into() })
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_keys)).routes(routes!(get_key, put_key, delete_key)).routes(routes!(compare_and_set))
}
