//! Downstreams: MCP servers over streamable HTTP or legacy HTTP+SSE ([`session`]), and HTTP
//! APIs described as data ([`super::http_api_connector`]). Catalogs are shared
//! by every replica through PostgreSQL (see [`super::catalogs`]) and held in memory while the
//! shared cache says they are current. Every call runs under its connector's deadline, so a
//! dead or slow downstream gives a typed, retryable error instead of a hang.

mod failure;
mod modern;
mod pool;
mod session;
mod watch;

use failure::cap;
pub use failure::{ERROR_DATA_CAP, Failure};
pub use modern::request_meta;
pub use watch::{Heard, Wanting, Watch};

use std::{sync::Arc, time::Duration};

use crate::maps::FastMap;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use self::pool::Lease;
use self::session::SessionError;
use super::catalogs::{self, Catalog, Listing, Target};
use super::credentials::Credential;
use super::mcp_client::MAX_TOOLS;
use crate::{
    db::Db,
    workspaces::{CATALOG_TTL, Connector},
};

/// Catalogs kept per replica before they are all dropped.
const MAX_CATALOGS: usize = 1024;

/// The longest tool description a catalog may carry, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

/// Refuses a catalog that no agent could use and no replica should hold: too many tools, or a
/// description of absurd size. Both mark a broken or hostile server; a part of its catalog
/// would be a guess at what it meant.
fn within_bounds(tools: &[Tool]) -> Result<(), Failure> {
    if tools.len() > MAX_TOOLS {
        return Err(Failure::Rejected(format!("the tool list has {} tools, more than {MAX_TOOLS}", tools.len())));
    }
    match tools.iter().find(|t| t.description.as_ref().is_some_and(|d| d.len() > MAX_DESCRIPTION_BYTES)) {
        Some(t) => Err(Failure::Rejected(format!(
            "tool `{}` has a description larger than {} KiB",
            cap(&t.name),
            MAX_DESCRIPTION_BYTES / 1024
        ))),
        None => Ok(()),
    }
}

/// A tool's compiled input schema, or why it does not compile.
type CompiledSchema = Result<Arc<jsonschema::Validator>, Arc<str>>;

/// A tool's input schema compiled for checking arguments.
fn compile(tool: &Tool) -> CompiledSchema {
    let schema = serde_json::Value::Object((*tool.input_schema).clone());
    jsonschema::validator_for(&schema).map(Arc::new).map_err(|e| cap(&e.to_string()).into())
}

/// Up to three issues of `args` under a compiled schema (instance path and message); none when
/// they are valid.
fn issues(validator: &jsonschema::Validator, args: &serde_json::Value) -> Vec<(String, String)> {
    // The common case, valid arguments, without building the error iterator.
    if validator.is_valid(args) {
        return Vec::new();
    }
    validator.iter_errors(args).take(3).map(|e| (e.instance_path().to_string(), cap(&e.to_string()))).collect()
}

/// The argument check, reached by the fuzz targets (`fuzz/`) only.
#[doc(hidden)]
pub mod fuzzing {
    /// Compiles `schema` as a tool's input schema (`Err`: why it does not compile), then checks
    /// `args` against it as [`super::Downstreams::validate`] does.
    pub fn check(schema: rmcp::model::JsonObject, args: &serde_json::Value) -> Result<Vec<(String, String)>, String> {
        let tool = rmcp::model::Tool::new("fuzz", "", std::sync::Arc::new(schema));
        let validator = super::compile(&tool).map_err(|e| e.to_string())?;
        Ok(super::issues(&validator, args))
    }
}

/// An HTTP API's catalog: its configuration, fresh until the gateway's own refresh (a change
/// of configuration is announced to listening agents).
fn configured(api: &crate::workspaces::config::http_api_description::HttpApi) -> Catalog {
    let listing = Listing { ttl_ms: Some(CATALOG_TTL.as_millis() as u64), ..Listing::default() };
    Catalog { tools: super::http_api_connector::catalog(api), fetched_at: None, listing }
}

