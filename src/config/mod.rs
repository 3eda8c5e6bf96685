//! One typed configuration, read once from the environment and validated at boot.
//!
//! Every bad value is reported with the variable's name; all problems are collected so an
//! operator fixes them in one pass instead of one restart per mistake.

mod secret;

use std::{net::SocketAddr, path::PathBuf};

pub use secret::Secret;

/// Deployment mode. Production refuses the development conveniences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Environment {
    Development,
    Production,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `DATABASE_URL`; `None` means the embedded private cluster in `data_dir`.
    pub database_url: Option<Secret>,
    pub listen: SocketAddr,
    /// `GATEHOUSE_PUBLIC_URL`, without a trailing slash.
    pub public_url: String,
    pub data_dir: PathBuf,
    pub env: Environment,
    pub oidc_issuer: Option<String>,
    pub oidc_client_id: Option<String>,
    pub oidc_client_secret: Option<Secret>,
    /// `GATEHOUSE_VAULT_KEYS`, parsed; `None`: the vault is off and credential slots cannot
    /// be managed or used.
    pub vault_keys: Option<crate::vault::KeyRing>,
    pub otlp_endpoint: Option<String>,
    /// `GATEHOUSE_SMTP_URL` (`smtps://user:password@host`, `smtp://host:25?tls=required`, …):
    /// mail (connect links) is sent by SMTP; unset, it waits in the outbox for the operator.
    pub smtp_url: Option<Secret>,
    /// `GATEHOUSE_SMTP_FROM`, the sender (default `Gatehouse <gatehouse@localhost>`).
    pub smtp_from: String,
    /// `GATEHOUSE_PLATFORM_ADMINS`: comma-separated email addresses (as the OIDC provider
    /// asserts them, lowercased) of the people who may use the platform API (issues, platform
    /// reports). Empty: nobody; the CLI stays the platform admins' tool.
    pub platform_admins: Vec<String>,
    /// How long in-flight requests may drain after SIGTERM/SIGINT.
    pub shutdown_grace_ms: u64,
    pub request_timeout_ms: u64,
    pub body_limit_bytes: usize,
    pub db_max_connections: u32,
    /// `GATEHOUSE_DB_POOLER`: `session` (default: straight to PostgreSQL, or a pooler in
    /// session mode) or `transaction` (pgbouncer in transaction mode).
    pub db_pooler: Pooler,
    /// `GATEHOUSE_MIGRATE_URL`: a direct (unpooled) URL of the primary, for migrations (they
    /// hold a session-level advisory lock) and the replica's `LISTEN` session. Required with
    /// `GATEHOUSE_DB_POOLER=transaction`; otherwise `DATABASE_URL` serves both.
    pub migrate_url: Option<Secret>,
    /// Live access tokens a tenant may hold (`GATEHOUSE_TOKEN_CAP`, 1–1000).
    pub token_cap: i32,
    /// Downstream calls one tenant may have in flight per replica (`GATEHOUSE_TENANT_CONCURRENCY`).
    pub tenant_concurrency: usize,
    /// Pools of stateful downstream sessions (`GATEHOUSE_DOWNSTREAM_*`).
    pub sessions: SessionsConfig,
    /// Limits of `execute_code` programs (`GATEHOUSE_CODE_*`).
    pub code: CodeConfig,
    /// Redirect URIs of MCP clients allowed besides loopback ones (exact match), e.g. the
    /// public callback URLs of hosted agents (`GATEHOUSE_MCP_REDIRECT_URIS`, comma-separated).
    pub mcp_redirect_uris: Vec<String>,
    /// Lifetime of an MCP OAuth access token (`GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS`, default 1 h).
    pub mcp_access_token_ttl_secs: u64,
    /// The copy ledger, its recovery sweep, forks and snapshot files (`GATEHOUSE_COPY_*`).
    pub copies: CopiesConfig,
    /// The replica registry and acknowledged invalidation (`GATEHOUSE_REPLICA_*`).
    pub replicas: ReplicaConfig,
}

