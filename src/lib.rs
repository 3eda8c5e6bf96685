//! Gatehouse: a multi-tenant gateway between AI agents and the tools they use, with all
//! state in PostgreSQL so any number of identical replicas can serve.
#![forbid(unsafe_code)]

pub mod admin_log;
pub mod config;
pub mod db;
pub mod error;
pub mod http;
pub mod kv;
pub mod server;
pub mod telemetry;
pub mod tenants;

use std::sync::Arc;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    pub db: db::Db,
    pub config: Arc<config::Config>,
}
