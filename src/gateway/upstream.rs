//! The agent's response stream while one call is open: where the downstream's notifications
//! for that call (progress, log messages) are written, as they arrive.
//!
//! A call answered by rmcp writes onto rmcp's stream for the request ([`Sink::Peer`]): its
//! stateless server answers with an event stream as soon as anything but the response comes
//! first. A call on the [`super::direct`] path has no rmcp service: its notifications wait in a
//! [`Queue`] that the direct path turns into an event stream the moment the first one arrives.
//!
//! Progress tokens go down unchanged: each downstream request has its own response stream,
//! so whatever comes back on it belongs to this call, and its token is rewritten to the
//! agent's. Everything a downstream sends on the stream that is not for the agent (another
//! token, an unknown notification) is dropped here.

#![allow(deprecated)] // logging is deprecated by the 2026 revision, and relayed for the others

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use rmcp::{
    Peer, RoleServer,
    model::{LoggingLevel, ProgressToken, ServerJsonRpcMessage, ServerNotification},
};
use serde_json::Value;

use super::asks::{self, Asker};

/// Notifications held for the direct path before it gives up on a slow reader: beyond this
/// many unread, new ones are dropped (progress and logs are advisory; the result never is).
const QUEUE_CAP: usize = 256;

/// Which log messages the agent asked for.
#[derive(Clone, Copy, Debug)]
pub enum Logs {
    /// Handshake era: every message, or those at or above the level the agent's session set
    /// with `logging/setLevel` ([`super::log_levels`]).
    All,
    /// 2026-07-28: the request's `io.modelcontextprotocol/logLevel`, at or above which
    /// messages are relayed.
    AtLeast(LoggingLevel),
    /// 2026-07-28 without a level: none (the revision says a server sends none then).
    Off,
}

/// Where the notifications go.
#[derive(Clone)]
enum Sink {
    Peer(Peer<RoleServer>),
    Queue(Arc<Queue>),
}

/// The agent's response stream for one open call.
#[derive(Clone)]
pub struct Upstream {
    sink: Sink,
    /// The agent's progress token, sent down with the call.
    progress: Option<ProgressToken>,
    logs: Logs,
    /// Who may answer the downstream's requests to the agent (direct path, handshake era).
    asker: Option<Asker>,
    /// A 2026-07-28 agent's call to a handshake-era downstream, replayed: the downstream's
    /// requests are answered from the agent's earlier answers ([`super::replay`]).
    replay: Option<Arc<super::replay::Replay>>,
    /// A handshake-era agent's session, whose `logging/setLevel` is kept for every replica.
    session: Option<super::log_levels::SessionLevel>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("progress", &self.progress).field("logs", &self.logs).finish_non_exhaustive()
    }
}

/// Messages of a direct-path call (notifications, requests to the agent), serialized, waiting
/// for the direct path to write them.
#[derive(Default)]
pub struct Queue {
    items: Mutex<VecDeque<Vec<u8>>>,
    ready: tokio::sync::Notify,
}

