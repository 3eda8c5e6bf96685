//! The notifications that belong to no request: the endpoint's GET stream (handshake era) and
//! a `subscriptions/listen` request's response stream (2026-07-28, which has no GET stream).
//! That is a native pool's list changes (tools, prompts, resources: a downstream said so, or a
//! workspace's configuration or grants changed what this caller sees), and on 2026-07-28 the
//! updates of the resources the request subscribed to. On 2026-07-28 the stream opens with
//! `notifications/subscriptions/acknowledged` naming what of the request's filter is honoured
//! (list changes and resources), and every notification on it carries the request's
//! id as `_meta["io.modelcontextprotocol/subscriptionId"]`; at shutdown it ends with the
//! request's `complete` result.
//!
//! The endpoint stays stateless. The session id it gives at `initialize` ([`SESSION_ID`],
//! made by [`super::asks::session_id`]) names the agent's connection and what it declared,
//! and is not looked up anywhere: any replica serves the GET
//! stream, and the stream learns of changes the way every replica does, from the tenant's
//! epoch (one shared, batched primary-key read per [`POLL`]). When the epoch moves, the
//! stream derives what the caller sees again and says `list_changed` only if it differs.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::GatewayCtx;
use crate::AppState;

mod request;
pub use request::subscription;

/// The header a handshake-era `initialize` answer carries.
pub const SESSION_ID: &str = "mcp-session-id";

/// The session id a handshake-era request presents, if any.
pub fn session_id(headers: &axum::http::HeaderMap) -> Option<&str> {
    // By its parsed name: a lookup by text parses the name first, on every request.
    const NAME: axum::http::HeaderName = axum::http::HeaderName::from_static(SESSION_ID);
    headers.get(NAME).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty())
}
/// How often an open stream asks for its tenant's epoch.
const POLL: Duration = Duration::from_secs(2);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Set at shutdown: open streams end, so the drain does not wait on them.
static CLOSED: AtomicBool = AtomicBool::new(false);
static CLOSING: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Ends every GET stream of this process (graceful shutdown: they would hold the drain open).
pub fn close_all() {
    CLOSED.store(true, Ordering::SeqCst);
    CLOSING.notify_waiters();
}

/// The lists whose changes a stream tells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lists {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Lists {
    const ALL: Lists = Lists { tools: true, prompts: true, resources: true };

    /// What of `self` can be honoured where `capabilities` are declared (a native pool's).
    fn honoured(self, capabilities: &Value) -> Lists {
        let declared = |name: &str| capabilities[name]["listChanged"] == true;
        Lists {
            tools: self.tools && declared("tools"),
            prompts: self.prompts && declared("prompts"),
            resources: self.resources && declared("resources"),
        }
    }

    fn any(self) -> bool {
        self.tools || self.prompts || self.resources
    }
}

/// One list a caller sees, as a digest of what it shows, so a change is told only when what
/// the caller sees changed: the native pool's tools with their annotations, its prompts, its
/// resources and resource templates. The six-tool surface's list never changes.
#[derive(Default, PartialEq, Eq)]
struct Seen {
    tools: Option<[u8; 32]>,
    prompts: Option<[u8; 32]>,
    resources: Option<[u8; 32]>,
}

fn digest(value: &impl serde::Serialize) -> Option<[u8; 32]> {
    Some(Sha256::digest(serde_json::to_vec(value).unwrap_or_default()).into())
}

async fn seen_tools(state: &AppState, ctx: &GatewayCtx) -> Option<[u8; 32]> {
    // A list answered as an error (a credential needing a person) digests apart from every
    // list, so the connector's repair is told as a change.
    digest(&Box::pin(super::surface::native_tools(state, ctx)).await.ok().map(|(tools, _)| tools))
}

async fn seen_prompts(state: &AppState, ctx: &GatewayCtx) -> Option<[u8; 32]> {
    digest(&Box::pin(super::surface::native_list(state, ctx, "prompts/list", "prompts", false)).await)
}

async fn seen_resources(state: &AppState, ctx: &GatewayCtx) -> Option<[u8; 32]> {
    let resources = Box::pin(super::surface::native_list(state, ctx, "resources/list", "resources", false)).await;
    let templates =
        Box::pin(super::surface::native_list(state, ctx, "resources/templates/list", "resourceTemplates", false)).await;
    digest(&(resources, templates))
}

