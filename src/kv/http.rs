//! `/api/v1/tenants/{tenant}/kv…`: the tenant's key-value store, for any authenticated actor
//! of the tenant (people and machines alike).

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::ApiJson,
    kv::{self, BoundedValue, Entry, Expect, Key, Next, Page},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    after: Option<String>,
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody {
    value: Value,
    ttl_ms: Option<u64>,
}

/// `expect`: `{"absent": true}` or `{"value": …}`; `next`: `{"value": …}` or `{"delete": true}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CasBody {
    key: String,
    expect: Slot,
    next: Slot,
    ttl_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Slot {
    value: Option<Value>,
    #[serde(default)]
    absent: bool,
    #[serde(default)]
    delete: bool,
}

async fn list_keys(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Page>> {
    Ok(Json(kv::list(&state.db, ctx.tenant.id, &q.prefix, q.after.as_deref(), q.limit.unwrap_or(100)).await?))
}

async fn get_key(ctx: TenantCtx, State(state): State<AppState>, Path((_, key)): Path<(String, String)>) -> Result<Json<Entry>> {
    let key = Key::parse(&key)?;
    Ok(Json(kv::get(&state.db, ctx.tenant.id, &key).await?.ok_or(Error::NotFound { what: "key" })?))
}

async fn put_key(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, key)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<Json<Entry>> {
    let (key, value, ttl) = (Key::parse(&key)?, BoundedValue::parse(body.value)?, kv::validate_ttl(body.ttl_ms)?);
    Ok(Json(kv::set(&state.db, ctx.tenant.id, &ctx.audit, &key, &value, ttl).await?))
}

async fn delete_key(ctx: TenantCtx, State(state): State<AppState>, Path((_, key)): Path<(String, String)>) -> Result<StatusCode> {
    let key = Key::parse(&key)?;
    if kv::delete(&state.db, ctx.tenant.id, &ctx.audit, &key).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound { what: "key" })
    }
}

/// 200 `{"swapped": true}` when this call won; 412 `precondition_failed` when the
/// expectation did not hold (and nothing was written).
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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/kv", get(list_keys))
        .route("/api/v1/tenants/{tenant}/kv/{key}", get(get_key).put(put_key).delete(delete_key))
        .route("/api/v1/tenants/{tenant}/kv-cas", post(compare_and_set))
}
