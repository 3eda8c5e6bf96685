//! The embedded default: a private PostgreSQL cluster started from the machine's own server
//! binaries in `GATEHOUSE_DATA_DIR/pg`, so `gatehouse serve` works with no setup.
//!
//! - `initdb` on first use (as an unprivileged user when we are root: PostgreSQL refuses
//!   root), a random password for the admin and owner roles in `pg-secret` (mode 0600);
//! - listening on a free loopback port only (no unix socket, no trust authentication);
//! - several processes may share one cluster (a `serve` and a CLI command, or the test
//!   binaries of one run): each holds a shared lock on `pg.users.lock` while it uses the
//!   cluster, and the last one to [`Cluster::release`] it stops it;
//! - a stale `postmaster.pid` (its process gone, or reused by something else) is removed.

use std::{
    fs::{self, File, OpenOptions},
    io::Write,
    net::TcpListener,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use rand::{Rng, distr::Alphanumeric};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use tokio::process::Command;

use crate::config::Secret;

/// Bootstrap superuser of an embedded cluster.
pub const ADMIN_ROLE: &str = "gatehouse_admin";
/// Owns the schema and runs migrations; the application switches from it to `gatehouse_app`.
pub const OWNER_ROLE: &str = "gatehouse_owner";
/// The database `serve` uses inside the embedded cluster.
pub const DATABASE: &str = "gatehouse";

/// A running embedded cluster this process is registered as a user of.
#[derive(Debug)]
pub struct Cluster {
    root: PathBuf,
    pgdata: PathBuf,
    bin_dir: PathBuf,
    run_as: Option<(u32, u32)>,
    port: u16,
    password: Secret,
    users_lock: Option<File>,
    /// True when this call ran `initdb`.
    pub initialized: bool,
}

impl Cluster {
    /// Starts (or attaches to) the cluster in `root/pg`. `extra_conf` lines are appended to
    /// `postgresql.conf` when the cluster is first created (the test harness turns off fsync).
    pub async fn start(root: &Path, extra_conf: &[&str]) -> anyhow::Result<Cluster> {
        let bin_dir = find_binaries()?;
        fs::create_dir_all(root).with_context(|| format!("cannot create data dir {}", root.display()))?;
        let root = fs::canonicalize(root)?;
        let pgdata = root.join("pg");
        let run_as = unprivileged_user().await?;

        let startup = lock_file(&root.join("pg.lock"))?;
        let startup = tokio::task::spawn_blocking(move || startup.lock().map(|_| startup)).await??;

        let mut cluster = Cluster {
            root: root.clone(),
            pgdata: pgdata.clone(),
            bin_dir,
            run_as,
            port: 0,
            password: Secret::new(String::new()),
            users_lock: None,
            initialized: false,
        };
        if !pgdata.join("PG_VERSION").exists() {
            cluster.initdb(extra_conf).await?;
            cluster.initialized = true;
        }
        cluster.password = Secret::new(
            fs::read_to_string(root.join("pg-secret"))
                .context("the embedded cluster's pg-secret file is missing; remove the data dir's pg folder to start over")?
                .trim()
                .to_owned(),
        );
        cluster.port = match cluster.running_port()? {
            Some(port) => port,
            None => cluster.pg_ctl_start().await?,
        };
        cluster.bootstrap().await?;

        let users = lock_file(&root.join("pg.users.lock"))?;
        users.lock_shared()?;
        cluster.users_lock = Some(users);
        startup.unlock()?;
        Ok(cluster)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// URL of `database` as the owner role (what `serve` and migrations use).
    pub fn owner_url(&self, database: &str) -> Secret {
        Secret::new(format!("postgres://{OWNER_ROLE}:{}@127.0.0.1:{}/{database}", self.password.expose(), self.port))
    }

    /// URL of `database` as the bootstrap superuser (test harness: creating databases).
    pub fn admin_url(&self, database: &str) -> Secret {
        Secret::new(format!("postgres://{ADMIN_ROLE}:{}@127.0.0.1:{}/{database}", self.password.expose(), self.port))
    }

    /// Unregisters this process; the last user stops the cluster cleanly.
    pub async fn release(mut self) -> anyhow::Result<()> {
        let startup = lock_file(&self.root.join("pg.lock"))?;
        let startup = tokio::task::spawn_blocking(move || startup.lock().map(|_| startup)).await??;
        drop(self.users_lock.take());
        let users = lock_file(&self.root.join("pg.users.lock"))?;
        if users.try_lock().is_ok() {
            self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"]).await.context("pg_ctl stop failed")?;
            tracing::info!("embedded PostgreSQL stopped");
            users.unlock()?;
        }
        startup.unlock()?;
        Ok(())
    }

    async fn initdb(&self, extra_conf: &[&str]) -> anyhow::Result<()> {
        if self.pgdata.exists() && fs::read_dir(&self.pgdata)?.next().is_some() {
            bail!(
                "{} exists but holds no PostgreSQL cluster; move it away or choose another GATEHOUSE_DATA_DIR",
                self.pgdata.display()
            );
        }
        tracing::info!(dir = %self.pgdata.display(), "creating the embedded PostgreSQL cluster");
        let password: String = rand::rng().sample_iter(Alphanumeric).take(32).map(char::from).collect();
        write_private(&self.root.join("pg-secret"), &password)?;
        fs::create_dir_all(&self.pgdata)?;
        fs::set_permissions(&self.pgdata, fs::Permissions::from_mode(0o700))?;
        let pwfile = self.root.join(".initdb-pw");
        write_private(&pwfile, &password)?;
        self.give_away(&self.pgdata)?;
        self.give_away(&pwfile)?;
        self.check_reachable().await?;

        let out = self
            .command("initdb")
            .arg("-D")
            .arg(&self.pgdata)
            .args(["-U", ADMIN_ROLE, "-A", "scram-sha-256", "-E", "UTF8", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .await
            .context("cannot run initdb")?;
        let _ = fs::remove_file(&pwfile);
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let mut conf = OpenOptions::new().append(true).open(self.pgdata.join("postgresql.conf"))?;
        writeln!(conf, "\n# gatehouse embedded defaults: loopback only, no unix socket")?;
        writeln!(conf, "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''")?;
        for line in extra_conf {
            writeln!(conf, "{line}")?;
        }
        Ok(())
    }

    /// The port of a live postmaster serving this data dir, after removing a stale pid file.
    fn running_port(&self) -> anyhow::Result<Option<u16>> {
        let pid_file = self.pgdata.join("postmaster.pid");
        let Ok(text) = fs::read_to_string(&pid_file) else { return Ok(None) };
        let lines: Vec<&str> = text.lines().collect();
        let pid = lines.first().and_then(|l| l.trim().parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
                && fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == self.pgdata)
        });
        if !alive {
            tracing::warn!(file = %pid_file.display(), "removing a stale postmaster.pid");
            fs::remove_file(&pid_file)?;
            return Ok(None);
        }
        let port = lines.get(3).and_then(|l| l.trim().parse::<u16>().ok()).ok_or_else(|| anyhow!("unreadable postmaster.pid"))?;
        Ok(Some(port))
    }

    async fn pg_ctl_start(&self) -> anyhow::Result<u16> {
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let log = self.pgdata.join("server.log");
            let result =
                self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log.to_string_lossy(), "-o", &format!("-p {port}")]).await;
            match result {
                Ok(()) => {
                    tracing::info!(port, "embedded PostgreSQL started");
                    return Ok(port);
                }
                Err(e) => last_error = format!("{e:#}"),
            }
        }
        bail!("could not start the embedded PostgreSQL: {last_error} (see {}/server.log)", self.pgdata.display())
    }

    async fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = self.command("pg_ctl").arg("-D").arg(&self.pgdata).args(args).stdin(Stdio::null()).output().await?;
        if !out.status.success() {
            bail!("pg_ctl {}: {}", args[0], String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// Creates the owner and application roles and the database when they are missing.
    /// Runs on every start, so a crash between `initdb` and here heals on the next run.
    async fn bootstrap(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut conn = loop {
            match PgConnection::connect(self.admin_url("postgres").expose()).await {
                Ok(conn) => break conn,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "waiting for the embedded PostgreSQL");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e).context("cannot connect to the embedded PostgreSQL"),
            }
        };
        let password = self.password.expose();
        let owner_exists =
            sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) AS "exists!""#, OWNER_ROLE)
                .fetch_one(&mut conn)
                .await?;
        if !owner_exists {
            // Role DDL cannot take bind parameters; the password is our own alphanumeric string.
            conn.execute(AssertSqlSafe(format!("CREATE ROLE {OWNER_ROLE} LOGIN CREATEROLE PASSWORD '{password}'"))).await?;
        }
        let app_exists =
            sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) AS "exists!""#, crate::db::APP_ROLE)
                .fetch_one(&mut conn)
                .await?;
        if !app_exists {
            conn.execute(AssertSqlSafe(format!(
                "CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT",
                crate::db::APP_ROLE
            )))
            .await?;
            conn.execute(AssertSqlSafe(format!("GRANT {} TO {OWNER_ROLE}", crate::db::APP_ROLE))).await?;
        }
        let db_exists =
            sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#, DATABASE)
                .fetch_one(&mut conn)
                .await?;
        if !db_exists {
            conn.execute(AssertSqlSafe(format!("CREATE DATABASE {DATABASE} OWNER {OWNER_ROLE}"))).await?;
        }
        conn.close().await?;
        Ok(())
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        cmd.current_dir(&self.root).env("LC_ALL", "C").env("LANG", "C").kill_on_drop(false);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn give_away(&self, path: &Path) -> anyhow::Result<()> {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .with_context(|| format!("cannot hand {} to the PostgreSQL user", path.display()))?;
        }
        Ok(())
    }

    /// When we run as root the server runs as another user, who must be able to reach the
    /// data dir through every parent folder; say so plainly instead of failing in initdb.
    async fn check_reachable(&self) -> anyhow::Result<()> {
        if self.run_as.is_none() {
            return Ok(());
        }
        let mut probe = Command::new("/bin/sh");
        probe.arg("-c").arg("cd \"$1\"").arg("sh").arg(&self.pgdata);
        if let Some((uid, gid)) = self.run_as {
            probe.uid(uid).gid(gid);
        }
        let status = probe.stdout(Stdio::null()).stderr(Stdio::null()).status().await?;
        if !status.success() {
            bail!(
                "PostgreSQL refuses to run as root, so the embedded cluster runs as an unprivileged user, \
                 who cannot reach {}: make its parent folders searchable (chmod o+x) or set GATEHOUSE_DATA_DIR \
                 to a folder such as /var/lib/gatehouse",
                self.pgdata.display()
            );
        }
        Ok(())
    }
}

