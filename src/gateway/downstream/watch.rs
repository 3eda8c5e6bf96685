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
//!
//! A watch also holds this replica's resource subscriptions at the downstream: the union of the
//! URIs its agent streams want ([`Watch::want`]), subscribed on the watch's own session
//! (`resources/subscribe`, handshake era) or named in its `subscriptions/listen` filter
//! (`resourceSubscriptions`, 2026-07-28, where a changed set opens the stream again); the
//! downstream's `notifications/resources/updated` is heard as [`Heard::Updated`].

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
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
    /// A resource this replica subscribed to changed (its URI, as the downstream said it).
    Updated(String),
}

impl Heard {
    fn of(message: &Value) -> Option<Heard> {
        match message["method"].as_str()? {
            "notifications/tools/list_changed" => Some(Heard::Tools),
            "notifications/prompts/list_changed" => Some(Heard::Prompts),
            "notifications/resources/list_changed" => Some(Heard::Resources),
            "notifications/resources/updated" => Some(Heard::Updated(message["params"]["uri"].as_str()?.to_owned())),
            _ => None,
        }
    }
}

/// The most URIs one watch subscribes to at the downstream; what more streams want is not
/// subscribed (and not acknowledged to them).
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// The URIs a watch's agent streams want, each with how many want it; `set` is what the
/// listening task subscribes at the downstream, with a version that grows at each change.
struct Wanted {
    counts: std::sync::Mutex<BTreeMap<String, usize>>,
    set: watch::Sender<(u64, BTreeSet<String>)>,
    /// The version of `set` the downstream has been told (`u64::MAX`: it says nothing, so
    /// there is nothing to wait for).
    applied: watch::Sender<u64>,
}

impl Wanted {
    fn publish(&self, counts: &BTreeMap<String, usize>) {
        let set: BTreeSet<String> = counts.keys().cloned().collect();
        self.set.send_if_modified(|(version, current)| {
            if *current == set {
                return false;
            }
            (*version, *current) = (*version + 1, set);
            true
        });
    }
}

/// URIs a stream wants of a watch; dropping it gives them up.
pub struct Wanting {
    wanted: Arc<Wanted>,
    uris: Vec<String>,
}