/// The key of a session or catalog: who it serves and exactly which configuration.
pub fn key(tenant: uuid::Uuid, workspace: uuid::Uuid, connector_id: &str, connector: &Connector) -> String {
    let config = serde_json::to_vec(connector).unwrap_or_default();
    format!("{tenant}/{workspace}/{connector_id}/{}", hex::encode(&Sha256::digest(&config)[..8]))
}

/// The configuration digest at the end of a [`key`].
pub fn config_key(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

#[derive(Default)]
pub struct Downstreams {
    http: Option<crate::gateway::outbound::Outbound>,
    /// Downstream calls one tenant may have in flight on this replica, so one tenant's slow
    /// downstream cannot take every connection and task from the others.
    per_tenant: usize,
    limits: std::sync::Mutex<FastMap<uuid::Uuid, Arc<tokio::sync::Semaphore>>>,
    /// Downstream sessions, pooled per connector configuration and credential.
    pools: pool::Pools,
    catalogs: Mutex<FastMap<String, Arc<Catalog>>>,
    /// Compiled input schemas, per catalog key and then tool; dropped with their catalog.
    validators: std::sync::Mutex<FastMap<String, FastMap<String, CompiledSchema>>>,
    /// Per catalog key, whether the server speaks 2026-07-28, and then its `server/discover`
    /// result (see [`modern`]).
    revisions: std::sync::Mutex<FastMap<String, Option<Arc<serde_json::Value>>>>,
    /// Per catalog key of a 2026-07-28 server, whether it refused the handshake (then it is
    /// spoken to only in its own revision; see [`Downstreams::stateless_only`]).
    handshake_refused: std::sync::Mutex<FastMap<String, bool>>,
    /// Downstreams listened to for what they say outside any request ([`watch`]).
    watches: watch::Watches,
    /// Downstreams' requests to agents, waiting for their answers (handshake era).
    pub asks: super::asks::Mailbox,
}

impl std::fmt::Debug for Downstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Downstreams")
    }
}

impl Downstreams {
    pub fn new(http: crate::gateway::outbound::Outbound, per_tenant: usize, sessions: crate::config::SessionsConfig) -> Self {
        Downstreams { http: Some(http), per_tenant, pools: pool::Pools::new(sessions), ..Default::default() }
    }

    /// A session for one request ([`pool`]); `own`: for this request alone, because the
    /// downstream may send it requests for the agent.
    async fn lease(
        &self,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
        own: bool,
    ) -> Result<Lease, Failure> {
        self.pools.lease(self.http.as_ref(), key, connector, credential, own).await
    }

    /// Closes the session pools of the workspace's connectors that are not configured as
    /// `current` (their configuration keys) any more: their sessions are deleted at the
    /// downstream once no request uses them.
    pub fn retire(&self, tenant: uuid::Uuid, workspace: uuid::Uuid, current: &[&str]) {
        self.pools.retire(tenant, workspace, current);
    }

