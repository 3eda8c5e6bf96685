//! Signing in through a tenant's own OpenID connection (issue 22): each connection's relying
//! party, built from its settings and sealed secret, cached per connection version.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use uuid::Uuid;
use zeroize::Zeroizing;

use super::{ClientAuth, ProviderConfig, RelyingParty};
use crate::{
    AppState,
    error::Result,
    ids::TenantId,
    sso::{self, AuthMethod, Connection},
};

/// The connections' relying parties, by connection (each keeps its provider's metadata and
/// keys, refreshed on rotation like the deployment's own).
#[derive(Debug)]
pub struct Parties {
    http: reqwest::Client,
    cache: Mutex<HashMap<Uuid, CachedParty>>,
}

type CachedParty = (i64, Arc<RelyingParty>, Option<Arc<Zeroizing<String>>>);

impl Parties {
    pub fn new(http: reqwest::Client) -> Self {
        Parties { http, cache: Mutex::default() }
    }
}

/// A tenant connection ready to sign someone in.
pub struct Party {
    pub tenant: TenantId,
    pub connection: Connection,
    pub rp: Arc<RelyingParty>,
    /// The private key of a `private_key_jwt` connection.
    key: Option<Arc<Zeroizing<String>>>,
}

impl Party {
    /// The extra token-request parameters: a fresh client assertion for `private_key_jwt`.
    pub fn token_params(&self) -> Result<Vec<(&'static str, String)>> {
        use crate::oauth::assertion::{ASSERTION_TYPE, assertion};
        match &self.key {
            Some(pem) => Ok(vec![
                ("client_assertion_type", ASSERTION_TYPE.to_owned()),
                ("client_assertion", assertion(pem, &self.connection.client_id, &self.connection.issuer)?),
            ]),
            None => Ok(Vec::new()),
        }
    }
}

/// The connection `id` of `tenant` and its relying party (`None`: it is gone). The connection
/// is read on every call; the party is rebuilt when its version moved on.
pub async fn party(state: &AppState, tenant: TenantId, id: Uuid) -> Result<Option<Party>> {
    let parties = &state.sso;
    let Some((connection, envelope)) = sso::sealed(&state.db, tenant, id).await? else { return Ok(None) };
    if let Ok(cache) = parties.cache.lock()
        && let Some((version, rp, key)) = cache.get(&id)
        && *version == connection.version
    {
        return Ok(Some(Party { tenant, rp: rp.clone(), key: key.clone(), connection }));
    }
    let material = sso::open(state.config.vault_keys.as_ref(), tenant, id, &envelope)?;
    let (auth, key) = match connection.auth_method {
        AuthMethod::ClientSecretBasic => (ClientAuth::Basic(material.to_string()), None),
        AuthMethod::ClientSecretPost => (ClientAuth::Post(material.to_string()), None),
        AuthMethod::PrivateKeyJwt => (ClientAuth::PrivateKeyJwt, Some(Arc::new(material))),
    };
    let config = ProviderConfig {
        issuer: connection.issuer.clone(),
        client_id: connection.client_id.clone(),
        auth,
        redirect_uri: format!("{}/auth/callback", state.config.public_url),
    };
    let rp = Arc::new(RelyingParty::new(config, parties.http.clone()));
    if let Ok(mut cache) = parties.cache.lock() {
        cache.insert(id, (connection.version, rp.clone(), key.clone()));
    }
    Ok(Some(Party { tenant, rp, key, connection }))
}
