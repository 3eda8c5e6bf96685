//! Gatehouse on a real HA PostgreSQL (issue 21 §3): three PostgreSQL 15 nodes under Debian's
//! Patroni (`synchronous_mode: true`, so an acknowledged commit is on two nodes), etcd as the
//! DCS, haproxy routing to the leader by Patroni's REST health check, pgbouncer in transaction
//! mode in front of it, and three `gatehouse serve` processes behind haproxy's round robin.
//!
//! A load driver runs against the load balancer the whole time: a compare-and-set chain on one
//! key, kv writes under `Idempotency-Key` (retried with the same key until acknowledged), token
//! creation and revocation by a signed-in person, and MCP `call_tool`. It records every write
//! that was acknowledged. Three events happen under load, in turn: the leader is killed with
//! SIGKILL (Patroni promotes the synchronous standby), the old leader is started again and
//! rejoins as a replica, and a `patronictl switchover` moves the leadership back to it.
//!
//! Afterwards every acknowledged write is present exactly once: the chain's admin-log rows are
//! 1..=N with no gap and no value twice, no acknowledged value was won twice, every acknowledged
//! kv write has exactly one admin-log row, every acknowledged token exists once, and every
//! acknowledged revocation is refused by each replica while an unrevoked token still works.
//! The unavailability window and the failed requests of each event are printed (not asserted:
//! they are measurements, in docs/benchmarks.md).

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Everything, Machine, Served, cli, eventually, gatehouse, pooler, provision};
use gatehouse::{config::Secret, db::migrate};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use tokio::process::{Child, Command};

const SUPERUSER_PASSWORD: &str = "ha-superuser";
const OWNER_PASSWORD: &str = "ha-owner";

fn binary(candidates: &[&str], package: &str) -> PathBuf {
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists());
    found.unwrap_or_else(|| panic!("{} is not installed: apt-get install {package}", candidates[0]))
}

fn pg_bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("the PostgreSQL server packages are installed")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("postgres").exists())
        .collect();
    dirs.sort();
    dirs.pop().expect("a PostgreSQL server under /usr/lib/postgresql")
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// The postmaster's pid of a data directory, while it runs.
fn postmaster_pid(data: &Path) -> Option<i32> {
    std::fs::read_to_string(data.join("postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()
}

struct Node {
    name: String,
    pg_port: u16,
    api_port: u16,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    patroni: Option<Child>,
}

impl Node {
    fn start(&mut self, user: &nix::unistd::User, dir: &Path) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(binary(&["/usr/bin/patroni"], "patroni"))
            .arg(&self.config)
            .current_dir(dir)
            .env("HOME", dir)
            .uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start patroni");
        self.patroni = Some(child);
    }

    /// SIGKILL to Patroni and to its PostgreSQL: the node is gone, with no clean shutdown.
    fn kill(&mut self) {
        if let Some(mut child) = self.patroni.take() {
            let _ = child.start_kill();
        }
        if let Some(pid) = postmaster_pid(&self.data) {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    async fn role(&self) -> Option<&'static str> {
        let api = format!("http://127.0.0.1:{}", self.api_port);
        let ok = |path: &'static str| {
            let url = format!("{api}/{path}");
            async move { common::http().get(url).send().await.is_ok_and(|r| r.status() == 200) }
        };
        if ok("primary").await {
            Some("primary")
        } else if ok("sync").await {
            Some("sync")
        } else if ok("replica").await {
            Some("replica")
        } else {
            None
        }
    }
}

/// etcd, three Patroni nodes and haproxy (PostgreSQL's leader, and the web replicas).
struct Cluster {
    dir: PathBuf,
    user: nix::unistd::User,
    etcd: Child,
    nodes: Vec<Node>,
    haproxy: Child,
    /// haproxy's port for the PostgreSQL leader.
    pg_port: u16,
    /// haproxy's port for the `serve` replicas (round robin).
    web_port: u16,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.haproxy.start_kill();
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = self.etcd.start_kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("the HA cluster's files are kept in {}", self.dir.display());
        }
    }
}

