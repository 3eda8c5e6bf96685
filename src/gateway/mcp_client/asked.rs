//! A server's requests to the agent that belong to no request of ours: sent on the session's
//! GET stream instead of a call's response stream (the TypeScript SDK's server does so when a
//! tool asks without naming the call it serves). While a call whose agent can be asked holds
//! a pooled session (an exclusive lease: it is the only call on the session that could have
//! caused the ask), the session listens on its GET stream, and a request that arrives there
//! goes to that agent, like one on the call's own stream. The stream is opened before the
//! call is sent (so the server knows it before the call can ask) and closed once no call has
//! held the session for [`IDLE`], so an idle pooled session keeps no stream open at the
//! server. With no call holding it, `ping` is answered and anything else refused, as an agent
//! without the capability would.

use std::{
    sync::{
        Arc, Mutex, OnceLock, Weak,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::oneshot;

use super::{HttpSession, MAX_RESPONSE_BYTES};
use crate::gateway::{sse::EventParser, upstream::Upstream};

/// Times in a row the GET stream may fail to open or end at once before the listener stops.
const MAX_FAILURES: u32 = 3;
/// The wait before reopening an ended stream whose server named no `retry` time.
const REOPEN: Duration = Duration::from_secs(1);
/// How long the stream stays open after the last call let go of the session.
const IDLE: Duration = Duration::from_secs(5);
/// How long a call waits for the stream to open before it is sent anyway.
const OPENING: Duration = Duration::from_secs(2);

/// Who answers the server's requests on the session's GET stream, and its listener.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// The session itself (set when it is pooled: only pooled sessions listen).
    me: OnceLock<Weak<HttpSession>>,
    /// The agent of the latest call holding the session, with the hold's number.
    agent: Mutex<Option<(u64, Upstream)>>,
    numbers: AtomicU64,
    /// Calls holding the session now, and when the last one let go (ms after `epoch`).
    holding: AtomicUsize,
    released_ms: AtomicU64,
    epoch: OnceLock<Instant>,
    /// A listener runs (or is starting).
    running: AtomicBool,
    /// The server offers no GET stream (405): never asked for one again.
    unoffered: AtomicBool,
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Asked {
    fn agent(&self) -> std::sync::MutexGuard<'_, Option<(u64, Upstream)>> {
        self.agent.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    /// No call has held the session for [`IDLE`].
    fn idle(&self) -> bool {
        self.holding.load(Ordering::Acquire) == 0
            && self.now_ms().saturating_sub(self.released_ms.load(Ordering::Relaxed)) >= IDLE.as_millis() as u64
    }

    /// `upstream` answers the server's GET-stream requests until the returned hold is dropped;
    /// the stream is open (or could not be opened) when this returns.
    pub(super) async fn hold(&self, upstream: &Upstream) -> Hold<'_> {
        let number = self.numbers.fetch_add(1, Ordering::Relaxed);
        *self.agent() = Some((number, upstream.clone()));
        self.holding.fetch_add(1, Ordering::AcqRel);
        let hold = Hold { asked: self, number };
        if let Some(opened) = self.start() {
            let _ = tokio::time::timeout(OPENING, opened).await;
        }
        hold
    }

    /// Starts the listener unless one runs: the receiver hears when its stream opened.
    fn start(&self) -> Option<oneshot::Receiver<()>> {
        if self.unoffered.load(Ordering::Relaxed) || self.running.swap(true, Ordering::AcqRel) {
            return None;
        }
        let Some(me) = self.me.get().cloned() else {
            self.running.store(false, Ordering::Release);
            return None;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.running.store(false, Ordering::Release);
            return None;
        };
        let (opened, heard) = oneshot::channel();
        let task = runtime.spawn(listen(me, opened));
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
        Some(heard)
    }

    /// Stops the listener (the session is closed).
    pub(super) fn stop(&self) {
        if let Some(task) = self.listener.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

/// A call's hold on the session's GET-stream requests; released when dropped.
pub(super) struct Hold<'a> {
    asked: &'a Asked,
    number: u64,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut agent = self.asked.agent();
        if agent.as_ref().is_some_and(|(n, _)| *n == self.number) {
            *agent = None;
        }
        drop(agent);
        self.asked.released_ms.store(self.asked.now_ms(), Ordering::Relaxed);
        self.asked.holding.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HttpSession {
    /// Lets the session listen on its GET stream while a call whose agent can be asked holds
    /// it (a pooled session the server gave an id).
    pub fn listen_for_asks(self: &Arc<Self>) {
        if self.has_session_id() {
            let _ = self.asked.me.set(Arc::downgrade(self));
        }
    }
}

/// Holds no strong reference while it waits, so a session nobody uses any more is closed
/// (its `close` stops this task).
async fn listen(session: Weak<HttpSession>, opened: oneshot::Sender<()>) {
    let mut opened = Some(opened);
    let mut failures = 0;
    let mut parser = EventParser::new(MAX_RESPONSE_BYTES);
    loop {
        let Some(strong) = session.upgrade() else { return };
        if strong.asked.idle() && stopped(&strong.asked) {
            return;
        }
        let result = strong.open_stream_after(parser.last_event_id()).await;
        if let Some(opened) = opened.take() {
            let _ = opened.send(());
        }
        let mut stream = match result {
            Ok(Some(stream)) => stream,
            Ok(None) => {
                strong.asked.unoffered.store(true, Ordering::Relaxed);
                strong.asked.running.store(false, Ordering::Release);
                return;
            }
            Err(f) => {
                tracing::debug!(failure = ?f, "a downstream session's GET stream did not open");
                failures += 1;
                if failures >= MAX_FAILURES {
                    strong.asked.running.store(false, Ordering::Release);
                    return;
                }
                drop(strong);
                tokio::time::sleep(REOPEN * failures).await;
                continue;
            }
        };
        drop(strong);
        parser = parser.resumed();
        let mut heard = false;
        let mut events = std::collections::VecDeque::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            let chunk = tokio::select! {
                chunk = stream.chunk() => chunk,
                _ = tick.tick() => {
                    match session.upgrade() {
                        Some(s) if s.asked.idle() && stopped(&s.asked) => return,
                        Some(_) => continue,
                        None => return,
                    }
                }
            };
            let Ok(Some(chunk)) = chunk else { break };
            if parser.feed(&chunk, &mut events).is_err() {
                break;
            }
            while let Some(event) = events.pop_front() {
                heard = true;
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else { continue };
                if event.kind == "message" && message.get("method").is_some() && message.get("id").is_some() {
                    tokio::spawn(answer(session.clone(), message));
                }
            }
        }
        failures = if heard { 0 } else { failures + 1 };
        if failures >= MAX_FAILURES {
            if let Some(s) = session.upgrade() {
                s.asked.running.store(false, Ordering::Release);
            }
            return;
        }
        tokio::time::sleep(parser.retry().unwrap_or(REOPEN)).await;
    }
}

/// The listener, idle, lets go: true unless a call took hold meanwhile (then it carries on).
fn stopped(asked: &Asked) -> bool {
    asked.running.store(false, Ordering::Release);
    if asked.holding.load(Ordering::Acquire) == 0 {
        return true;
    }
    // A call took hold as the listener decided to stop: keep listening for it, unless
    // another listener was started for it in between.
    asked.running.swap(true, Ordering::AcqRel)
}

/// One request from the GET stream: to the agent of the call holding the session, if any.
async fn answer(session: Weak<HttpSession>, request: Value) {
    let agent = match request["method"].as_str() {
        Some("ping") => None,
        _ => session.upgrade().and_then(|s| s.asked.agent().as_ref().map(|(_, upstream)| upstream.clone())),
    };
    let answered = match agent {
        Some(upstream) => Some(upstream.downstream_request(request.clone()).await),
        None => None,
    };
    let Some(session) = session.upgrade() else { return };
    match answered {
        Some(answer) => session.send_answer(&answer).await,
        None => session.answer_unattended(&request).await,
    }
}
