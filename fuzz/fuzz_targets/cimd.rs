//! Client ID Metadata Documents (`mcp_auth::clients`): a fetched document (`url`, a newline,
//! then its body) is refused with a typed error or gives a clean display name and redirect
//! URIs this deployment allows.
#![no_main]
use std::sync::OnceLock;

use gatehouse::{config::Config, mcp_auth::clients};
use libfuzzer_sys::fuzz_target;

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config::from_lookup(|_| None).expect("the default configuration"))
}

fuzz_target!(|data: &[u8]| {
    let Some(newline) = data.iter().position(|&b| b == b'\n') else { return };
    let Ok(url) = std::str::from_utf8(&data[..newline]) else { return };
    let body = &data[newline + 1..];
    let _ = clients::is_document_url(config(), url);
    let Ok((name, uris)) = clients::fuzzing::document(config(), url, body) else { return };
    assert!(!name.is_empty() && name.chars().count() <= 200 && !name.chars().any(char::is_control), "{name:?}");
    assert_eq!(clients::fuzzing::clean_name(Some(&name)).ok().as_ref(), Some(&name), "a clean name stays clean");
    assert!((1..=10).contains(&uris.len()));
    for uri in &uris {
        assert!(gatehouse::mcp_auth::redirect_allowed(config(), uri), "{uri}");
    }
});