/// The digests of the lists in `lists`.
async fn seen(state: &AppState, ctx: &GatewayCtx, lists: Lists) -> Seen {
    Seen {
        tools: if lists.tools { seen_tools(state, ctx).await } else { None },
        prompts: if lists.prompts { seen_prompts(state, ctx).await } else { None },
        resources: if lists.resources { seen_resources(state, ctx).await } else { None },
    }
}

/// The configuration a stream last saw, as a digest: prompts and resources are asked of the
/// downstreams again only when it changed (a tenant's epoch moves for any of its writes).
fn configuration(ctx: &GatewayCtx) -> Option<[u8; 32]> {
    digest(&ctx.bound.document)
}

/// The caller's context under the workspace's current configuration; `None` when the
/// workspace or the pool is gone (or no longer active): the stream then ends.
async fn current(state: &AppState, ctx: &GatewayCtx, epoch: i64) -> Option<GatewayCtx> {
    let key = (ctx.tenant.id, ctx.bound.workspace.slug.clone());
    let bound = match state.bound.get(&key) {
        Some((bound, label)) if label == epoch => bound,
        _ => {
            let bound = std::sync::Arc::new(crate::workspaces::bound(&state.db, ctx.tenant.id, &key.1).await.ok()?);
            super::surface::configured(state, ctx.tenant.id, &bound);
            state.bound.put(key, bound.clone(), bound.epoch);
            bound
        }
    };
    if bound.workspace.status != "active" {
        return None;
    }
    let pool = match &ctx.pool {
        None => None,
        Some((name, _)) => Some((name.clone(), bound.document.pools.get(name)?.clone())),
    };
    Some(GatewayCtx { bound, pool, ..ctx.clone() })
}

/// The `_meta` key naming the subscription a notification belongs to (2026-07-28).
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Which stream this is: the handshake era's GET stream, or the response stream of a
/// `subscriptions/listen` request (its id; the list changes it asked for).
#[derive(Clone)]
pub enum Listener {
    /// `session`: the listener of the agent's session ([`super::subscriptions`]), whose
    /// resource subscriptions the stream hears; none without a session id.
    Get { session: Option<[u8; 32]> },
    /// `uris`: the resources whose updates it asked for.
    Subscription { id: Value, lists: Lists, uris: Vec<String> },
}

impl Listener {
    /// One notification as an event, tagged with the subscription it belongs to.
    fn event(&self, method: &str, mut params: Value) -> Bytes {
        if let Listener::Subscription { id, .. } = self {
            params["_meta"] = json!({ SUBSCRIPTION_ID: id });
        }
        let message = match params.as_object().is_some_and(|p| p.is_empty()) {
            true => json!({ "jsonrpc": "2.0", "method": method }),
            false => json!({ "jsonrpc": "2.0", "method": method, "params": params }),
        };
        Bytes::from(format!("event: message\ndata: {message}\n\n"))
    }

    /// The list changes asked for: a GET stream gets all there are.
    fn lists(&self) -> Lists {
        match self {
            Listener::Get { .. } => Lists::ALL,
            Listener::Subscription { lists, .. } => *lists,
        }
    }

    /// The resources whose updates it asked for: a subscription's filter, or what the agent's
    /// session subscribed to (kept for every replica; `None`: it could not be read now).
    async fn uris(&self, state: &AppState, ctx: &GatewayCtx) -> Option<Vec<String>> {
        match self {
            Listener::Get { session: None } => Some(Vec::new()),
            Listener::Get { session: Some(listener) } => {
                match super::subscriptions::uris(&state.db, ctx.tenant.id, listener).await {
                    Ok(uris) => Some(uris),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read a session's resource subscriptions");
                        None
                    }
                }
            }
            Listener::Subscription { uris, .. } => Some(uris.clone()),
        }
    }

    /// What the stream says first: the acknowledgement of a subscription, naming what of its
    /// filter is honoured (`lists`, and the resources subscribed in `ears`).
    fn opening(&self, lists: Lists, ears: &Ears) -> Option<Bytes> {
        let Listener::Subscription { uris, .. } = self else { return None };
        let mut honoured = json!({});
        for (name, on) in
            [("toolsListChanged", lists.tools), ("promptsListChanged", lists.prompts), ("resourcesListChanged", lists.resources)]
        {
            if on {
                honoured[name] = Value::Bool(true);
            }
        }
        if !uris.is_empty() {
            honoured["resourceSubscriptions"] = json!(uris.iter().filter(|u| ears.subscribed(u)).collect::<Vec<_>>());
        }
        Some(self.event("notifications/subscriptions/acknowledged", json!({ "notifications": honoured })))
    }

    /// What the stream says last when the server ends it: a subscription's final result.
    fn closing(&self) -> Option<Bytes> {
        let Listener::Subscription { id, .. } = self else { return None };
        let result = json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } });
        Some(Bytes::from(format!("event: message\ndata: {}\n\n", json!({ "jsonrpc": "2.0", "id": id, "result": result }))))
    }
}

