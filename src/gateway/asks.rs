//! Requests from a downstream to the agent on the handshake era (sampling, elicitation,
//! `roots/list`): sent to the agent on the open call's response stream, answered by the agent
//! with a POST of its JSON-RPC response to the endpoint, on whichever replica its load
//! balancer picks.
//!
//! Nothing is written to the database for it. The request goes up under an id of the
//! gateway's own, [`PREFIX`] and a vault envelope (associated data: tenant and workspace) that
//! names the replica holding the call, a random key, the caller and an expiry. The replica that
//! gets the answer opens the id: another tenant's, another caller's, an expired or a forged id
//! answers 404, exactly like an unknown one. The holder is reached directly when it is this
//! replica, else by `NOTIFY` on [`CHANNEL`], which every replica that has a request waiting
//! `LISTEN`s on ([`Mailbox`]). The key is 128 random bits, so ids never collide across calls.
//!
//! What the agent declared at `initialize` travels in the session id the endpoint gave it
//! ([`Declared`]): a request the agent did not declare is refused to the downstream with
//! `-32601` (method not found), as the specification says a client without the capability
//! answers, and never relayed.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    http::{HeaderMap, StatusCode, request::Parts},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::{Executor, postgres::PgListener};

use super::GatewayCtx;
use crate::{
    AppState,
    vault::{Aad, Owner},
};

/// The start of every id the gateway gives a request it relays to the agent.
pub const PREFIX: &str = "gatehouse-ask:";
/// The channel answers are notified on between replicas (payload: `key json`).
pub const CHANNEL: &str = "gatehouse_agent_answers";
/// The vault's associated-data purpose of a relayed request's id.
const PURPOSE: &str = "agent_request";
/// `NOTIFY` payloads are limited to 8000 bytes; an answer larger than this between replicas is
/// refused (413) and the downstream told so.
const NOTIFY_CAP: usize = 7900;
/// How long an agent has to answer (the call's own deadline usually ends it sooner).
const TTL_SECS: i64 = 600;

/// What the agent declared at `initialize`, as the letters after the last `-` of its session
/// id: `s` sampling, `f` form elicitation, `u` URL elicitation, `r` roots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared(u8);

impl Declared {
    const SAMPLING: u8 = 1;
    const FORM: u8 = 2;
    const URL: u8 = 4;
    const ROOTS: u8 = 8;

    /// From an `initialize` request's body.
    pub fn of_initialize(body: &[u8]) -> Declared {
        #[derive(Deserialize)]
        struct Init {
            params: Params,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(default)]
            capabilities: Value,
        }
        let Ok(init) = serde_json::from_slice::<Init>(body) else { return Declared::default() };
        let caps = &init.params.capabilities;
        let present = |v: &Value| v.is_object();
        let mut bits = 0;
        if present(&caps["sampling"]) {
            bits |= Self::SAMPLING;
        }
        let elicitation = &caps["elicitation"];
        if present(elicitation) {
            // An empty object is form mode (the revision says so, for older clients).
            let form = present(&elicitation["form"]) || elicitation.as_object().is_some_and(|o| o.is_empty());
            if form {
                bits |= Self::FORM;
            }
            if present(&elicitation["url"]) {
                bits |= Self::URL;
            }
        }
        if present(&caps["roots"]) {
            bits |= Self::ROOTS;
        }
        Declared(bits)
    }

    /// The session id's suffix saying it.
    pub fn suffix(self) -> String {
        let mut out = String::from("-");
        for (bit, letter) in [(Self::SAMPLING, 's'), (Self::FORM, 'f'), (Self::URL, 'u'), (Self::ROOTS, 'r')] {
            if self.0 & bit != 0 {
                out.push(letter);
            }
        }
        out
    }

    /// From the request's session id (none: nothing declared). Reads a header, allocates
    /// nothing.
    pub fn of_headers(headers: &HeaderMap) -> Declared {
        let Some(id) = headers.get(super::listen::SESSION_ID).and_then(|v| v.to_str().ok()) else { return Declared::default() };
        let Some((_, letters)) = id.rsplit_once('-') else { return Declared::default() };
        let mut bits = 0;
        for b in letters.bytes() {
            bits |= match b {
                b's' => Self::SAMPLING,
                b'f' => Self::FORM,
                b'u' => Self::URL,
                b'r' => Self::ROOTS,
                _ => 0,
            };
        }
        Declared(bits)
    }

    pub fn any(self) -> bool {
        self.0 != 0
    }

    /// Whether the agent declared URL-mode elicitation.
    pub fn url(self) -> bool {
        self.0 & Self::URL != 0
    }

    /// Whether the agent can answer this request of a downstream; `Err` names what it lacks.
    fn allows(self, method: &str, params: &Value) -> Result<(), &'static str> {
        let (bit, name) = match method {
            "sampling/createMessage" => (Self::SAMPLING, "sampling"),
            "elicitation/create" if params["mode"] == "url" => (Self::URL, "URL-mode elicitation"),
            "elicitation/create" => (Self::FORM, "form elicitation"),
            "roots/list" => (Self::ROOTS, "roots"),
            _ => return Err("this request"),
        };
        if self.0 & bit != 0 { Ok(()) } else { Err(name) }
    }
}