impl Cluster {
    async fn start(web_backends: Vec<u16>) -> Cluster {
        let user = pooler::unprivileged().expect("run as root, with the postgres user of the PostgreSQL packages");
        let dir = std::env::temp_dir().join(format!("gatehouse-ha-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
        let (etcd_client, etcd_peer) = (common::free_port(), common::free_port());
        let etcd_log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let etcd = Command::new(binary(&["/usr/bin/etcd"], "etcd-server"))
            .args(["--name", "e0", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{etcd_client}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{etcd_client}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{etcd_peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{etcd_peer}")])
            .args(["--initial-cluster", &format!("e0=http://127.0.0.1:{etcd_peer}"), "--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(etcd_log.try_clone().unwrap())
            .stderr(etcd_log)
            .kill_on_drop(true)
            .spawn()
            .expect("start etcd");
        let up = eventually(Duration::from_secs(30), || async move {
            common::http().get(format!("http://127.0.0.1:{etcd_client}/health")).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        assert!(up, "etcd did not come up: {}", std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default());

        let bin_dir = pg_bin_dir();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let (pg_port, api_port) = (common::free_port(), common::free_port());
            let name = format!("n{i}");
            let data = dir.join(format!("pg{i}"));
            let config = dir.join(format!("{name}.yml"));
            std::fs::write(&config, patroni_config(&name, pg_port, api_port, etcd_client, &data, &bin_dir, &dir)).unwrap();
            let log = dir.join(format!("{name}.log"));
            nodes.push(Node { name, pg_port, api_port, config, data, log, patroni: None });
        }
        let pg_port = common::free_port();
        let web_port = common::free_port();
        let haproxy_config = dir.join("haproxy.cfg");
        std::fs::write(&haproxy_config, haproxy_config_text(pg_port, &nodes, web_port, &web_backends)).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::os::unix::fs::chown(entry.unwrap().path(), Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
        }
        // The first node bootstraps the cluster; the others then clone it.
        nodes[0].start(&user, &dir);
        let mut cluster = Cluster {
            dir: dir.clone(),
            user,
            etcd,
            nodes,
            haproxy: Command::new(binary(&["/usr/sbin/haproxy"], "haproxy"))
                .args(["-db", "-f"])
                .arg(&haproxy_config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("haproxy.log")).unwrap())
                .kill_on_drop(true)
                .spawn()
                .expect("start haproxy"),
            pg_port,
            web_port,
        };
        cluster.wait_for("the first node to lead", Duration::from_secs(90), |roles| roles[0] == Some("primary")).await;
        for i in 1..3 {
            let (user, dir) = (cluster.user.clone(), cluster.dir.clone());
            cluster.nodes[i].start(&user, &dir);
        }
        cluster.wait_healthy(Duration::from_secs(120)).await;
        cluster
    }

    async fn roles(&self) -> Vec<Option<&'static str>> {
        let mut roles = Vec::new();
        for node in &self.nodes {
            roles.push(if node.patroni.is_some() { node.role().await } else { None });
        }
        roles
    }

    async fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&[Option<&'static str>]) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            let roles = self.roles().await;
            if done(&roles) {
                return;
            }
            assert!(Instant::now() < deadline, "waited {within:?} for {what}; roles {roles:?}\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One leader, one synchronous standby and one more replica, all running.
    async fn wait_healthy(&self, within: Duration) {
        self.wait_for("a leader, a synchronous standby and a replica", within, |roles| {
            let count = |r: &str| roles.iter().filter(|x| **x == Some(r)).count();
            count("primary") == 1 && count("sync") == 1 && count("replica") == 1
        })
        .await;
    }

    async fn leader(&self) -> usize {
        let roles = self.roles().await;
        roles.iter().position(|r| *r == Some("primary")).expect("a leader")
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out += &format!("--- {} ---\n{}\n", node.name, tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        out
    }

    fn url(&self, user: &str, password: &str, database: &str) -> Secret {
        Secret::new(format!("postgres://{user}:{password}@127.0.0.1:{}/{database}", self.pg_port))
    }

    fn web(&self) -> String {
        format!("http://127.0.0.1:{}", self.web_port)
    }
}

fn patroni_config(name: &str, pg: u16, api: u16, etcd: u16, data: &Path, bin_dir: &Path, dir: &Path) -> String {
    // ttl 10 s: a dead leader's key expires within 10 s, then the synchronous standby (the only
    // candidate that has every acknowledged commit) is promoted.
    format!(
        r#"scope: gatehouse-ha
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        max_connections: 200
  initdb:
    - encoding: UTF8
    - auth: scram-sha-256
  pg_hba:
    - host replication replicator 127.0.0.1/32 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/pgpass-{name}
  authentication:
    replication:
      username: replicator
      password: ha-replicator
    superuser:
      username: postgres
      password: {SUPERUSER_PASSWORD}
    rewind:
      username: rewinder
      password: ha-rewinder
  parameters:
    unix_socket_directories: {dir}
"#,
        data = data.display(),
        bin = bin_dir.display(),
        dir = dir.display(),
    )
}

fn haproxy_config_text(pg_port: u16, nodes: &[Node], web_port: u16, web: &[u16]) -> String {
    let mut cfg = String::from(
        "global\n  maxconn 2000\n\ndefaults\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\n  \
         timeout check 1s\n\n",
    );
    // The leader is the node whose Patroni answers 200 on /primary; a node marked down has its
    // connections cut at once, so nothing lingers on a demoted or dead primary.
    cfg += &format!(
        "listen postgres\n  mode tcp\n  bind 127.0.0.1:{pg_port}\n  option httpchk OPTIONS /primary\n  \
         http-check expect status 200\n  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n"
    );
    for node in nodes {
        cfg += &format!("  server {} 127.0.0.1:{} maxconn 200 check port {}\n", node.name, node.pg_port, node.api_port);
    }
    cfg += &format!("\nlisten web\n  mode http\n  bind 127.0.0.1:{web_port}\n  balance roundrobin\n");
    for (i, port) in web.iter().enumerate() {
        cfg += &format!("  server g{i} 127.0.0.1:{port}\n");
    }
    cfg
}

/// What the load driver saw: each request's outcome, and the writes that were acknowledged.
#[derive(Default)]
struct Record {
    /// (start, end, ok) of every request, for the unavailability window.
    requests: Vec<(Instant, Instant, bool)>,
    /// Values of the chain this driver won (each acknowledged `n-1 → n`).
    chain: Vec<i64>,
    /// kv keys whose write under an Idempotency-Key was acknowledged.
    puts: Vec<String>,
    /// Tokens created (id, secret) and acknowledged.
    tokens: Vec<(String, String)>,
    /// Tokens whose revocation was acknowledged.
    revoked: Vec<(String, String)>,
    calls_ok: u64,
    /// Failed requests by kind ("503 database_unavailable", "timeout", …).
    failures: std::collections::BTreeMap<String, u64>,
}

type Shared = Arc<Mutex<Record>>;

/// Records one request; `failure` names what went wrong (status and error code).
fn note(rec: &Shared, start: Instant, failure: Option<String>) {
    let mut rec = rec.lock().unwrap();
    rec.requests.push((start, Instant::now(), failure.is_none()));
    if let Some(kind) = failure {
        *rec.failures.entry(kind).or_default() += 1;
    }
}

/// An answer's status (0: none came) and body.
async fn answer(r: reqwest::Result<reqwest::Response>) -> (u16, String) {
    match r {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, if e.is_timeout() { "timeout".into() } else { "no connection".into() }),
    }
}

/// "status code" of a failed answer: the first error `code` in its body, if any.
fn failure(status: u16, body: &str) -> String {
    let code =
        body.split("\"code\":").nth(1).map(|rest| rest.trim_start().split([',', '}']).next().unwrap_or("").trim_matches('"'));
    match (status, code) {
        (0, _) => body.to_owned(),
        (_, Some(code)) => format!("{status} {code}"),
        _ => status.to_string(),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

async fn chain_driver(base: String, m: Machine, rec: Shared, stop: Arc<AtomicBool>) {
    let http = client();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let (status, body) = answer(m.headers(http.get(format!("{base}/api/v1/tenants/acme/kv/chain"))).send().await).await;
        let current = match status {
            200 => serde_json::from_str::<Value>(&body).ok().and_then(|e| e["value"].as_i64()),
            404 => Some(0),
            _ => None,
        };
        note(&rec, start, current.is_none().then(|| failure(status, &body)));
        let Some(n) = current else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let expect = if n == 0 { json!({ "absent": true }) } else { json!({ "value": n }) };
        let cas = json!({ "key": "chain", "expect": expect, "next": { "value": n + 1 } });
        let start = Instant::now();
        let (status, body) =
            answer(m.headers(http.post(format!("{base}/api/v1/tenants/acme/kv-cas"))).json(&cas).send().await).await;
        note(&rec, start, (status != 200 && status != 412).then(|| failure(status, &body)));
        if status == 200 {
            rec.lock().unwrap().chain.push(n + 1);
        }
        // Anything else has an unknown outcome: never retried blindly, the next round reads again.
    }
}

async fn put_driver(base: String, m: Machine, task: String, rec: Shared, stop: Arc<AtomicBool>) {
    let http = client();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("p{task}-{i}");
        // The same request under the same key until it is acknowledged: exactly once.
        loop {
            let start = Instant::now();
            let r = m
                .headers(http.put(format!("{base}/api/v1/tenants/acme/kv/{key}")))
                .header("idempotency-key", format!("put-{key}"))
                .json(&json!({ "value": i }))
                .send()
                .await;
            let (status, body) = answer(r).await;
            // Carried out, its answer lost in the failover: acknowledged all the same.
            let lost = status == 409 && failure(status, &body) == "409 idempotency_answer_lost";
            note(&rec, start, (status != 200 && !lost).then(|| failure(status, &body)));
            if status == 200 || lost {
                rec.lock().unwrap().puts.push(key.clone());
                break;
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        i += 1;
    }
}

/// [`failure`] of a browser write.
fn tried(answer: &Option<(u16, Value)>) -> String {
    match answer {
        None => "no answer".into(),
        Some((status, body)) => failure(*status, &body.to_string()),
    }
}

/// Live tokens the token driver keeps at most (well under the tenant's cap).
const LIVE_TOKENS: usize = 30;

async fn token_driver(alice: common::browser::Browser, rec: Shared, stop: Arc<AtomicBool>) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let made = alice.try_write(Method::POST, "/api/v1/tenants/acme/tokens", json!({ "name": format!("ha {i}") })).await;
        let created = match &made {
            Some((201, body)) => {
                Some((body["token"]["id"].as_str().unwrap().to_owned(), body["secret"].as_str().unwrap().to_owned()))
            }
            _ => None,
        };
        note(&rec, start, created.is_none().then(|| tried(&made)));
        i += 1;
        let Some((id, secret)) = created else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let live = {
            let mut rec = rec.lock().unwrap();
            rec.tokens.push((id.clone(), secret.clone()));
            rec.tokens.len() - rec.revoked.len()
        };
        // Every second token is revoked, retried until the revocation is acknowledged, and
        // every token once LIVE_TOKENS are live: a fast machine would otherwise reach the
        // tenant's cap of live tokens within the run and answer 409 to the end.
        if i % 2 == 0 && live <= LIVE_TOKENS {
            continue;
        }
        loop {
            let start = Instant::now();
            let answer = alice.try_write(Method::DELETE, &format!("/api/v1/tenants/acme/tokens/{id}"), json!({})).await;
            let ok = matches!(answer, Some((200, _)));
            note(&rec, start, (!ok).then(|| tried(&answer)));
            if ok {
                rec.lock().unwrap().revoked.push((id.clone(), secret.clone()));
                break;
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn call_driver(base: String, m: Machine, rec: Shared, stop: Arc<AtomicBool>) {
    let http = client();
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let body = json!({
            "jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": { "name": "call_tool", "arguments": { "address": "everything.echo", "args": { "message": format!("ha {i}") } } }
        });
        let r = m
            .headers(http.post(&endpoint))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .await;
        let (status, text) = answer(r).await;
        let ok = status == 200 && text.contains(&format!("ha {i}")) && !text.contains("\"isError\":true");
        note(&rec, start, (!ok).then(|| failure(status, &text)));
        if ok {
            rec.lock().unwrap().calls_ok += 1;
        }
        i += 1;
    }
}

/// Runs the load for `before`, then `event`, then until `after` has passed; prints the
/// unavailability window (first to last failed request after the event) and the failures.
async fn under_load<F, Fut>(base: &str, m: &Machine, alice: &common::browser::Browser, what: &str, event: F) -> Record
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rec: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let base = base.to_owned();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(tokio::spawn(chain_driver(base.clone(), m.clone(), rec.clone(), stop.clone())));
    }
    // Each load's keys are its own, so a key left unanswered by one event is not the next's.
    static LOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let load = LOADS.fetch_add(1, Ordering::Relaxed);
    for task in 0..2 {
        tasks.push(tokio::spawn(put_driver(base.clone(), m.clone(), format!("{load}-{task}"), rec.clone(), stop.clone())));
    }
    tasks.push(tokio::spawn(token_driver(alice.clone(), rec.clone(), stop.clone())));
    tasks.push(tokio::spawn(call_driver(base.clone(), m.clone(), rec.clone(), stop.clone())));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let at = Instant::now();
    event().await;
    // Long enough for a failover (Patroni's ttl is 10 s), then a quiet stretch that must succeed.
    tokio::time::sleep(Duration::from_secs(25)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let rec = Arc::try_unwrap(rec).ok().unwrap().into_inner().unwrap();
    let failed: Vec<&(Instant, Instant, bool)> = rec.requests.iter().filter(|r| !r.2).collect();
    let window = match (failed.iter().map(|r| r.0).min(), failed.iter().map(|r| r.1).max()) {
        (Some(first), Some(last)) => last.duration_since(first),
        _ => Duration::ZERO,
    };
    let after_event = failed.iter().filter(|r| r.1 >= at).count();
    // The longest stretch in which no request succeeded (between two successful answers).
    let mut answered: Vec<Instant> = rec.requests.iter().filter(|r| r.2).map(|r| r.1).collect();
    answered.sort();
    let silence = answered.windows(2).map(|w| w[1].duration_since(w[0])).max().unwrap_or_default();
    println!(
        "HA {what}: {} requests, {} failed ({after_event} after the event), longest stretch without a successful answer \
         {:.2} s, first to last failed request {:.2} s; \
         acknowledged: {} chain wins, {} kv writes, {} tokens, {} revocations, {} MCP calls; failures {:?}",
        rec.requests.len(),
        failed.len(),
        silence.as_secs_f64(),
        window.as_secs_f64(),
        rec.chain.len(),
        rec.puts.len(),
        rec.tokens.len(),
        rec.revoked.len(),
        rec.calls_ok,
        rec.failures
    );
    // The load ends healthy: its last second had no failure.
    let tail = rec.requests.iter().filter(|r| r.0 + Duration::from_secs(1) >= rec.requests.iter().map(|x| x.0).max().unwrap());
    assert!(tail.clone().all(|r| r.2), "{what}: requests still failed at the end of the load");
    rec
}

/// A platform-wide read of the admin log through the leader.
async fn admin_log_targets(owner: &Secret, prefix: &str) -> Vec<(String, Option<Value>)> {
    let mut conn = PgConnection::connect(owner.expose()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_as("SELECT target, after FROM admin_log WHERE target LIKE $1 || '%'")
        .bind(prefix)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
}

#[tokio::test]
async fn failover_switchover_and_rejoin_under_load_lose_no_acknowledged_write() {
    let web_ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let mut cluster = Cluster::start(web_ports.clone()).await;

    // The database and its owner, created by the superuser on the leader.
    let superuser = cluster.url("postgres", SUPERUSER_PASSWORD, "postgres");
    let mut conn = PgConnection::connect(superuser.expose()).await.expect("connect to the leader through haproxy");
    conn.execute(AssertSqlSafe(format!("CREATE ROLE gatehouse_owner LOGIN CREATEROLE PASSWORD '{OWNER_PASSWORD}'")))
        .await
        .unwrap();
    conn.execute("CREATE DATABASE gatehouse OWNER gatehouse_owner").await.unwrap();
    conn.close().await.unwrap();
    let owner = cluster.url("gatehouse_owner", OWNER_PASSWORD, "gatehouse");
    migrate::run(&owner).await.expect("migrate through haproxy");
    let bouncer = pooler::bouncer(&owner, 20).await;

    cli(&owner, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&owner, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let everything = Everything::start().await;
    common::add_remote_mcp(&owner, "acme", "main", "everything", &everything.url).await;
    let m = provision(&owner, "acme").await;

    // Three replicas: the pool through pgbouncer, migrations and LISTEN directly (haproxy).
    let mut replicas = Vec::new();
    for port in &web_ports {
        let mut cmd = gatehouse(Some(&bouncer.url));
        cmd.env("GATEHOUSE_DB_POOLER", "transaction")
            .env("GATEHOUSE_MIGRATE_URL", owner.expose())
            .env("GATEHOUSE_PUBLIC_URL", cluster.web());
        replicas.push(Served::start_on(cmd, *port).await);
    }
    let alice = common::dev_sign_in_at(&cluster.web(), "alice@example.test").await;

    let mut all = Record::default();
    let mut absorb = |rec: Record| {
        all.chain.extend(rec.chain);
        all.puts.extend(rec.puts);
        all.tokens.extend(rec.tokens);
        all.revoked.extend(rec.revoked);
        all.calls_ok += rec.calls_ok;
    };

    // 1. The leader is killed: Patroni promotes the synchronous standby.
    let web = cluster.web();
    let killed = cluster.leader().await;
    let rec = under_load(&web, &m, &alice, "leader killed (SIGKILL)", || {
        cluster.nodes[killed].kill();
        async {}
    })
    .await;
    absorb(rec);
    let roles = cluster.roles().await;
    assert!(roles.iter().enumerate().any(|(i, r)| i != killed && *r == Some("primary")), "a new leader: {roles:?}");

    // 2. The old leader starts again and rejoins as a replica (pg_rewind if it must).
    let (user, dir) = (cluster.user.clone(), cluster.dir.clone());
    let rec = under_load(&web, &m, &alice, "old leader rejoins", || {
        cluster.nodes[killed].start(&user, &dir);
        async {}
    })
    .await;
    absorb(rec);
    cluster.wait_healthy(Duration::from_secs(60)).await;

    // 3. A switchover to the synchronous standby (in synchronous mode the only candidate).
    let leader = cluster.leader().await;
    let sync = cluster.roles().await.iter().position(|r| *r == Some("sync")).expect("a synchronous standby");
    let (from, to, config) =
        (cluster.nodes[leader].name.clone(), cluster.nodes[sync].name.clone(), cluster.nodes[0].config.clone());
    let rec = under_load(&web, &m, &alice, "patronictl switchover", || async move {
        let out = Command::new(binary(&["/usr/bin/patronictl"], "patroni"))
            .arg("-c")
            .arg(&config)
            .args(["switchover", "--leader", &from, "--candidate", &to, "--force"])
            .output()
            .await
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && said.contains("Successfully switched over"), "switchover: {said}");
    })
    .await;
    absorb(rec);
    cluster.wait_healthy(Duration::from_secs(60)).await;
    assert_eq!(cluster.leader().await, sync, "the switchover moved the leadership to the standby");

    // Every acknowledged chain value is in the admin log once, and the log is 1..=N.
    let mut chain: Vec<i64> = admin_log_targets(&owner, "kv:chain")
        .await
        .iter()
        .map(|(_, after)| after.as_ref().unwrap()["value"].as_i64().unwrap())
        .collect();
    chain.sort();
    let n = chain.len() as i64;
    assert_eq!(chain, (1..=n).collect::<Vec<_>>(), "the chain has no gap and no value twice");
    let mut won = all.chain.clone();
    won.sort();
    won.dedup();
    assert_eq!(won.len(), all.chain.len(), "no chain value was acknowledged twice (no double win)");
    assert!(won.iter().all(|v| *v <= n), "every acknowledged win is in the log");
    let value: Value = m
        .headers(common::http().get(format!("{}/api/v1/tenants/acme/kv/chain", cluster.web())))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(value["value"].as_i64(), Some(n), "the key holds the chain's last value");

    // Every acknowledged kv write happened exactly once.
    let logged = admin_log_targets(&owner, "kv:p").await;
    for key in &all.puts {
        let count = logged.iter().filter(|(target, _)| *target == format!("kv:{key}")).count();
        assert_eq!(count, 1, "the acknowledged write of {key} is logged {count} times");
    }

    // Every acknowledged token exists once; every acknowledged revocation holds on every
    // replica, while a token that was not revoked still works there.
    let logged = admin_log_targets(&owner, "token:").await;
    for (id, _) in &all.tokens {
        assert!(
            logged.iter().any(|(target, _)| *target == format!("token:{id}")),
            "token {id} was acknowledged but is not there"
        );
    }
    let alive = all.tokens.iter().find(|t| !all.revoked.contains(t)).expect("a token that was not revoked").clone();
    for replica in &replicas {
        let endpoint = format!("{}/t/acme/w/main/mcp", replica.base);
        let with = |secret: &str| Machine { token: secret.to_owned(), ..m.clone() };
        let ok = common::mcp_post(&endpoint, &with(&alive.1), "tools/list", json!({})).await;
        assert_eq!(ok.status(), 200, "an unrevoked token works on {}", replica.base);
        for (id, secret) in &all.revoked {
            let refused = common::mcp_post(&endpoint, &with(secret), "tools/list", json!({})).await;
            assert_eq!(refused.status(), 401, "revoked token {id} is refused on {}", replica.base);
        }
        let ready = common::http().get(format!("{}/readyz", replica.base)).send().await.unwrap();
        assert_eq!(ready.status(), 200, "{} is ready", replica.base);
    }
    assert!(all.calls_ok > 0 && !all.revoked.is_empty() && !all.puts.is_empty() && n > 0, "the load did real work");
    drop(replicas);
    drop(bouncer);
}
