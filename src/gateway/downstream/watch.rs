//! Listening to downstreams: what a server says outside any request (its tool, prompt and
//! resource lists changed), heard so that an agent's own notification stream can relay it.
//!
//! One watch per (connector configuration, credential owner and version) and replica, shared
//! by every agent stream of this replica that relays the connector, and ended when the last of
//! them ends. A handshake-era server is listened to on a session of the watch's own (its GET
//! stream); a 2026-07-28 server with a `subscriptions/listen` request asking for every list
//! change. A broken stream is opened again, after a pause that grows while it keeps failing.
//! A server that offers no such stream (405, or -32601 to `subscriptions/listen`) says
//! nothing, and the watch stays quiet. Legacy HTTP+SSE connectors are not listened to.

use std::{
    collections::HashMap,
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::{Downstreams, Failure, modern, session};
use crate::{
    gateway::{credentials::Credential, mcp_client, sse::EventParser},
    workspaces::{Connector, config::RemoteTransport},
};

/// The largest event a downstream's notification stream may send.
const MAX_EVENT_BYTES: usize = 1 << 20;
/// The first pause before a failed stream is opened again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// What a downstream said that an agent's stream may relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    Tools,
    Prompts,
    Resources,
}

impl Heard {
    fn of(method: &str) -> Option<Heard> {
        match method {
            "notifications/tools/list_changed" => Some(Heard::Tools),
            "notifications/prompts/list_changed" => Some(Heard::Prompts),
            "notifications/resources/list_changed" => Some(Heard::Resources),
            _ => None,
        }
    }
}

/// One downstream listened to; dropping the last handle ends the listening.
pub struct Watch {
    tx: broadcast::Sender<Heard>,
    /// True while the downstream's stream is open (or known not to exist): what is said from
    /// then on is heard.
    ready: watch::Receiver<bool>,
    task: tokio::task::AbortHandle,
    /// Tool list changes heard, and the last of them the catalog was fetched again for: one
    /// fetch per change on this replica, however many agent streams heard it.
    heard_tools: std::sync::atomic::AtomicU64,
    refreshed: tokio::sync::Mutex<u64>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    pub fn subscribe(&self) -> broadcast::Receiver<Heard> {
        self.tx.subscribe()
    }

    /// Waits until the downstream's stream is open, at most `limit`.
    pub async fn ready(&self, limit: Duration) {
        let mut ready = self.ready.clone();
        let _ = tokio::time::timeout(limit, ready.wait_for(|open| *open)).await;
    }

    /// Runs `refresh` once for the tool list changes heard so far: a caller that finds it
    /// already done (by another stream) waits for that and returns.
    pub async fn refresh_tools<F: Future<Output = ()>>(&self, refresh: F) {
        let heard = self.heard_tools.load(std::sync::atomic::Ordering::SeqCst);
        let mut refreshed = self.refreshed.lock().await;
        if *refreshed < heard {
            refresh.await;
            *refreshed = heard;
        }
    }
}

/// The watches of this replica, by pool key.
#[derive(Default)]
pub(super) struct Watches(std::sync::Mutex<HashMap<String, Weak<Watch>>>);

impl Downstreams {
    /// The watch on this connector for this credential, opened if none is; `None` for a
    /// connector that cannot be listened to (an HTTP API, a legacy SSE server).
    pub fn watch(
        self: &Arc<Self>,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Option<Arc<Watch>> {
        if !matches!(connector, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }) {
            return None;
        }
        let http = self.http.clone()?;
        let id = super::pool::pool_key(key, credential);
        let mut watches = self.watches.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(watch) = watches.get(&id).and_then(Weak::upgrade) {
            return Some(watch);
        }
        watches.retain(|_, w| w.strong_count() > 0);
        let (tx, _) = broadcast::channel(16);
        let (ready_tx, ready) = watch::channel(false);
        let listening = Listening {
            downstreams: Arc::downgrade(self),
            http,
            tenant,
            key: key.to_owned(),
            connector: connector.clone(),
            credential: credential.cloned(),
            tx: tx.clone(),
            ready: ready_tx,
        };
        let task = tokio::spawn(listening.run()).abort_handle();
        let watch = Arc::new(Watch {
            tx,
            ready,
            task,
            heard_tools: std::sync::atomic::AtomicU64::new(0),
            refreshed: tokio::sync::Mutex::new(0),
        });
        watches.insert(id, Arc::downgrade(&watch));
        Some(watch)
    }