/// Finds the directory holding `initdb` and `pg_ctl`: on `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn find_binaries() -> anyhow::Result<PathBuf> {
    find_binaries_in(std::env::var_os("PATH").as_deref(), Path::new("/usr/lib/postgresql"))
}

/// [`find_binaries`] over a given `PATH` value and versioned library folder.
pub fn find_binaries_in(path: Option<&std::ffi::OsStr>, versions_dir: &Path) -> anyhow::Result<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = path
        && let Some(dir) = std::env::split_paths(path).find(|d| has_both(d))
    {
        return Ok(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(versions_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir).ok_or_else(|| {
        anyhow!(
            "no PostgreSQL server binaries found (looked for initdb and pg_ctl on PATH and under {}/*/bin). \
             Install them (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL to an existing database",
            versions_dir.display()
        )
    })
}

/// When running as root: the `postgres` user if the system has one, else a system user
/// `gatehouse` created for the purpose.
async fn unprivileged_user() -> anyhow::Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    for attempt in 0..2 {
        for name in ["postgres", "gatehouse"] {
            if let Some(user) = nix::unistd::User::from_name(name)? {
                return Ok(Some((user.uid.as_raw(), user.gid.as_raw())));
            }
        }
        if attempt == 0 {
            let status = Command::new("useradd")
                .args(["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "gatehouse"])
                .status()
                .await
                .context("running as root: cannot create an unprivileged user for PostgreSQL (useradd)")?;
            if !status.success() {
                bail!("running as root: `useradd gatehouse` failed; create an unprivileged user for PostgreSQL");
            }
        }
    }
    bail!("running as root: no unprivileged user for PostgreSQL")
}

fn lock_file(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut file = OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bin(dir: &Path) {
        fs::create_dir_all(dir).unwrap();
        for name in ["initdb", "pg_ctl"] {
            fs::write(dir.join(name), "").unwrap();
        }
    }

    #[test]
    fn binaries_come_from_path_else_the_newest_version_else_a_clear_message() {
        let root = std::env::temp_dir().join(format!("gatehouse-bins-{}", uuid::Uuid::new_v4().simple()));
        let lib = root.join("lib");
        let on_path = root.join("on-path");
        let empty = std::ffi::OsString::from(root.join("nothing-here"));

        let err = find_binaries_in(Some(&empty), &lib).unwrap_err().to_string();
        assert!(err.contains("apt-get install postgresql") && err.contains("DATABASE_URL"), "{err}");

        fake_bin(&lib.join("9/bin"));
        fake_bin(&lib.join("15/bin"));
        fs::create_dir_all(lib.join("16/bin")).unwrap(); // incomplete: no binaries
        assert_eq!(find_binaries_in(Some(&empty), &lib).unwrap(), lib.join("15/bin"), "numeric, not lexical, newest");

        fake_bin(&on_path);
        let path = std::env::join_paths([root.join("nothing-here"), on_path.clone()]).unwrap();
        assert_eq!(find_binaries_in(Some(&path), &lib).unwrap(), on_path, "PATH wins");
        fs::remove_dir_all(&root).ok();
    }
}