    /// A slot of the tenant's share, or `RateLimited` at once (never a queue).
    fn admit(&self, tenant: uuid::Uuid) -> Result<tokio::sync::OwnedSemaphorePermit, Failure> {
        let semaphore = {
            let mut limits = self.limits.lock().unwrap_or_else(|p| p.into_inner());
            limits.entry(tenant).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_tenant))).clone()
        };
        semaphore.try_acquire_owned().map_err(|_| Failure::RateLimited)
    }

    fn remember(&self, key: &str, catalog: Arc<Catalog>) -> impl Future<Output = ()> + '_ {
        let key = key.to_owned();
        async move {
            let mut catalogs = self.catalogs.lock().await;
            if catalogs.len() >= MAX_CATALOGS {
                catalogs.clear();
            }
            catalogs.insert(key.clone(), catalog);
            drop(catalogs);
            self.validators.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        }
    }

    /// The connector's tools. An HTTP API's come from its configuration. An MCP server's come
    /// from this replica's memory when the shared cache says that copy is current (`stamp`,
    /// read with the request's configuration), else from the shared cache, else from the
    /// server itself, stored for every replica.
    #[tracing::instrument(name = "downstream::catalog", skip_all, fields(tenant = %target.tenant, workspace = %target.workspace, connector = target.connector_id))]
    pub async fn catalog(
        &self,
        db: &Db,
        target: Target<'_>,
        key: &str,
        stamp: Option<&(String, chrono::DateTime<chrono::Utc>)>,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<Arc<Catalog>, Failure> {
        if let Connector::HttpApi(api) = connector {
            if let Some(held) = self.catalogs.lock().await.get(key) {
                return Ok(held.clone());
            }
            let catalog = Arc::new(configured(api));
            self.remember(key, catalog.clone()).await;
            return Ok(catalog);
        }
        // The stamp may come from a configuration this replica has held for a while.
        let fresh = |at: &chrono::DateTime<chrono::Utc>| {
            chrono::Utc::now().signed_duration_since(*at).to_std().map_or(true, |age| age < CATALOG_TTL)
        };
        if let Some((_, at)) = stamp.filter(|(k, at)| k == target.config_key && fresh(at)) {
            if let Some(held) = self.catalogs.lock().await.get(key)
                && held.fetched_at.as_ref() == Some(at)
            {
                return Ok(held.clone());
            }
            // Boxed, as is the fetch: the rare paths' futures stay out of every call's.
            match Box::pin(catalogs::load(db, target)).await {
                Ok(Some(stored)) => {
                    let stored = Arc::new(stored);
                    self.remember(key, stored.clone()).await;
                    return Ok(stored);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "could not read the shared catalog cache; asking the server"),
            }
        }
        Box::pin(self.fetch(db, target, key, connector, credential, None)).await
    }

    /// Asks the server for its catalog now and stores it for every replica (`audit`: an
    /// operator asked, and the admin log records it). A server that speaks 2026-07-28 is
    /// listed in that revision, with its caching hints; any other through the handshake, in
    /// the revision the handshake agreed.
    #[tracing::instrument(name = "downstream::fetch", skip_all, fields(tenant = %target.tenant, workspace = %target.workspace, connector = target.connector_id))]
    pub async fn fetch(
        &self,
        db: &Db,
        target: Target<'_>,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
        audit: Option<&crate::admin_log::Audit>,
    ) -> Result<Arc<Catalog>, Failure> {
        if let Connector::HttpApi(api) = connector {
            return Ok(Arc::new(configured(api)));
        }
        let deadline = Duration::from_millis(connector.timeout_ms());
        // Each stateless request takes its own slot.
        if self.modern(target.tenant.0, key, connector, credential).await? {
            let (tools, ttl_ms, private) =
                match tokio::time::timeout(deadline, self.list_modern(target.tenant.0, connector, credential)).await {
                    Ok(listed) => listed?,
                    Err(_) => return Err(Failure::Timeout(deadline.as_millis() as u64)),
                };
            within_bounds(&tools)?;
            let listing = Listing { revision: Some(modern::REVISION.to_owned()), ttl_ms: Some(ttl_ms), private };
            return self.store(db, target, key, &tools, listing, audit).await;
        }
        let _slot = self.admit(target.tenant.0)?;
        let listed = tokio::time::timeout(deadline, async {
            let lease = self.lease(key, connector, credential, false).await.map_err(SessionError::opening)?;
            let listed = match settle(lease.session.list_tools().await, &lease) {
                Err(SessionError::Gone) => {
                    lease.discard();
                    let lease = self.lease(key, connector, credential, false).await.map_err(SessionError::opening)?;
                    return settle(lease.session.list_tools().await, &lease).map(|tools| (tools, lease.session.revision()));
                }
                other => other,
            };
            listed.map(|tools| (tools, lease.session.revision()))
        });
        let (tools, revision) = match listed.await {
            Ok(Ok(listed)) => listed,
            Ok(Err(e)) => return Err(e.into_failure()),
            Err(_) => return Err(Failure::Timeout(deadline.as_millis() as u64)),
        };
        within_bounds(&tools)?;
        self.store(db, target, key, &tools, Listing { revision, ..Listing::default() }, audit).await
    }

    /// Stores a fetched catalog for every replica, and remembers what is served of it.
    async fn store(
        &self,
        db: &Db,
        target: Target<'_>,
        key: &str,
        tools: &[Tool],
        listing: Listing,
        audit: Option<&crate::admin_log::Audit>,
    ) -> Result<Arc<Catalog>, Failure> {
        // What is served is what the pins allow, decided with the stored catalog: a catalog
        // that cannot be checked against its pins is not served (fail closed).
        let catalog = match catalogs::store(db, target, tools, &listing, audit).await {
            Ok(stored) => Arc::new(stored),
            Err(e) => {
                tracing::warn!(error = %e, "could not store a catalog in the shared cache");
                return Err(Failure::Unavailable(format!("could not check the catalog against its pinned definitions: {e}")));
            }
        };
        self.remember(key, catalog.clone()).await;
        Ok(catalog)
    }

    /// Checks `args` against the tool's input schema before any downstream call. Returns up
    /// to three issues (instance path and message), or, when the tool's own schema does not
    /// compile, why: such a tool is not called (fail closed), since nothing can say which
    /// arguments it accepts.
    pub fn validate(&self, key: &str, tool: &Tool, args: &serde_json::Value) -> Result<Vec<(String, String)>, Failure> {
        let validator = {
            let mut cache = self.validators.lock().unwrap_or_else(|p| p.into_inner());
            match cache.get(key).and_then(|tools| tools.get(tool.name.as_ref())) {
                Some(compiled) => compiled.clone(),
                None => {
                    let compiled = compile(tool);
                    cache.entry(key.to_owned()).or_default().insert(tool.name.to_string(), compiled.clone());
                    compiled
                }
            }
        };
        let validator = validator.map_err(|e| {
            Failure::Rejected(format!("the tool's input schema is not a valid JSON Schema ({e}); it was not called"))
        })?;
        Ok(issues(&validator, args))
    }

    /// Calls one tool under the connector's deadline. A broken session is dropped so the
    /// next call reconnects.
    #[tracing::instrument(name = "downstream::call", skip_all, fields(tenant = %tenant, tool = call.tool))]
    pub async fn call(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        call: ToolCall<'_>,
        credential: Option<&Credential>,
    ) -> Result<CallToolResult, Failure> {
        let ToolCall { tool, args, schema, upstream } = call;
        let _slot = self.admit(tenant)?;
        let deadline = Duration::from_millis(connector.timeout_ms());
        if let Connector::HttpApi(api) = connector {
            let http = self.http.as_ref().ok_or_else(|| Failure::Unavailable("no HTTP client".into()))?;
            let called = Box::pin(super::http_api_connector::call(http.general(), api, tool, args, credential));
            return match tokio::time::timeout(deadline, called).await {
                Ok(result) => result,
                Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
            };
        }
        // A 2026-07-28 server that refuses the handshake is called in its own revision (a
        // 2026-07-28 agent's calls come through `input::relay` instead, with the agent's
        // capabilities).
        if self.stateless_only(tenant, key, connector, credential).await? {
            drop(_slot);
            let params = serde_json::json!({ "name": tool, "arguments": args });
            let headers = schema.map(|schema| super::param_headers::compute(schema, args)).unwrap_or_default();
            let called =
                self.request_modern(tenant, connector, credential, ("tools/call", Some(tool), &headers), params, upstream);
            return serde_json::from_value(Box::pin(called).await?)
                .map_err(|e| Failure::Unavailable(format!("a malformed tool result: {}", cap(&e.to_string()))));
        }
        // A call the downstream may ask the agent about holds a session of its own.
        let own = upstream.is_some_and(super::upstream::Upstream::can_ask);
        let called = tokio::time::timeout(deadline, async {
            let lease = self.lease(key, connector, credential, own).await.map_err(SessionError::opening)?;
            match settle(lease.session.call_tool(tool, args, upstream).await, &lease) {
                // The server forgot the session without processing the call: safe to send again.
                Err(SessionError::Gone) => {
                    lease.discard();
                    let lease = self.lease(key, connector, credential, own).await.map_err(SessionError::opening)?;
                    settle(lease.session.call_tool(tool, args, upstream).await, &lease)
                }
                other => other,
            }
        });
        match called.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(e.into_failure()),
            Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
        }
    }
}

