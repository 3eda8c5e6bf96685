//! The configuration's parsing, variable by variable.

use super::*;
use std::collections::HashMap;

fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Config::from_lookup(|k| map.get(k).cloned())
}

#[test]
fn defaults_are_the_embedded_development_run() {
    let c = load(&[]).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert!(c.database_url.is_none());
    assert_eq!(c.env, Environment::Development);
    assert_eq!(c.body_limit_bytes, 1 << 20);
    assert_eq!(c.shutdown_grace_ms, 10_000);
    assert_eq!(c.public_url, "http://127.0.0.1:8080");
    assert_eq!(c.public_origin(), "http://127.0.0.1:8080");
    assert!(!c.cookie_secure());
    assert!(c.dev_sign_in());
    assert_eq!(c.token_cap, 100);
    assert_eq!(c.code, CodeConfig::default(), "the issue's limits are the defaults");
    assert_eq!(c.replicas, ReplicaConfig::default());
    assert_eq!(c.sessions, SessionsConfig::default());
}

#[test]
fn downstream_session_pools_are_bounded_and_validated() {
    let c = load(&[("GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL", "4"), ("GATEHOUSE_DOWNSTREAM_SESSION_TRUST_MS", "0")]).unwrap();
    assert_eq!(c.sessions, SessionsConfig { max_sessions_per_pool: 4, trust_ms: 0, ..SessionsConfig::default() });
    let err = load(&[("GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL", "0"), ("GATEHOUSE_DOWNSTREAM_SESSION_POOLS", "x")]).unwrap_err();
    let vars: Vec<_> = err.0.iter().map(|p| p.var).collect();
    assert_eq!(vars, ["GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL", "GATEHOUSE_DOWNSTREAM_SESSION_POOLS"]);
}

#[test]
fn replica_leases_must_leave_room_for_renewal_and_the_wait() {
    let short = load(&[("GATEHOUSE_REPLICA_LEASE_MS", "1000"), ("GATEHOUSE_REPLICA_RENEW_MS", "900")]).unwrap_err();
    assert!(short.0.iter().any(|p| p.var == "GATEHOUSE_REPLICA_RENEW_MS"), "{short}");
    let wait = load(&[("GATEHOUSE_REPLICA_ACK_WAIT_MS", "5000")]).unwrap_err();
    assert!(wait.0.iter().any(|p| p.var == "GATEHOUSE_REPLICA_ACK_WAIT_MS"), "{wait}");
    let ok = load(&[
        ("GATEHOUSE_REPLICA_LEASE_MS", "1500"),
        ("GATEHOUSE_REPLICA_RENEW_MS", "250"),
        ("GATEHOUSE_REPLICA_MARGIN_MS", "400"),
        ("GATEHOUSE_REPLICA_ACK_WAIT_MS", "3000"),
    ])
    .unwrap();
    assert_eq!(ok.replicas, ReplicaConfig { lease_ms: 1500, renew_ms: 250, margin_ms: 400, ack_wait_ms: 3000 });
}

#[test]
fn code_limits_are_validated_and_the_tenant_share_follows_the_slots() {
    let c = load(&[("GATEHOUSE_CODE_RUNNING", "8"), ("GATEHOUSE_CODE_QUEUED", "20"), ("GATEHOUSE_CODE_CPU_MS", "1000")]).unwrap();
    assert_eq!((c.code.running, c.code.tenant_running, c.code.queued, c.code.tenant_queued), (8, 7, 20, 10));
    assert_eq!(c.code.cpu_ms, 1000);
    let err = load(&[("GATEHOUSE_CODE_HEAP_BYTES", "12"), ("GATEHOUSE_CODE_TENANT_RUNNING", "3")]).unwrap_err();
    let vars: Vec<_> = err.0.iter().map(|p| p.var).collect();
    assert_eq!(vars, ["GATEHOUSE_CODE_HEAP_BYTES", "GATEHOUSE_CODE_TENANT_RUNNING"], "a share above the slots is refused");
}

#[test]
fn platform_admins_are_lowercased_emails() {
    assert!(load(&[]).unwrap().platform_admins.is_empty());
    let c = load(&[("GATEHOUSE_PLATFORM_ADMINS", " Root@Example.test, ,ops@example.test ")]).unwrap();
    assert_eq!(c.platform_admins, ["root@example.test", "ops@example.test"]);
    let err = load(&[("GATEHOUSE_PLATFORM_ADMINS", "root")]).unwrap_err();
    assert_eq!(err.0[0].var, "GATEHOUSE_PLATFORM_ADMINS");
}

#[test]
fn origins_and_cookie_security() {
    let c = load(&[("GATEHOUSE_PUBLIC_URL", "https://gw.example.com/base/")]).unwrap();
    assert_eq!(c.public_origin(), "https://gw.example.com");
    assert!(c.cookie_secure());
    let c = load(&[("GATEHOUSE_PUBLIC_URL", "http://gw.example.com:8080")]).unwrap();
    assert!(c.cookie_secure(), "plain http off loopback still marks cookies Secure");
    let c = load(&[("GATEHOUSE_PUBLIC_URL", "http://localhost:3000")]).unwrap();
    assert!(!c.cookie_secure());
}