impl Queue {
    /// The next notification, once there is one.
    pub async fn next(&self) -> Vec<u8> {
        loop {
            let ready = self.ready.notified();
            if let Some(message) = self.items.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
                return message;
            }
            ready.await;
        }
    }

    /// Every notification already waiting.
    pub fn drain(&self) -> Vec<Vec<u8>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect()
    }

    /// `always`: a request to the agent, which is never dropped (the call waits for its answer).
    fn push(&self, message: Vec<u8>, always: bool) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if always || items.len() < QUEUE_CAP {
            items.push_back(message);
        }
        drop(items);
        self.ready.notify_one();
    }
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Upstream {
    /// The stream of a request rmcp serves.
    pub fn peer(peer: Peer<RoleServer>, progress: Option<ProgressToken>, logs: Logs) -> Upstream {
        Upstream { sink: Sink::Peer(peer), progress, logs, asker: None, replay: None, session: None }
    }

    /// The stream of a direct-path request (handshake era): `progress`, the token its `_meta`
    /// gave; `asker`, set when the agent declared requests it may be sent.
    pub fn queue(queue: Arc<Queue>, asker: Option<Asker>, progress: Option<ProgressToken>) -> Upstream {
        Upstream { sink: Sink::Queue(queue), progress, logs: Logs::All, asker, replay: None, session: None }
    }

    /// The stream of a handshake-era agent's request on `session`, whose level it set applies.
    pub fn in_session(self, session: Option<super::log_levels::SessionLevel>) -> Upstream {
        Upstream { session, ..self }
    }

    /// Whether the downstream's requests to the agent (sampling, elicitation, roots) can be
    /// relayed on this stream: the agent declared one it may be sent (direct path).
    pub fn can_ask(&self) -> bool {
        self.asker.is_some() || self.replay.is_some()
    }

    /// Whether the agent declared URL-mode elicitation (direct path, handshake era).
    pub fn declared_url_elicitation(&self) -> bool {
        self.asker.as_ref().is_some_and(|a| a.declared_url())
    }

    /// This stream, with the downstream's requests answered by `replay` instead.
    pub fn replaying(&self, replay: Arc<super::replay::Replay>) -> Upstream {
        Upstream { replay: Some(replay), ..self.clone() }
    }

    /// The progress token to send down with the call, if the agent gave one.
    pub fn progress_token(&self) -> Option<&ProgressToken> {
        self.progress.as_ref()
    }

    /// The level to ask a 2026-07-28 downstream for: the 2026-07-28 agent's own; for a
    /// handshake-era agent, the one its session set, else `debug` (on that era a server sends
    /// what it likes until told a level, and all of it is passed on).
    pub async fn log_level(&self) -> Option<LoggingLevel> {
        match self.logs {
            Logs::AtLeast(level) => Some(level),
            Logs::Off => None,
            Logs::All => Some(self.session_level().await.unwrap_or(LoggingLevel::Debug)),
        }
    }

    /// The level the handshake-era agent's session set, if it has a session and set one.
    async fn session_level(&self) -> Option<LoggingLevel> {
        match &self.session {
            Some(session) => session.get().await,
            None => None,
        }
    }

    /// The rmcp peer of the request, for relaying requests to the agent (sampling,
    /// elicitation, roots) while the call is open; `None` on the direct path.
    pub fn rmcp_peer(&self) -> Option<&Peer<RoleServer>> {
        match &self.sink {
            Sink::Peer(peer) => Some(peer),
            Sink::Queue(_) => None,
        }
    }

    /// A message the downstream sent on the call's response stream other than the response:
    /// relayed to the agent when it is a progress notification (with the agent's token) or a
    /// log message the agent asked for; anything else is dropped.
    pub async fn downstream_message(&self, message: Value) {
        let Ok(ServerJsonRpcMessage::Notification(mut note)) = serde_json::from_value::<ServerJsonRpcMessage>(message) else {
            return;
        };
        match &mut note.notification {
            ServerNotification::ProgressNotification(n) => match &self.progress {
                Some(token) => n.params.progress_token = token.clone(),
                None => return,
            },
            ServerNotification::LoggingMessageNotification(n) => {
                let floor = match self.logs {
                    Logs::All => self.session_level().await,
                    Logs::AtLeast(level) => Some(level),
                    Logs::Off => return,
                };
                if floor.is_some_and(|floor| rank(n.params.level) < rank(floor)) {
                    return;
                }
            }
            _ => return,
        }
        match &self.sink {
            Sink::Peer(peer) => {
                // The agent may have gone; the call still completes and is recorded.
                let _ = peer.send_notification(note.notification).await;
            }
            Sink::Queue(queue) => {
                queue.push(serde_json::to_vec(&ServerJsonRpcMessage::Notification(note)).unwrap_or_default(), false)
            }
        }
    }

    /// A request the downstream sent on the call's response stream (sampling, elicitation,
    /// roots): relayed to the agent and its answer awaited ([`asks`]); the JSON-RPC response
    /// for the downstream. A call rmcp serves has no stream the gateway writes requests on,
    /// so its downstream is told the agent cannot be asked.
    pub async fn downstream_request(&self, request: Value) -> Value {
        if let Some(replay) = &self.replay {
            return replay.answer(&request);
        }
        match &self.sink {
            Sink::Queue(queue) => asks::ask(self.asker.as_ref(), request, |bytes| queue.push(bytes, true)).await,
            Sink::Peer(_) => asks::refusal(
                request.get("id").unwrap_or(&Value::Null),
                -32601,
                "Method not found: this call's response stream does not carry requests to the agent",
            ),
        }
    }
}