impl Drop for Wanting {
    fn drop(&mut self) {
        let mut counts = self.wanted.counts.lock().unwrap_or_else(|p| p.into_inner());
        for uri in &self.uris {
            if let Some(n) = counts.get_mut(uri) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(uri);
                }
            }
        }
        self.wanted.publish(&counts);
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
    wanted: Arc<Wanted>,
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

    /// Subscribes this replica to `uris` at the downstream for as long as the answer lives,
    /// and waits (at most `limit`) until the downstream has been told. Answers the URIs
    /// subscribed: those within [`MAX_SUBSCRIPTIONS`].
    pub async fn want(&self, uris: &[String], limit: Duration) -> (Wanting, Vec<String>) {
        let (taken, version) = {
            let mut counts = self.wanted.counts.lock().unwrap_or_else(|p| p.into_inner());
            let mut taken = Vec::new();
            for uri in uris {
                if taken.contains(uri) {
                    continue;
                }
                if let Some(n) = counts.get_mut(uri) {
                    *n += 1;
                } else if counts.len() < MAX_SUBSCRIPTIONS {
                    counts.insert(uri.clone(), 1);
                } else {
                    continue;
                }
                taken.push(uri.clone());
            }
            self.wanted.publish(&counts);
            (taken, self.wanted.set.borrow().0)
        };
        let mut applied = self.wanted.applied.subscribe();
        let _ = tokio::time::timeout(limit, applied.wait_for(|a| *a >= version)).await;
        (Wanting { wanted: self.wanted.clone(), uris: taken.clone() }, taken)
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
        let wanted = Arc::new(Wanted {
            counts: std::sync::Mutex::new(BTreeMap::new()),
            set: watch::channel((0, BTreeSet::new())).0,
            applied: watch::channel(0).0,
        });
        let listening = Listening {
            downstreams: Arc::downgrade(self),
            http,
            tenant,
            key: key.to_owned(),
            connector: connector.clone(),
            credential: credential.cloned(),
            tx: tx.clone(),
            ready: ready_tx,
            wanted: wanted.clone(),
        };
        let task = tokio::spawn(listening.run()).abort_handle();
        let watch = Arc::new(Watch {
            tx,
            ready,
            task,
            heard_tools: std::sync::atomic::AtomicU64::new(0),
            refreshed: tokio::sync::Mutex::new(0),
            wanted,
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
    http: crate::gateway::outbound::Outbound,
    tenant: uuid::Uuid,
    key: String,
    connector: Connector,
    credential: Option<Credential>,
    tx: broadcast::Sender<Heard>,
    ready: watch::Sender<bool>,
    wanted: Arc<Wanted>,
}

/// How one opening of the stream ended.
enum Ended {
    /// The server offers no stream: nothing will ever be heard.
    Silent,
    /// The stream ended or broke; open it again after a pause.
    Again,
    /// The subscriptions wanted changed (2026-07-28): open it again at once with them.
    Resubscribe,
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
                    self.wanted.applied.send_replace(u64::MAX);
                    return;
                }
                Ok(Ended::Resubscribe) => continue,
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
        if downstreams.modern(self.tenant, &self.key, &self.connector, credential).await? {
            drop(downstreams);
            let mut filter = json!({ "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true });
            let (version, uris) = self.wanted.set.borrow().clone();
            if !uris.is_empty() {
                filter["resourceSubscriptions"] = json!(uris);
            }
            let mut params = modern::meta();
            params["notifications"] = filter;
            let Some(stream) = mcp_client::listen(
                self.http.clone(),
                url,
                headers,
                modern::REVISION,
                &params,
                credential.and_then(|c| c.dpop.as_deref()),
            )
            .await?
            else {
                return Ok(Ended::Silent);
            };
            return self.hear(stream, None, version).await;
        }
        drop(downstreams);
        let session =
            mcp_client::HttpSession::connect(self.http.clone(), url, headers, credential.and_then(|c| c.dpop.clone())).await?;
        let session = Closing(session);
        let Some(stream) = session.0.open_stream().await? else { return Ok(Ended::Silent) };
        let _ = self.ready.send(true);
        let mut subscribed = BTreeSet::new();
        let version = self.subscribe(&session.0, &mut subscribed).await;
        self.hear(stream, Some((&session.0, subscribed)), version).await
    }

    /// Brings the session's subscriptions at a handshake-era downstream to the wanted set
    /// (`subscribed`: what it holds), and says that version is applied. A URI the downstream
    /// refuses is not held; a downstream that declares no subscriptions is asked nothing.
    async fn subscribe(&self, session: &mcp_client::HttpSession, subscribed: &mut BTreeSet<String>) -> u64 {
        let (version, wanted) = self.wanted.set.borrow().clone();
        if session.server()["capabilities"]["resources"]["subscribe"] == true {
            for uri in subscribed.clone().difference(&wanted) {
                let _ = session.relay("resources/unsubscribe", &json!({ "uri": uri }), None).await;
                subscribed.remove(uri);
            }
            for uri in wanted.difference(&subscribed.clone()) {
                if session.relay("resources/subscribe", &json!({ "uri": uri }), None).await.is_ok() {
                    subscribed.insert(uri.clone());
                }
            }
        }
        self.wanted.applied.send_replace(version);
        version
    }

    /// Reads the stream until it ends, passing on what is heard. `session`: the handshake
    /// era's, where the server's requests are answered (a 2026-07-28 stream carries none),
    /// with the URIs it holds subscriptions to; `version`: that of the wanted set the stream
    /// was opened with.
    async fn hear(
        &self,
        mut stream: crate::gateway::outbound::Response,
        mut session: Option<(&mcp_client::HttpSession, BTreeSet<String>)>,
        version: u64,
    ) -> Result<Ended, Failure> {
        let mut parser = EventParser::new(MAX_EVENT_BYTES);
        let mut events = std::collections::VecDeque::new();
        let mut wanted = self.wanted.set.subscribe();
        // A change made while the stream was opening is one to act on.
        if wanted.borrow().0 != version {
            wanted.mark_changed();
        }
        loop {
            let chunk = tokio::select! {
                chunk = stream.chunk() => chunk.map_err(|e| Failure::Unavailable(e.to_string()))?,
                changed = wanted.changed() => {
                    if changed.is_err() || wanted.borrow_and_update().0 == version {
                        continue;
                    }
                    match &mut session {
                        Some((session, subscribed)) => {
                            self.subscribe(session, subscribed).await;
                            continue;
                        }
                        None => return Ok(Ended::Resubscribe),
                    }
                }
            };
            let Some(chunk) = chunk else { return Ok(Ended::Again) };
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
                    if let Some((session, _)) = &session {
                        session.answer_unattended(&message).await;
                    }
                    continue;
                }
                if method == "notifications/subscriptions/acknowledged" {
                    let _ = self.ready.send(true);
                    self.wanted.applied.send_replace(version);
                    continue;
                }
                if let Some(heard) = Heard::of(&message) {
                    if heard == Heard::Tools
                        && let Some(downstreams) = self.downstreams.upgrade()
                    {
                        downstreams.heard_tools(&self.key, self.credential.as_ref());
                    }
                    let _ = self.tx.send(heard);
                }
            }
        }
    }
}

/// A session of the watch's own, ended at the server when the watch ends.
struct Closing(mcp_client::HttpSession);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}