/// The session id an `initialize` answer gives: unguessable, meaningless to every replica but
/// for the letters saying what the agent declared.
pub fn session_id(initialize: &[u8]) -> axum::http::HeaderValue {
    let id = format!("{}{}", uuid::Uuid::new_v4().simple(), Declared::of_initialize(initialize).suffix());
    axum::http::HeaderValue::from_str(&id).unwrap_or(axum::http::HeaderValue::from_static("gatehouse"))
}

/// Who may answer the requests relayed during one call, and where they are waited for: set
/// only for an agent that declared something.
#[derive(Clone)]
pub struct Asker {
    state: AppState,
    tenant: uuid::Uuid,
    workspace: uuid::Uuid,
    caller: String,
    declared: Declared,
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asker").field("declared", &self.declared).finish_non_exhaustive()
    }
}

impl Asker {
    /// Whether the agent declared URL-mode elicitation.
    pub fn declared_url(&self) -> bool {
        self.declared.url()
    }

    /// The asker of a call, when the agent declared anything it could be asked.
    pub fn of(state: &AppState, ctx: &GatewayCtx, declared: Declared) -> Option<Asker> {
        declared.any().then(|| Asker {
            state: state.clone(),
            tenant: ctx.tenant.id.0,
            workspace: ctx.bound.workspace.id.0,
            caller: ctx.actor_id.clone(),
            declared,
        })
    }
}

/// What the sealed id says inside.
#[derive(Serialize, Deserialize)]
struct Claims {
    replica: uuid::Uuid,
    key: String,
    caller: String,
    exp: i64,
}

fn aad(tenant: uuid::Uuid, workspace: uuid::Uuid) -> Aad<'static> {
    Aad { tenant, workspace, connector: "", owner: Owner::Shared, purpose: PURPOSE }
}

/// A JSON-RPC error response to the downstream's request `id`.
pub fn refusal(id: &Value, code: i32, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// The requests waiting for the agent's answer on this replica, and the `LISTEN` that brings
/// answers POSTed to other replicas (opened on the first request, kept while it works).
#[derive(Default)]
pub struct Mailbox {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    waiting: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Value>>>,
    listening: tokio::sync::Mutex<bool>,
}

impl Inner {
    fn deliver(&self, key: &str, message: Value) -> bool {
        let waiter = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        waiter.is_some_and(|tx| tx.send(message).is_ok())
    }
}

/// Removes a waiter when its call ends, answered or not.
struct Waiting<'a>(&'a Inner, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}

impl Mailbox {
    /// Starts this replica's `LISTEN` unless it runs.
    async fn listen(&self, db: &crate::db::Db) -> Result<(), String> {
        let mut listening = self.inner.listening.lock().await;
        if *listening {
            return Ok(());
        }
        let options = db.session_options().application_name("gatehouse-agent-answers");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .after_connect(|conn, _| Box::pin(async move { conn.execute("SET ROLE gatehouse_app").await.map(|_| ()) }))
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await.map_err(|e| e.to_string())?;
        listener.eager_reconnect(false);
        listener.ignore_pool_close_event(true);
        listener.listen(CHANNEL).await.map_err(|e| e.to_string())?;
        *listening = true;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            while let Ok(Some(n)) = listener.try_recv().await {
                if let Some((key, json)) = n.payload().split_once(' ')
                    && let Ok(message) = serde_json::from_str::<Value>(json)
                {
                    inner.deliver(key, message);
                }
            }
            // Lost: the next request opens it again (a call waiting now ends at its deadline).
            tracing::warn!("the LISTEN for agents' answers was lost");
            *inner.listening.lock().await = false;
            pool.close().await;
        });
        Ok(())
    }
}