/// How the application pool reaches PostgreSQL (`GATEHOUSE_DB_POOLER`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Straight to the server, or through a pooler in session mode: a connection is one
    /// server session for its whole life.
    #[default]
    Session,
    /// Through a pooler in transaction mode (pgbouncer `pool_mode = transaction`): only a
    /// transaction is pinned to one server session. Nothing may rely on session state, so no
    /// statement is cached between transactions, every statement runs inside a transaction,
    /// and every transaction starts by dropping what another client prepared on its session.
    Transaction,
}

/// Leases of the replica registry (issue 20): how a replica earns the right to answer from its
/// caches without reading the epoch per request, and how long a change waits for replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// A replica's lease in the registry (`GATEHOUSE_REPLICA_LEASE_MS`, default 5 s).
    pub lease_ms: u64,
    /// How often a replica renews it (`GATEHOUSE_REPLICA_RENEW_MS`, default 1 s).
    pub renew_ms: u64,
    /// How much earlier than the database a replica considers its own lease over, on its own
    /// monotonic clock (`GATEHOUSE_REPLICA_MARGIN_MS`, default 1 s): it fences itself first.
    pub margin_ms: u64,
    /// How long a change that moved an epoch waits for every live replica's acknowledgement
    /// before answering 503 `replicas_unconfirmed` (`GATEHOUSE_REPLICA_ACK_WAIT_MS`, default
    /// 10 s; longer than the lease, so a silent replica's lease lapses first).
    pub ack_wait_ms: u64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig { lease_ms: 5_000, renew_ms: 1_000, margin_ms: 1_000, ack_wait_ms: 10_000 }
    }
}

/// Pools of downstream MCP sessions (issue 19 §6): one `deadpool` pool per (connector
/// configuration, credential owner) and replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionsConfig {
    /// Sessions one pool may hold open at once (`GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL`,
    /// default 32, the per-tenant share of in-flight calls, so the bound adds no wait of its
    /// own at the defaults); a call that needs a session of its own waits for one past it.
    pub max_sessions_per_pool: usize,
    /// Pools one replica keeps (`GATEHOUSE_DOWNSTREAM_SESSION_POOLS`, default 1024); past it
    /// the least recently used pool is closed (its sessions deleted at the downstream).
    pub max_pools: usize,
    /// A session that answered within this long is handed out without a liveness `ping`
    /// (`GATEHOUSE_DOWNSTREAM_SESSION_TRUST_MS`, default 5 s; 0 pings on every checkout).
    pub trust_ms: u64,
    /// How long the liveness `ping` may take before the session is replaced
    /// (`GATEHOUSE_DOWNSTREAM_SESSION_PING_MS`, default 2 s).
    pub ping_timeout_ms: u64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig { max_sessions_per_pool: 32, max_pools: 1024, trust_ms: 5_000, ping_timeout_ms: 2_000 }
    }
}

/// Settings of the copy ledger (issue 7 §3–4).
#[derive(Clone, Debug)]
pub struct CopiesConfig {
    /// How long a move's pending rows are its own before the sweep may claim them
    /// (`GATEHOUSE_COPY_LEASE_MS`, default 5 min). Longer than any move's copy step can take.
    pub lease_ms: u64,
    /// How often each replica runs the recovery sweep (`GATEHOUSE_COPY_SWEEP_MS`, default 30 s).
    pub sweep_every_ms: u64,
    /// Where snapshot files go (`GATEHOUSE_SNAPSHOT_DIR`, default `<data dir>/snapshots`). Every
    /// replica must see the same directory (a shared volume), so any replica's sweep can wipe.
    pub snapshot_dir: PathBuf,
    /// A test-only crash point (`GATEHOUSE_FAULT`, e.g. `fork.after_record`): the process aborts
    /// there. Refused in production.
    pub fault: Option<String>,
}