    /// Notes a tool list change heard on the watch with this key (see [`Watch::refresh_tools`]).
    fn heard_tools(&self, key: &str, credential: Option<&Credential>) {
        let id = super::pool::pool_key(key, credential);
        let watches = self.watches.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(watch) = watches.get(&id).and_then(Weak::upgrade) {
            watch.heard_tools.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// What the listening task holds.
struct Listening {
    downstreams: Weak<Downstreams>,
    http: reqwest::Client,
    tenant: uuid::Uuid,
    key: String,
    connector: Connector,
    credential: Option<Credential>,
    tx: broadcast::Sender<Heard>,
    ready: watch::Sender<bool>,
}

/// How one opening of the stream ended.
enum Ended {
    /// The server offers no stream: nothing will ever be heard.
    Silent,
    /// The stream ended or broke; open it again after a pause.
    Again,
}

impl Listening {
    async fn run(self) {
        let mut pause = FIRST_PAUSE;
        loop {
            let opened = Instant::now();
            let ended = self.listen_once().await;
            let _ = self.ready.send(false);
            match ended {
                Ok(Ended::Silent) => {
                    // Nobody waits for a stream that will never open.
                    let _ = self.ready.send(true);
                    return;
                }
                Ok(Ended::Again) => {}
                Err(f) => tracing::info!(failure = ?f, "a downstream's notification stream failed; opening it again"),
            }
            // A stream that lived a while was healthy: start the pauses over.
            if opened.elapsed() > LONGEST_PAUSE {
                pause = FIRST_PAUSE;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    async fn listen_once(&self) -> Result<Ended, Failure> {
        let Connector::RemoteMcp { url, .. } = &self.connector else { return Ok(Ended::Silent) };
        let Some(downstreams) = self.downstreams.upgrade() else { return Ok(Ended::Silent) };
        let credential = self.credential.as_ref();
        let headers = session::headers(&self.connector, credential);
        if downstreams.modern(self.tenant, &self.key, &self.connector, credential).await {
            drop(downstreams);
            let filter = json!({ "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true });
            let mut params = modern::meta();
            params["notifications"] = filter;
            let Some(stream) = mcp_client::listen(self.http.clone(), url, headers, modern::REVISION, &params).await? else {
                return Ok(Ended::Silent);
            };
            return self.hear(stream, None).await;
        }
        drop(downstreams);
        let session = mcp_client::HttpSession::connect(self.http.clone(), url, headers).await?;
        let session = Closing(session);
        let Some(stream) = session.0.open_stream().await? else { return Ok(Ended::Silent) };
        let _ = self.ready.send(true);
        self.hear(stream, Some(&session.0)).await
    }

    /// Reads the stream until it ends, passing on what is heard. `session`: the handshake
    /// era's, where the server's requests are answered (a 2026-07-28 stream carries none).
    async fn hear(&self, mut stream: reqwest::Response, session: Option<&mcp_client::HttpSession>) -> Result<Ended, Failure> {
        let mut parser = EventParser::new(MAX_EVENT_BYTES);
        let mut events = std::collections::VecDeque::new();
        while let Some(chunk) = stream.chunk().await.map_err(|e| Failure::Unavailable(e.without_url().to_string()))? {
            parser.feed(&chunk, &mut events).map_err(|e| Failure::Rejected(e.to_string()))?;
            while let Some(event) = events.pop_front() {
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else { continue };
                let Some(method) = message["method"].as_str() else {
                    // The listen request's own response: the server ended the subscription.
                    if message.get("id").is_some() && session.is_none() {
                        return Ok(Ended::Again);
                    }
                    continue;
                };
                if message.get("id").is_some() {
                    if let Some(session) = session {
                        session.answer_unattended(&message).await;
                    }
                    continue;
                }
                if method == "notifications/subscriptions/acknowledged" {
                    let _ = self.ready.send(true);
                    continue;
                }
                if let Some(heard) = Heard::of(method) {
                    if heard == Heard::Tools
                        && let Some(downstreams) = self.downstreams.upgrade()
                    {
                        downstreams.heard_tools(&self.key, self.credential.as_ref());
                    }
                    let _ = self.tx.send(heard);
                }
            }
        }
        Ok(Ended::Again)
    }
}

/// A session of the watch's own, ended at the server when the watch ends.
struct Closing(mcp_client::HttpSession);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}
