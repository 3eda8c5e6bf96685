//! Gatehouse: a multi-tenant gateway between AI agents and the tools they use, with all
//! state in PostgreSQL so any number of identical replicas can serve.
#![forbid(unsafe_code)]

pub mod admin_log;
pub mod approvals;
pub mod auth;
pub mod blueprints;
pub mod cli;
pub mod code;
pub mod config;
pub mod connect_links;
pub mod console;
pub mod copies;
pub mod db;
pub mod dev_idp;
pub mod doctor;
pub mod epochs;
pub mod erasure;
pub mod error;
pub mod extract;
pub mod findings;
pub mod forks;
pub mod gateway;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod impersonation;
pub mod kv;
pub mod maps;
pub mod mcp_auth;
pub mod members;
pub mod metrics;
pub mod oauth;
pub mod oidc;
pub mod openapi;
pub mod ops;
pub mod pages;
pub mod peers;
pub mod quotas;
pub mod reap;
pub mod reports;
pub mod scim;
pub mod secrets;
pub mod server;
pub mod service_credentials;
pub mod sessions;
pub mod snapshots;
pub mod sso;
pub mod telemetry;
pub mod tenant_moves;
pub mod tenants;
pub mod tokens;
pub mod vault;
pub mod workspaces;

use std::sync::Arc;

/// What every handler can reach: one reference-counted [`Services`], so the clones axum and
/// the handlers make per request cost one count, not one per service.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> Self {
        AppState(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The replica's services (see [`AppState`]).
#[derive(Debug)]
pub struct Services {
    pub db: db::Db,
    pub config: Arc<config::Config>,
    /// Signs people in (through the configured provider, or the development one).
    pub rp: Arc<oidc::RelyingParty>,
    /// Tenants' own OpenID connections' relying parties (issue 22), by connection.
    pub sso: Arc<oidc::tenant::Parties>,
    /// The built-in development provider, when active.
    pub dev_idp: Option<Arc<dev_idp::DevIdp>>,
    /// Sessions and catalogs of downstream MCP servers (this replica's).
    pub downstreams: Arc<gateway::downstream::Downstreams>,
    /// Handshake-era agents' log levels, as this replica last read them.
    pub log_levels: Arc<gateway::log_levels::LogLevels>,
    /// Queues activity rows for the background writer.
    pub activity: gateway::activity::Recorder,
    /// Queues ops failures for the background writer.
    pub ops: ops::Recorder,
    /// Machine authentications this replica derived, labelled with their tenant's epoch.
    pub machines: Arc<epochs::Cache<[u8; 32], auth::MachineRow>>,
    /// MCP clients' OAuth access tokens this replica checked (by tenant slug and token
    /// digest), labelled the same way; expiry is checked on every hit.
    pub mcp_tokens: Arc<epochs::Cache<(String, Vec<u8>), mcp_auth::Checked>>,
    /// Workspaces' bound configurations, labelled the same way.
    pub bound: Arc<epochs::Cache<(ids::TenantId, String), Arc<workspaces::Bound>>>,
    /// Where peer connectors lead (tenant, calling workspace, connector, blueprint), labelled
    /// the same way: bindings, workspaces and their blueprints all move the epoch.
    pub peers: Arc<epochs::Cache<peers::ResolutionKey, Arc<peers::Resolution>>>,
    /// Sealed credential slots (never their plaintext), labelled the same way.
    pub credentials: Arc<epochs::Cache<gateway::credentials::SlotKey, Arc<Option<vault::slots::Stored>>>>,
    /// Runs `execute_code` programs (this replica's slots and queue).
    pub code: Arc<code::Executor>,
    /// Downstream OAuth: its HTTP client and the grants this replica read (sealed), by epoch.
    pub oauth: Arc<oauth::Oauth>,
    /// This replica's leases of the tenants' quota budgets (issue 23).
    pub quotas: Arc<quotas::Budgets>,
    /// SMTP delivery, when `GATEHOUSE_SMTP_URL` is set.
    pub mailer: Option<Arc<connect_links::mail::Mailer>>,
}

/// Installs the process-wide TLS crypto provider (ring). reqwest is built without one, so
/// this must run before the first client is built; later calls do nothing.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
