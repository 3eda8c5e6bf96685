//! `gatehouse serve`: database (given or embedded), migrations, HTTP, graceful shutdown.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::{net::TcpListener, sync::watch};

use crate::{
    AppState, Services,
    config::{Config, Secret},
    db::{Db, embedded, migrate},
    dev_idp::DevIdp,
    oidc::{ClientAuth, ProviderConfig, RelyingParty},
};

/// Where the database is: a URL given by the operator, or the embedded cluster we started.
pub struct Database {
    pub owner_url: Secret,
    pub cluster: Option<embedded::Cluster>,
}

impl Database {
    /// `DATABASE_URL`, or the embedded cluster in the data dir (started if needed). Applies
    /// pending migrations either way.
    pub async fn open(config: &Config) -> anyhow::Result<Database> {
        let database = match &config.database_url {
            Some(url) => Database { owner_url: url.clone(), cluster: None },
            None => {
                let cluster = embedded::Cluster::start(&config.data_dir, &[]).await?;
                Database { owner_url: cluster.owner_url(embedded::DATABASE), cluster: Some(cluster) }
            }
        };
        // Behind a transaction pooler the migrator's advisory lock needs a session of its
        // own: `GATEHOUSE_MIGRATE_URL` goes to the primary directly.
        migrate::run(config.migrate_url.as_ref().unwrap_or(&database.owner_url)).await.context("cannot apply migrations")?;
        Ok(database)
    }

    /// The application pool on this database, through the configured pooler.
    pub async fn connect(&self, config: &Config, max_connections: u32) -> crate::error::Result<Db> {
        Ok(Db::connect_through(&self.owner_url, max_connections, config.db_pooler, config.migrate_url.as_ref())
            .await?
            .with_ack_wait(Duration::from_millis(config.replicas.ack_wait_ms)))
    }

    /// Stops the embedded cluster if we were its last user.
    pub async fn close(self) -> anyhow::Result<()> {
        if let Some(cluster) = self.cluster {
            cluster.release().await?;
        }
        Ok(())
    }
}

/// The relying party, pointed at the configured provider or at the development one.
pub fn sign_in(config: &Config) -> anyhow::Result<(Arc<RelyingParty>, Option<Arc<DevIdp>>)> {
    let redirect_uri = format!("{}/auth/callback", config.public_url);
    let http = crate::oidc::http_client()?;
    Ok(match &config.oidc_issuer {
        Some(issuer) => {
            let provider = ProviderConfig {
                issuer: issuer.clone(),
                client_id: config.oidc_client_id.clone().unwrap_or_default(),
                auth: match config.oidc_client_secret.as_ref() {
                    Some(s) => ClientAuth::Basic(s.expose().to_owned()),
                    None => ClientAuth::None,
                },
                redirect_uri,
            };
            (Arc::new(RelyingParty::new(provider, http)), None)
        }
        None => {
            let idp = DevIdp::load_or_create(&config.data_dir, &config.public_url)?;
            tracing::warn!(issuer = %idp.issuer, "development sign-in is active: anyone can sign in as anyone");
            let provider = ProviderConfig {
                issuer: idp.issuer.clone(),
                client_id: crate::dev_idp::CLIENT_ID.into(),
                auth: ClientAuth::Basic(idp.client_secret.clone()),
                redirect_uri,
            };
            (Arc::new(RelyingParty::new(provider, http)), Some(Arc::new(idp)))
        }
    })
}

