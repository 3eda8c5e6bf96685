//! pgbouncer (Debian's, 1.18) in transaction mode in front of a database, for the tests that
//! run Gatehouse through a pooler (tests/pooler.rs, tests/ha.rs).

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use gatehouse::config::Secret;

/// pgbouncer in transaction mode in front of the test database; killed when dropped.
pub struct Bouncer {
    pub child: tokio::process::Child,
    /// The database's URL through the bouncer (same role and password as the owner URL).
    pub url: Secret,
    pub dir: PathBuf,
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pgbouncer_binary() -> PathBuf {
    let found = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].into_iter().map(PathBuf::from).find(|p| p.exists());
    found.expect("pgbouncer is not installed: apt-get install pgbouncer (scripts/test.sh names it too)")
}

/// pgbouncer refuses to run as root: as root, it runs as the `postgres` user the PostgreSQL
/// package creates (or the `gatehouse` one the harness makes for the embedded cluster).
pub fn unprivileged() -> Option<nix::unistd::User> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["postgres", "gatehouse"].into_iter().find_map(|n| nix::unistd::User::from_name(n).ok().flatten())
}

/// A bouncer with `pool_size` server connections for the database of `direct`.
pub async fn bouncer(direct: &Secret, pool_size: u32) -> Bouncer {
    let url = url::Url::parse(direct.expose()).unwrap();
    let (user, password) = (url.username().to_owned(), url.password().unwrap().to_owned());
    let (host, server_port, database) = (url.host_str().unwrap().to_owned(), url.port().unwrap(), url.path()[1..].to_owned());
    let dir = std::env::temp_dir().join(format!("gatehouse-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = super::free_port();
    let ini = format!(
        "[databases]\n{database} = host={host} port={server_port} dbname={database}\n\n[pgbouncer]\n\
         listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
         auth_type = plain\nauth_file = {auth}\npool_mode = transaction\n\
         default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\nmax_client_conn = 500\n\
         ignore_startup_parameters = extra_float_digits\nserver_login_retry = 1\nadmin_users = {user}\n\
         logfile = {log}\npidfile = {pid}\n",
        auth = dir.join("users.txt").display(),
        log = dir.join("pgbouncer.log").display(),
        pid = dir.join("pgbouncer.pid").display(),
    );
    std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
    std::fs::write(dir.join("users.txt"), format!("\"{user}\" \"{password}\"\n")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = tokio::process::Command::new(pgbouncer_binary());
    if let Some(u) = unprivileged() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::os::unix::fs::chown(entry.unwrap().path(), Some(u.uid.as_raw()), Some(u.gid.as_raw())).unwrap();
        }
        std::os::unix::fs::chown(&dir, Some(u.uid.as_raw()), Some(u.gid.as_raw())).unwrap();
        // Set in the child itself (no `runuser` in between), so the pid killed is the bouncer's.
        cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw());
    }
    let child = cmd
        .arg(dir.join("pgbouncer.ini"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run pgbouncer");
    let up = super::listening(port, Duration::from_secs(20)).await;
    assert!(up, "pgbouncer did not listen on {port}: {}", log(&dir));
    let url = Secret::new(format!("postgres://{user}:{password}@127.0.0.1:{port}/{database}"));
    Bouncer { child, url, dir }
}

pub fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default()
}