/// Limits of `execute_code`: each is enforced with its own error code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeConfig {
    /// JavaScript heap per program (`GATEHOUSE_CODE_HEAP_BYTES`, default 64 MiB).
    pub heap_bytes: usize,
    /// Guest CPU time per program; waiting on host calls does not count (`GATEHOUSE_CODE_CPU_MS`, 250).
    pub cpu_ms: u64,
    /// Wall clock per program (`GATEHOUSE_CODE_WALL_MS`, 30,000).
    pub wall_ms: u64,
    /// Host calls per program; the next one ends the run (`GATEHOUSE_CODE_HOST_CALLS`, 20).
    pub host_calls: u32,
    /// Deadline of one host call (`GATEHOUSE_CODE_HOST_CALL_TIMEOUT_MS`, 15,000).
    pub host_call_timeout_ms: u64,
    /// A larger result is stashed and paged (`GATEHOUSE_CODE_RESULT_CHARS`, 24,000).
    pub result_chars: usize,
    /// Captured console output (`GATEHOUSE_CODE_LOG_CHARS`, 4,000).
    pub log_chars: usize,
    /// Emitted content blocks, in bytes and in number (`GATEHOUSE_CODE_EMIT_BYTES` 4,000,000, `…_EMIT_BLOCKS` 32).
    pub emit_bytes: usize,
    pub emit_blocks: usize,
    /// Writes per program on a trusted pool (`GATEHOUSE_CODE_WRITES`, 10).
    pub writes: u32,
    /// Programs running at once per replica (`GATEHOUSE_CODE_RUNNING`, 2) and waiting (`GATEHOUSE_CODE_QUEUED`, 8).
    pub running: usize,
    pub queued: usize,
    /// How long a program may wait for a slot before `executor_overloaded` (`GATEHOUSE_CODE_QUEUE_TIMEOUT_MS`, 5,000).
    pub queue_timeout_ms: u64,
    /// One tenant's share: programs running (`GATEHOUSE_CODE_TENANT_RUNNING`, default one less than
    /// `running`, at least 1) and waiting (`GATEHOUSE_CODE_TENANT_QUEUED`, default half of `queued`, at least 1).
    pub tenant_running: usize,
    pub tenant_queued: usize,
}

impl Default for CodeConfig {
    fn default() -> Self {
        CodeConfig {
            heap_bytes: 64 << 20,
            cpu_ms: 250,
            wall_ms: 30_000,
            host_calls: 20,
            host_call_timeout_ms: 15_000,
            result_chars: 24_000,
            log_chars: 4_000,
            emit_bytes: 4_000_000,
            emit_blocks: 32,
            writes: 10,
            running: 2,
            queued: 8,
            queue_timeout_ms: 5_000,
            tenant_running: 1,
            tenant_queued: 4,
        }
    }
}

impl Config {
    /// `scheme://host[:port]` of the public URL: what a same-origin `Origin` header says.
    pub fn public_origin(&self) -> &str {
        let after_scheme = self.public_url.find("://").map_or(0, |i| i + 3);
        match self.public_url[after_scheme..].find('/') {
            Some(i) => &self.public_url[..after_scheme + i],
            None => &self.public_url,
        }
    }

    /// Cookies are Secure except on plain-http loopback (local development).
    pub fn cookie_secure(&self) -> bool {
        let origin = self.public_origin();
        let Some(host) = origin.strip_prefix("http://") else { return true };
        let host =
            host.rsplit_once(':').map_or(host, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { host });
        !(host == "localhost" || host == "[::1]" || host.starts_with("127."))
    }

    /// Whether the built-in development sign-in provider is active.
    pub fn dev_sign_in(&self) -> bool {
        self.oidc_issuer.is_none() && self.env == Environment::Development
    }
}