/// Relays one request of a downstream to the agent through `push` (the call's response
/// stream) and waits for its answer; returns the JSON-RPC response to send the downstream
/// (the agent's, under the downstream's own id), or a refusal.
pub async fn ask(asker: Option<&Asker>, request: Value, push: impl FnOnce(Vec<u8>)) -> Value {
    let down_id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request["method"].as_str().unwrap_or_default();
    let declared = asker.map_or(Declared::default(), |a| a.declared);
    if let Err(lacking) = declared.allows(method, &request["params"]) {
        return refusal(&down_id, -32601, &format!("Method not found: the agent did not declare {lacking}"));
    }
    let Some(asker) = asker else { return refusal(&down_id, -32601, "Method not found") };
    let Some(ring) = asker.state.config.vault_keys.as_ref() else {
        return refusal(&down_id, -32603, "this gateway relays requests to the agent only with vault keys configured");
    };
    let mailbox = &asker.state.downstreams.asks;
    if let Err(e) = mailbox.listen(&asker.state.db).await {
        tracing::warn!(error = %e, "could not LISTEN for agents' answers");
        return refusal(&down_id, -32603, "the gateway cannot wait for the agent's answer now");
    }
    let key = hex::encode(rand::random::<[u8; 16]>());
    let claims = Claims {
        replica: asker.state.db.replica().id,
        key: key.clone(),
        caller: asker.caller.clone(),
        exp: chrono::Utc::now().timestamp() + TTL_SECS,
    };
    let sealed = ring.seal(&aad(asker.tenant, asker.workspace), &serde_json::to_vec(&claims).unwrap_or_default());
    let (tx, rx) = tokio::sync::oneshot::channel();
    mailbox.inner.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), tx);
    let _waiting = Waiting(&mailbox.inner, key);
    let mut up = request;
    up["id"] = Value::String(format!("{PREFIX}{sealed}"));
    push(serde_json::to_vec(&up).unwrap_or_default());
    match rx.await {
        Ok(mut answer) => {
            let mut out = json!({ "jsonrpc": "2.0", "id": down_id });
            match (answer.get_mut("result").map(Value::take), answer.get_mut("error").map(Value::take)) {
                (Some(result), _) => out["result"] = result,
                (None, Some(error)) => out["error"] = error,
                (None, None) => return refusal(&down_id, -32603, "the agent's answer carried neither result nor error"),
            }
            out
        }
        Err(_) => refusal(&down_id, -32603, "the agent's answer was lost"),
    }
}

fn not_found() -> Response {
    crate::error::Error::NotFound { what: "request" }.into_response()
}

/// An agent's POSTed answer to a relayed request, if the body is one: delivered to the replica
/// holding the call (202), or 404 when the id is not one this caller may answer.
pub async fn answered(state: &AppState, parts: &Parts, body: &[u8]) -> Option<Response> {
    let message: Value = serde_json::from_slice(body).ok()?;
    let id = message.get("id")?.as_str()?.strip_prefix(PREFIX)?;
    if message.get("method").is_some() || (message.get("result").is_none() && message.get("error").is_none()) {
        return None;
    }
    let Some(ctx) = parts.extensions.get::<GatewayCtx>() else { return Some(not_found()) };
    let Some(ring) = state.config.vault_keys.as_ref() else { return Some(not_found()) };
    let Ok(opened) = ring.open(&aad(ctx.tenant.id.0, ctx.bound.workspace.id.0), id) else { return Some(not_found()) };
    let Ok(claims) = serde_json::from_slice::<Claims>(&opened) else { return Some(not_found()) };
    if claims.caller != ctx.actor_id || claims.exp < chrono::Utc::now().timestamp() {
        return Some(not_found());
    }
    if claims.replica == state.db.replica().id {
        return Some(if state.downstreams.asks.inner.deliver(&claims.key, message) {
            StatusCode::ACCEPTED.into_response()
        } else {
            not_found()
        });
    }
    let mut payload = format!("{} {}", claims.key, message);
    let mut status = StatusCode::ACCEPTED;
    if payload.len() > NOTIFY_CAP {
        // Too large to notify: the downstream is told, and so is the agent.
        let error = json!({ "error": { "code": -32603, "message": "the agent's answer is larger than the gateway relays between replicas" } });
        payload = format!("{} {}", claims.key, error);
        status = StatusCode::PAYLOAD_TOO_LARGE;
    }
    let notified = state
        .db
        .read(|conn, _| {
            // A read that meets a lost connection runs again (a notification is only sent at
            // commit), so each run has its own copy.
            let payload = payload.clone();
            Box::pin(
                async move { Ok(sqlx::query!("SELECT pg_notify($1, $2)", CHANNEL, payload).execute(conn).await.map(|_| ())?) },
            )
        })
        .await;
    Some(match notified {
        Ok(()) => status.into_response(),
        Err(e) => e.into_response(),
    })
}