/// One tool call as the downstream gets it: the tool, its arguments, and the agent's response
/// stream while it runs (its progress token goes down, its notifications come back).
#[derive(Clone, Copy)]
pub struct ToolCall<'a> {
    pub tool: &'a str,
    pub args: &'a JsonObject,
    /// The tool's input schema, whose `x-mcp-header` arguments go down as `Mcp-Param-*`
    /// headers to a 2026-07-28 server.
    pub schema: Option<&'a JsonObject>,
    pub upstream: Option<&'a super::upstream::Upstream>,
}

impl Downstreams {
    /// Relays one request other than tools (prompts, resources, completion, logging) to an
    /// MCP connector under its deadline; a session the server forgot is opened once more.
    /// `request`: the method and its params. With `upstream` (the agent's response stream,
    /// handshake era), what the server sends on the request's stream reaches the agent: its
    /// progress and log notifications, and its sampling, elicitation and roots requests.
    #[tracing::instrument(name = "downstream::relay", skip_all, fields(tenant = %tenant, method = request.0))]
    pub async fn relay(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        request: (&str, &serde_json::Value),
        credential: Option<&Credential>,
        upstream: Option<&super::upstream::Upstream>,
    ) -> Result<serde_json::Value, Failure> {
        let (method, params) = request;
        if !matches!(connector, Connector::RemoteMcp { .. }) {
            return Err(Failure::Rejected("only an MCP connector has more than tools".into()));
        }
        if self.stateless_only(tenant, key, connector, credential).await? {
            return self.relay_modern(tenant, connector, credential, (method, params), upstream).await;
        }
        let _slot = self.admit(tenant)?;
        let deadline = Duration::from_millis(connector.timeout_ms());
        let own = upstream.is_some_and(super::upstream::Upstream::can_ask);
        let relayed = tokio::time::timeout(deadline, async {
            let lease = self.lease(key, connector, credential, own).await.map_err(SessionError::opening)?;
            match settle(lease.session.relay(method, params, upstream).await, &lease) {
                Err(SessionError::Gone) => {
                    lease.discard();
                    let lease = self.lease(key, connector, credential, own).await.map_err(SessionError::opening)?;
                    settle(lease.session.relay(method, params, upstream).await, &lease)
                }
                other => other,
            }
        });
        match relayed.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(e.into_failure()),
            Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
        }
    }

    /// What the MCP connector says of itself (capabilities, instructions): a 2026-07-28
    /// server's `server/discover` result, else the `initialize` result of its session; Null
    /// for a connector that is not an MCP server.
    pub async fn server_info(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<serde_json::Value, Failure> {
        if !matches!(connector, Connector::RemoteMcp { .. }) {
            return Ok(serde_json::Value::Null);
        }
        if self.modern(tenant, key, connector, credential).await?
            && let Some(discovered) = self.discovered(key)
        {
            return Ok((*discovered).clone());
        }
        Ok(self.lease(key, connector, credential, false).await?.session.server())
    }
}

/// Notes what a request on a lease says of its session: an answer (a result, or a JSON-RPC
/// error) keeps it trusted; a session the server forgot (`Gone`, answered by the caller
/// with a new lease) or a broken one is never handed out again.
fn settle<T>(result: Result<T, SessionError>, lease: &Lease) -> Result<T, SessionError> {
    match &result {
        Ok(_) | Err(SessionError::Failed { drop: false, .. }) => lease.answered(),
        Err(SessionError::Gone | SessionError::Failed { drop: true, .. }) => lease.kill(),
    }
    result
}