/// Runs the server until SIGTERM or SIGINT, then drains in-flight requests for at most
/// `shutdown_grace_ms` and exits.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    let database = Database::open(&config).await?;
    let db = database.connect(&config, config.db_max_connections).await?;
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("cannot listen on {}", config.listen))?;
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    let listen = listener.local_addr()?;
    let (rp, dev_idp) = sign_in(&config)?;
    let downstreams = Arc::new(crate::gateway::downstream::Downstreams::new(
        crate::gateway::outbound::Outbound::new()?,
        config.tenant_concurrency,
        config.sessions,
    ));
    let (ops, ops_writer) = crate::ops::Recorder::start(db.clone());
    let (activity, activity_writer) = crate::gateway::activity::Recorder::start(db.clone(), ops.clone());
    let code = Arc::new(crate::code::Executor::new(config.code.clone()));
    let mailer = crate::connect_links::mail::Mailer::from_config(&config)?.map(|m| Arc::new(m.with_ops(ops.clone())));
    let state = AppState::new(Services {
        db: db.clone(),
        config: Arc::new(config),
        rp,
        sso: Arc::new(crate::oidc::tenant::Parties::new(crate::oidc::http_client()?)),
        dev_idp,
        downstreams,
        log_levels: Arc::new(crate::gateway::log_levels::LogLevels::new(db.clone())),
        activity,
        ops,
        machines: Arc::default(),
        mcp_tokens: Arc::default(),
        bound: Arc::default(),
        credentials: Arc::default(),
        peers: Arc::default(),
        code,
        oauth: Arc::new(crate::oauth::Oauth::new(crate::oidc::http_client()?)),
        quotas: Arc::new(crate::quotas::Budgets::new(db.clone())),
        mailer,
    });
    // Revocation intents a crash left unsettled: every replica sweeps (claims keep it once).
    let sweeper = state.config.vault_keys.is_some().then(|| tokio::spawn(crate::oauth::sweep::run(state.clone())));
    // Copy moves a crash left pending, eligible wipes and expired forks: every replica sweeps.
    let copy_sweeper = tokio::spawn(crate::copies::sweep::run(state.clone()));
    // Reaps a crash left claimed but unfinished: every replica sweeps (a takeover is once).
    let reap_sweeper = tokio::spawn(crate::reap::run(state.db.clone(), state.config.copies.snapshot_dir.clone()));
    // Scheduled invariant checks (one replica per round) and the stale-findings sweep.
    let invariants = tokio::spawn(crate::findings::invariants::run(state.db.clone()));
    // Idempotency keys older than 24 hours.
    let idempotency_sweeper = tokio::spawn(crate::idempotency::run(state.db.clone()));
    // The replica registry: a lease, the LISTEN connection and the acknowledgements that let
    // the hot path use applied epochs instead of reading them per request (issue 20).
    let registry = tokio::spawn(crate::db::replica::run(state.db.clone(), state.config.replicas, listen.to_string()));
    // Settles this replica's quota slices and renews its concurrency slots.
    let (quota_stop, quota_stopped) = watch::channel(false);
    let quota_tender = tokio::spawn(state.quotas.clone().run(quota_stopped));
    let quotas = state.quotas.clone();
    let app = crate::http::service(state);

    // Signal handlers go in before we announce readiness, so an early SIGTERM is not lost.
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = tokio::spawn(async move {
        axum::serve(listener, axum::ServiceExt::into_make_service(app))
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })
            .await
    });
    tracing::info!(
        %listen,
        embedded = database.cluster.is_some(),
        ready_ms = started.elapsed().as_millis() as u64,
        "gatehouse ready"
    );

    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
    }
    tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down: draining in-flight requests");
    let _ = stop_tx.send(true);
    // Open GET streams never finish on their own.
    crate::gateway::listen::close_all();
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    copy_sweeper.abort();
    reap_sweeper.abort();
    invariants.abort();
    idempotency_sweeper.abort();
    registry.abort();
    crate::db::replica::leave(&db).await;
    match tokio::time::timeout(grace, server).await {
        Ok(joined) => joined.context("server task failed")?.context("server failed")?,
        Err(_) => tracing::warn!("drain deadline passed; closing remaining connections"),
    }
    // What this replica leased and did not use goes back to the ledger, after the tender's
    // last round (never cut short: it may hold counts it took out of a window).
    let _ = quota_stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), quota_tender).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), quotas.release_all()).await;
    // The writer ends once every handle to the queue is gone, after writing what is queued.
    let _ = tokio::time::timeout(Duration::from_secs(5), activity_writer).await;
    // The activity writer held the last other handle to the ops queue (for its lost batches).
    let _ = tokio::time::timeout(Duration::from_secs(5), ops_writer).await;
    db.close().await;
    database.close().await?;
    tracing::info!("stopped");
    Ok(())
}