#[test]
fn mcp_authorization_settings() {
    let c = load(&[]).unwrap();
    assert_eq!((c.mcp_access_token_ttl_secs, c.mcp_redirect_uris.len()), (3600, 0));
    let c = load(&[
        ("GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS", "600"),
        ("GATEHOUSE_MCP_REDIRECT_URIS", "https://a.example/cb, https://b.example/cb"),
    ])
    .unwrap();
    assert_eq!(c.mcp_access_token_ttl_secs, 600);
    assert_eq!(c.mcp_redirect_uris, ["https://a.example/cb", "https://b.example/cb"]);
    let err = load(&[("GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS", "0"), ("GATEHOUSE_MCP_REDIRECT_URIS", "http://plain.example/cb")])
        .unwrap_err();
    let vars: Vec<_> = err.0.iter().map(|p| p.var).collect();
    assert_eq!(vars, ["GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS", "GATEHOUSE_MCP_REDIRECT_URIS"]);
}

#[test]
fn every_bad_value_is_named() {
    let err = load(&[
        ("GATEHOUSE_LISTEN", "nope"),
        ("GATEHOUSE_ENV", "staging"),
        ("DATABASE_URL", "mysql://x"),
        ("GATEHOUSE_BODY_LIMIT_BYTES", "12"),
        ("GATEHOUSE_PUBLIC_URL", "ftp://x"),
    ])
    .unwrap_err();
    let vars: Vec<_> = err.0.iter().map(|p| p.var).collect();
    assert_eq!(vars, ["GATEHOUSE_ENV", "GATEHOUSE_LISTEN", "GATEHOUSE_PUBLIC_URL", "DATABASE_URL", "GATEHOUSE_BODY_LIMIT_BYTES"]);
    assert!(err.to_string().contains("GATEHOUSE_LISTEN: must be an address"));
}

#[test]
fn production_requires_a_real_issuer() {
    let err = load(&[("GATEHOUSE_ENV", "production")]).unwrap_err();
    assert_eq!(err.0[0].var, "GATEHOUSE_OIDC_ISSUER");
    assert!(load(&[("GATEHOUSE_ENV", "production"), ("GATEHOUSE_OIDC_ISSUER", "https://id.example")]).is_err());
    let ok = load(&[
        ("GATEHOUSE_ENV", "production"),
        ("GATEHOUSE_OIDC_ISSUER", "https://id.example"),
        ("GATEHOUSE_OIDC_CLIENT_ID", "gh"),
    ]);
    assert!(!ok.unwrap().dev_sign_in());
}

#[test]
fn the_vault_key_ring_is_checked_and_never_echoed() {
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    assert!(load(&[]).unwrap().vault_keys.is_none(), "no key ring: the vault is off");
    let c = load(&[("GATEHOUSE_VAULT_KEYS", &format!("k2:{key},k1:{key}"))]).unwrap();
    assert_eq!(c.vault_keys.as_ref().unwrap().active(), "k2");
    assert!(!format!("{c:?}").contains(key));
    for bad in [format!("k1:{}", &key[..20]), format!("k1={key}"), "k1:%%%%".to_owned()] {
        let err = load(&[("GATEHOUSE_VAULT_KEYS", &bad)]).unwrap_err();
        assert_eq!(err.0[0].var, "GATEHOUSE_VAULT_KEYS");
        assert!(!err.to_string().contains(&key[..20]) && !err.to_string().contains("%%%%"), "{err}");
    }
}

#[test]
fn secrets_do_not_print() {
    let c = load(&[("DATABASE_URL", "postgres://u:hunter2@h/db")]).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn a_transaction_pooler_needs_a_database_url_and_a_direct_one_for_migrations() {
    let alone = load(&[("GATEHOUSE_DB_POOLER", "transaction")]).unwrap_err();
    assert!(alone.0.iter().any(|p| p.var == "GATEHOUSE_DB_POOLER"), "{alone}");
    assert!(alone.0.iter().any(|p| p.var == "GATEHOUSE_MIGRATE_URL"), "{alone}");
    let unknown = load(&[("GATEHOUSE_DB_POOLER", "statement")]).unwrap_err();
    assert!(unknown.to_string().contains("must be `session` or `transaction`"), "{unknown}");
    let ok = load(&[
        ("GATEHOUSE_DB_POOLER", "transaction"),
        ("DATABASE_URL", "postgres://app:pw@pgbouncer:6432/gatehouse"),
        ("GATEHOUSE_MIGRATE_URL", "postgres://owner:pw@primary:5432/gatehouse"),
    ])
    .unwrap();
    assert_eq!(ok.db_pooler, Pooler::Transaction);
    assert!(!format!("{ok:?}").contains("pw@"), "URLs are secrets: {ok:?}");
    assert_eq!(load(&[]).unwrap().db_pooler, Pooler::Session);
}