/// How long a new stream waits for the downstreams' own streams to open before it is
/// acknowledged, so a change made right after the acknowledgement is heard.
const WATCH_READY: Duration = Duration::from_secs(2);

/// What a stream listens to: the downstreams' watches, each heard change sent on as
/// `(connector id, what)`; a watch that lagged is heard as every list having changed.
struct Ears {
    watches: Vec<(String, std::sync::Arc<super::downstream::Watch>)>,
    /// The resources subscribed for this stream, by connector, held while the stream lives.
    subscribed: Vec<(String, Vec<String>)>,
    _wanting: Vec<super::downstream::Wanting>,
    _forwarders: tokio::task::JoinSet<()>,
    rx: tokio::sync::mpsc::Receiver<(String, Option<super::downstream::Heard>)>,
}

impl Ears {
    /// Listens to the pool's downstreams for `lists`, and subscribes `uris` at those that
    /// hold subscriptions for this caller.
    async fn open(state: &AppState, ctx: &GatewayCtx, lists: Lists, uris: &[String]) -> Ears {
        let wants = if uris.is_empty() { Vec::new() } else { super::surface::subscribable(state, ctx, uris).await };
        let watches =
            if lists.any() || !wants.is_empty() { super::surface::native_watches(state, ctx).await } else { Vec::new() };
        let (mut subscribed, mut wanting) = (Vec::new(), Vec::new());
        for (id, uris) in &wants {
            if let Some((_, watch)) = watches.iter().find(|(i, _)| i == id) {
                let (held, taken) = watch.want(uris, WATCH_READY).await;
                wanting.push(held);
                subscribed.push((id.clone(), taken));
            }
        }
        futures::future::join_all(watches.iter().map(|(_, w)| w.ready(WATCH_READY))).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut forwarders = tokio::task::JoinSet::new();
        for (id, watch) in &watches {
            let (id, tx, mut heard) = (id.clone(), tx.clone(), watch.subscribe());
            forwarders.spawn(async move {
                loop {
                    let what = match heard.recv().await {
                        Ok(what) => Some(what),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    };
                    if tx.send((id.clone(), what)).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ears { watches, subscribed, _wanting: wanting, _forwarders: forwarders, rx }
    }

    /// Whether `uri` is subscribed for this stream at some connector.
    fn subscribed(&self, uri: &str) -> bool {
        self.subscribed.iter().any(|(_, uris)| uris.iter().any(|u| u == uri))
    }

    /// Whether an update of `uri` heard from connector `id` is this stream's: the resource
    /// subscribed, or one under it (the protocol lets a server name a sub-resource), which the
    /// caller may see.
    fn wants_update(&self, ctx: &GatewayCtx, id: &str, uri: &str) -> bool {
        self.subscribed.iter().any(|(i, uris)| i == id && uris.iter().any(|u| uri == u || uri.starts_with(u.as_str())))
            && super::surface::may_see_resource(ctx, id, uri)
    }

    fn watch(&self, id: &str) -> Option<&super::downstream::Watch> {
        self.watches.iter().find(|(i, _)| i == id).map(|(_, w)| &**w)
    }
}

/// The GET stream, or a subscription's response stream, for this caller.
pub fn stream(state: AppState, ctx: GatewayCtx, listener: Listener) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        // List changes are told on a native pool only (the six-tool surface's list never
        // changes), for the lists it declares changes of.
        let native = ctx.pool.as_ref().is_some_and(|(_, p)| p.native);
        let capabilities = match native {
            true => Box::pin(super::surface::native_server(&state, &ctx)).await.0,
            false => Value::Null,
        };
        let lists = if native { listener.lists().honoured(&capabilities) } else { Lists::default() };
        // A session's subscriptions are read again with every poll (they are made on any
        // replica), where the pool takes subscriptions at all.
        let sessions = matches!(listener, Listener::Get { session: Some(_) }) && capabilities["resources"]["subscribe"] == true;
        let reads_uris = native && (sessions || !matches!(listener, Listener::Get { .. }));
        let mut uris = if reads_uris { listener.uris(&state, &ctx).await.unwrap_or_default() } else { Vec::new() };
        let mut ears = Ears::open(&state, &ctx, lists, &uris).await;
        let mut ctx = ctx;
        let mut epoch = ctx.bound.epoch;
        if let Some(opening) = listener.opening(lists, &ears)
            && tx.send(opening).await.is_err()
        {
            return;
        }
        let mut last = seen(&state, &ctx, lists).await;
        let mut configured = configuration(&ctx);
        let mut quiet = Duration::ZERO;
        loop {
            let closing = CLOSING.notified();
            let mut heard = None;
            let shutting_down = CLOSED.load(Ordering::SeqCst)
                || tokio::select! {
                    _ = tx.closed() => return,
                    _ = closing => true,
                    _ = tokio::time::sleep(POLL) => false,
                    Some(h) = ears.rx.recv() => { heard = Some(h); false }
                };
            if shutting_down {
                if let Some(last) = listener.closing() {
                    let _ = tx.send(last).await;
                }
                return;
            }
            let now = match heard {
                Some(_) => epoch,
                None => {
                    quiet += POLL;
                    if sessions
                        && let Some(now) = listener.uris(&state, &ctx).await
                        && now != uris
                    {
                        uris = now;
                        ears = Ears::open(&state, &ctx, lists, &uris).await;
                    }
                    match crate::epochs::read(&state.db, ctx.tenant.id).await {
                        Ok(Some(now)) => now,
                        _ => continue,
                    }
                }
            };
            // What to look at again: what a downstream said changed, or, when the tenant's
            // epoch moved, the tools (grants, catalogs) and, if the configuration changed,
            // everything.
            // A subscribed resource's update is passed on as it is: no list to look at.
            if let Some((id, Some(super::downstream::Heard::Updated(uri)))) = &heard {
                if ears.wants_update(&ctx, id, uri)
                    && tx.send(listener.event("notifications/resources/updated", json!({ "uri": uri }))).await.is_err()
                {
                    return;
                }
                quiet = Duration::ZERO;
                continue;
            }
            let again = match heard {
                Some((id, what)) => {
                    if matches!(what, None | Some(super::downstream::Heard::Tools))
                        && let Some(watch) = ears.watch(&id)
                    {
                        watch.refresh_tools(super::surface::native_refresh(&state, &ctx, &id)).await;
                    }
                    match what {
                        None => lists,
                        Some(super::downstream::Heard::Tools) => Lists { tools: lists.tools, ..Lists::default() },
                        Some(super::downstream::Heard::Prompts) => Lists { prompts: lists.prompts, ..Lists::default() },
                        Some(super::downstream::Heard::Resources) => Lists { resources: lists.resources, ..Lists::default() },
                        Some(super::downstream::Heard::Updated(_)) => Lists::default(),
                    }
                }
                None if now != epoch => {
                    let Some(fresh) = current(&state, &ctx, now).await else { return };
                    (ctx, epoch) = (fresh, now);
                    let now_configured = configuration(&ctx);
                    if now_configured != configured {
                        configured = now_configured;
                        ears = Ears::open(&state, &ctx, lists, &uris).await;
                        lists
                    } else {
                        Lists { tools: lists.tools, ..Lists::default() }
                    }
                }
                None => {
                    if quiet >= KEEP_ALIVE {
                        if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                            return;
                        }
                        quiet = Duration::ZERO;
                    }
                    continue;
                }
            };
            let fresh = seen(&state, &ctx, again).await;
            for (changed, method) in [
                (again.tools && fresh.tools != last.tools, "notifications/tools/list_changed"),
                (again.prompts && fresh.prompts != last.prompts, "notifications/prompts/list_changed"),
                (again.resources && fresh.resources != last.resources, "notifications/resources/list_changed"),
            ] {
                if changed && tx.send(listener.event(method, json!({}))).await.is_err() {
                    return;
                }
            }
            if again.tools {
                last.tools = fresh.tools;
            }
            if again.prompts {
                last.prompts = fresh.prompts;
            }
            if again.resources {
                last.resources = fresh.resources;
            }
            // Says the change was looked at (a comment: clients ignore it).
            if tx.send(Bytes::from_static(b": checked\n\n")).await.is_err() {
                return;
            }
            quiet = Duration::ZERO;
        }
    });
    let events =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, std::convert::Infallible>(e), rx)) });
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(events),
    )
        .into_response()
}