/// One problem with one variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub var: &'static str,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n{}", .0.iter().map(|p| format!("  {}: {}", p.var, p.message)).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError(pub Vec<ConfigProblem>);

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads configuration through `lookup`, so tests can pass a map instead of mutating the
    /// process environment. Empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |k: &str| lookup(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let mut problems = Vec::new();
        let mut bad = |var: &'static str, message: String| problems.push(ConfigProblem { var, message });

        let env = match get("GATEHOUSE_ENV").as_deref() {
            None | Some("development") => Environment::Development,
            Some("production") => Environment::Production,
            Some(other) => {
                bad("GATEHOUSE_ENV", format!("must be `development` or `production`, not `{other}`"));
                Environment::Development
            }
        };

        let listen = match get("GATEHOUSE_LISTEN") {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(v) => v.parse().unwrap_or_else(|_| {
                bad("GATEHOUSE_LISTEN", format!("must be an address and port such as 127.0.0.1:8080, not `{v}`"));
                SocketAddr::from(([127, 0, 0, 1], 8080))
            }),
        };

        let public_url = match get("GATEHOUSE_PUBLIC_URL") {
            None => format!("http://{listen}"),
            Some(v) => {
                let trimmed = v.trim_end_matches('/').to_owned();
                if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) || trimmed.contains(char::is_whitespace) {
                    bad("GATEHOUSE_PUBLIC_URL", "must be an absolute http:// or https:// URL".into());
                } else if trimmed["https://".len().min(trimmed.len())..].contains('@') {
                    bad("GATEHOUSE_PUBLIC_URL", "must not contain user information".into());
                }
                trimmed
            }
        };

        let database_url = get("DATABASE_URL").map(Secret::new);
        if let Some(url) = &database_url
            && !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://"))
        {
            bad("DATABASE_URL", "must be a postgres:// or postgresql:// URL".into());
        }

        let oidc_issuer = get("GATEHOUSE_OIDC_ISSUER");
        if let Some(issuer) = &oidc_issuer {
            if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
                bad("GATEHOUSE_OIDC_ISSUER", "must be an http(s) URL of an OpenID provider".into());
            }
        } else if env == Environment::Production {
            bad(
                "GATEHOUSE_OIDC_ISSUER",
                "is required when GATEHOUSE_ENV=production (the built-in development sign-in is refused in production)".into(),
            );
        }

        if oidc_issuer.is_some() && get("GATEHOUSE_OIDC_CLIENT_ID").is_none() {
            bad("GATEHOUSE_OIDC_CLIENT_ID", "is required with GATEHOUSE_OIDC_ISSUER".into());
        }

        let mut number = |var: &'static str, default: u64, min: u64, max: u64| -> u64 {
            match get(var) {
                None => default,
                Some(v) => match v.parse::<u64>() {
                    Ok(n) if (min..=max).contains(&n) => n,
                    _ => {
                        bad(var, format!("must be a whole number from {min} to {max}, not `{v}`"));
                        default
                    }
                },
            }
        };
        let shutdown_grace_ms = number("GATEHOUSE_SHUTDOWN_GRACE_MS", 10_000, 0, 600_000);
        let request_timeout_ms = number("GATEHOUSE_REQUEST_TIMEOUT_MS", 60_000, 100, 3_600_000);
        let body_limit_bytes = number("GATEHOUSE_BODY_LIMIT_BYTES", 1 << 20, 1024, 64 << 20) as usize;
        let db_max_connections = number("GATEHOUSE_DB_MAX_CONNECTIONS", 16, 1, 1000) as u32;
        let token_cap = number("GATEHOUSE_TOKEN_CAP", 100, 1, 1000) as i32;
        let tenant_concurrency = number("GATEHOUSE_TENANT_CONCURRENCY", 32, 1, 10_000) as usize;
        let d = SessionsConfig::default();
        let sessions = SessionsConfig {
            max_sessions_per_pool: number("GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL", d.max_sessions_per_pool as u64, 1, 1_000)
                as usize,
            max_pools: number("GATEHOUSE_DOWNSTREAM_SESSION_POOLS", d.max_pools as u64, 1, 1_000_000) as usize,
            trust_ms: number("GATEHOUSE_DOWNSTREAM_SESSION_TRUST_MS", d.trust_ms, 0, 3_600_000),
            ping_timeout_ms: number("GATEHOUSE_DOWNSTREAM_SESSION_PING_MS", d.ping_timeout_ms, 10, 600_000),
        };
        let d = CodeConfig::default();
        let running = number("GATEHOUSE_CODE_RUNNING", d.running as u64, 1, 256) as usize;
        let queued = number("GATEHOUSE_CODE_QUEUED", d.queued as u64, 0, 10_000) as usize;
        let code = CodeConfig {
            heap_bytes: number("GATEHOUSE_CODE_HEAP_BYTES", d.heap_bytes as u64, 1 << 20, 4 << 30) as usize,
            cpu_ms: number("GATEHOUSE_CODE_CPU_MS", d.cpu_ms, 1, 600_000),
            wall_ms: number("GATEHOUSE_CODE_WALL_MS", d.wall_ms, 10, 3_600_000),
            host_calls: number("GATEHOUSE_CODE_HOST_CALLS", d.host_calls as u64, 0, 10_000) as u32,
            host_call_timeout_ms: number("GATEHOUSE_CODE_HOST_CALL_TIMEOUT_MS", d.host_call_timeout_ms, 10, 3_600_000),
            result_chars: number("GATEHOUSE_CODE_RESULT_CHARS", d.result_chars as u64, 100, 10_000_000) as usize,
            log_chars: number("GATEHOUSE_CODE_LOG_CHARS", d.log_chars as u64, 0, 10_000_000) as usize,
            emit_bytes: number("GATEHOUSE_CODE_EMIT_BYTES", d.emit_bytes as u64, 0, 64 << 20) as usize,
            emit_blocks: number("GATEHOUSE_CODE_EMIT_BLOCKS", d.emit_blocks as u64, 0, 1_000) as usize,
            writes: number("GATEHOUSE_CODE_WRITES", d.writes as u64, 0, 1_000) as u32,
            running,
            queued,
            queue_timeout_ms: number("GATEHOUSE_CODE_QUEUE_TIMEOUT_MS", d.queue_timeout_ms, 0, 600_000),
            tenant_running: number("GATEHOUSE_CODE_TENANT_RUNNING", running.saturating_sub(1).max(1) as u64, 1, running as u64)
                as usize,
            tenant_queued: number("GATEHOUSE_CODE_TENANT_QUEUED", (queued / 2).max(1) as u64, 1, queued.max(1) as u64) as usize,
        };

        let mcp_access_token_ttl_secs = number("GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS", 3600, 1, 86_400);
        let copy_lease_ms = number("GATEHOUSE_COPY_LEASE_MS", 300_000, 100, 86_400_000);
        let copy_sweep_ms = number("GATEHOUSE_COPY_SWEEP_MS", 30_000, 50, 3_600_000);
        let r = ReplicaConfig::default();
        let replicas = ReplicaConfig {
            lease_ms: number("GATEHOUSE_REPLICA_LEASE_MS", r.lease_ms, 200, 600_000),
            renew_ms: number("GATEHOUSE_REPLICA_RENEW_MS", r.renew_ms, 20, 600_000),
            margin_ms: number("GATEHOUSE_REPLICA_MARGIN_MS", r.margin_ms, 10, 600_000),
            ack_wait_ms: number("GATEHOUSE_REPLICA_ACK_WAIT_MS", r.ack_wait_ms, 100, 3_600_000),
        };
        if replicas.renew_ms + replicas.margin_ms >= replicas.lease_ms {
            bad(
                "GATEHOUSE_REPLICA_RENEW_MS",
                "with GATEHOUSE_REPLICA_MARGIN_MS must be shorter than GATEHOUSE_REPLICA_LEASE_MS".into(),
            );
        }
        if replicas.ack_wait_ms <= replicas.lease_ms {
            bad("GATEHOUSE_REPLICA_ACK_WAIT_MS", "must be longer than GATEHOUSE_REPLICA_LEASE_MS".into());
        }
        let mut mcp_redirect_uris = Vec::new();
        for uri in get("GATEHOUSE_MCP_REDIRECT_URIS").unwrap_or_default().split(',').map(str::trim).filter(|u| !u.is_empty()) {
            match url::Url::parse(uri) {
                Ok(u) if u.scheme() == "https" && u.fragment().is_none() && u.username().is_empty() => {
                    mcp_redirect_uris.push(uri.to_owned())
                }
                _ => bad("GATEHOUSE_MCP_REDIRECT_URIS", format!("`{uri}` is not an https URL without a fragment")),
            }
        }

        // Never echo the value: it is key material.
        let vault_keys = get("GATEHOUSE_VAULT_KEYS").and_then(|spec| match crate::vault::KeyRing::parse(&spec) {
            Ok(ring) => Some(ring),
            Err(message) => {
                bad("GATEHOUSE_VAULT_KEYS", format!("{message} (expected `kid:base64-of-32-bytes,…`, the first key seals)"));
                None
            }
        });

        let smtp_url = get("GATEHOUSE_SMTP_URL").map(Secret::new);
        if let Some(url) = &smtp_url
            && lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url.expose()).is_err()
        {
            // Never echo the URL: it may carry a password.
            bad("GATEHOUSE_SMTP_URL", "not an SMTP URL (smtp://, smtps://, with ?tls=required or opportunistic)".into());
        }
        let smtp_from = get("GATEHOUSE_SMTP_FROM").unwrap_or_else(|| "Gatehouse <gatehouse@localhost>".into());
        if smtp_from.parse::<lettre::message::Mailbox>().is_err() {
            bad("GATEHOUSE_SMTP_FROM", "not a mailbox (`Name <address>` or `address`)".into());
        }

        let platform_admins: Vec<String> = get("GATEHOUSE_PLATFORM_ADMINS")
            .map(|v| v.split(',').map(|e| e.trim().to_lowercase()).filter(|e| !e.is_empty()).collect())
            .unwrap_or_default();
        if platform_admins.iter().any(|e| !e.contains('@') || e.contains(char::is_whitespace)) {
            bad("GATEHOUSE_PLATFORM_ADMINS", "must be comma-separated email addresses".into());
        }

        let data_dir = get("GATEHOUSE_DATA_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".gatehouse"));
        let fault = get("GATEHOUSE_FAULT");
        if fault.is_some() && env == Environment::Production {
            bad("GATEHOUSE_FAULT", "is a test-only crash point and is refused when GATEHOUSE_ENV=production".into());
        }
        let copies = CopiesConfig {
            lease_ms: copy_lease_ms,
            sweep_every_ms: copy_sweep_ms,
            snapshot_dir: get("GATEHOUSE_SNAPSHOT_DIR").map(PathBuf::from).unwrap_or_else(|| data_dir.join("snapshots")),
            fault,
        };
        let db_pooler = match get("GATEHOUSE_DB_POOLER").as_deref() {
            None | Some("session") => Pooler::Session,
            Some("transaction") => Pooler::Transaction,
            Some(other) => {
                bad("GATEHOUSE_DB_POOLER", format!("must be `session` or `transaction`, not `{other}`"));
                Pooler::Session
            }
        };
        let migrate_url = get("GATEHOUSE_MIGRATE_URL").map(Secret::new);
        if let Some(url) = &migrate_url
            && !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://"))
        {
            bad("GATEHOUSE_MIGRATE_URL", "must be a postgres:// or postgresql:// URL".into());
        }
        if db_pooler == Pooler::Transaction {
            if database_url.is_none() {
                bad("GATEHOUSE_DB_POOLER", "`transaction` needs DATABASE_URL (the embedded cluster has no pooler)".into());
            }
            if migrate_url.is_none() {
                bad(
                    "GATEHOUSE_MIGRATE_URL",
                    "is required with GATEHOUSE_DB_POOLER=transaction: migrations and LISTEN need a direct session".into(),
                );
            }
        }
        let config = Config {
            database_url,
            listen,
            public_url,
            data_dir,
            env,
            oidc_issuer,
            oidc_client_id: get("GATEHOUSE_OIDC_CLIENT_ID"),
            oidc_client_secret: get("GATEHOUSE_OIDC_CLIENT_SECRET").map(Secret::new),
            vault_keys,
            otlp_endpoint: get("OTEL_EXPORTER_OTLP_ENDPOINT"),
            smtp_url,
            smtp_from,
            platform_admins,
            shutdown_grace_ms,
            request_timeout_ms,
            body_limit_bytes,
            db_max_connections,
            db_pooler,
            migrate_url,
            token_cap,
            tenant_concurrency,
            sessions,
            code,
            mcp_redirect_uris,
            mcp_access_token_ttl_secs,
            copies,
            replicas,
        };
        if problems.is_empty() { Ok(config) } else { Err(ConfigError(problems)) }
    }
}

#[cfg(test)]
mod tests;
