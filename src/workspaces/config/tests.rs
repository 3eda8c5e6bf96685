use super::*;
use proptest::prelude::*;

fn remote(url: &str) -> Connector {
    Connector::RemoteMcp {
        url: url.into(),
        transport: RemoteTransport::default(),
        headers: BTreeMap::new(),
        auth: Auth::None,
        timeout_ms: None,
    }
}

#[test]
fn field_level_issues() {
    let mut d = Document::default();
    d.connectors.insert("Bad Id".into(), remote("ftp://x"));
    d.connectors.insert(
        "ok".into(),
        Connector::RemoteMcp {
            url: "https://user:pw@mcp.example/mcp".into(),
            transport: RemoteTransport::Sse,
            headers: BTreeMap::from([("Authorization".into(), "Bearer x".into()), ("X-Team".into(), "blue".into())]),
            auth: Auth::Oauth(OauthAuth {
                grant: SlotKind::Shared,
                flow: Default::default(),
                identity_provider: None,
                issuer: None,
                authorization_endpoint: None,
                token_endpoint: None,
                revocation_endpoint: None,
                client_id: Some(String::new()),
                confidential: false,
                resource: None,
                scopes: Vec::new(),
                dpop: None,
            }),
            timeout_ms: Some(5),
        },
    );
    d.classification.insert("nope.tool".into(), Class::Read);
    let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
    assert_eq!(
        fields,
        [
            "connectors.Bad Id",
            "connectors.Bad Id.url",
            "connectors.ok.url",
            "connectors.ok.headers.Authorization",
            "connectors.ok.auth.client_id",
            "connectors.ok.auth",
            "connectors.ok.timeout_ms",
            "classification.nope.tool",
        ]
    );
    let mut good = Document::default();
    good.connectors.insert("everything".into(), remote("http://127.0.0.1:3001/mcp"));
    good.classification.insert("everything.echo".into(), Class::Write);
    assert!(good.validate().is_ok());
}

#[test]
fn documents_round_trip_and_refuse_unknown_fields() {
    let json = r#"{"connectors":{"gh":{"kind":"remote_mcp","url":"https://mcp.example/mcp","headers":{"X-Org":"acme"}}}}"#;
    let d: Document = serde_json::from_str(json).unwrap();
    assert_eq!(serde_json::from_value::<Document>(serde_json::to_value(&d).unwrap()).unwrap(), d);
    assert!(serde_json::from_str::<Document>(r#"{"connectors":{},"extra":1}"#).is_err());
    assert!(serde_json::from_str::<Document>(r#"{"connectors":{"a":{"kind":"carrier_pigeon"}}}"#).is_err());
}

#[test]
fn the_transport_is_streamable_by_default_and_left_out_of_documents_then() {
    let json = r#"{"kind":"remote_mcp","url":"https://mcp.example/mcp","auth":{"type":"none"}}"#;
    let streamable: Connector = serde_json::from_str(json).unwrap();
    assert!(matches!(streamable, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }));
    assert_eq!(serde_json::to_string(&streamable).unwrap(), json, "the digest of an older document is unchanged");
    let explicit = r#"{"kind":"remote_mcp","url":"https://mcp.example/mcp","transport":"streamable_http"}"#;
    assert_eq!(serde_json::from_str::<Connector>(explicit).unwrap(), streamable);
    let sse: Connector =
        serde_json::from_str(r#"{"kind":"remote_mcp","url":"https://mcp.example/sse","transport":"sse"}"#).unwrap();
    assert!(matches!(sse, Connector::RemoteMcp { transport: RemoteTransport::Sse, .. }));
    assert_eq!(serde_json::from_value::<Connector>(serde_json::to_value(&sse).unwrap()).unwrap(), sse);
    assert!(serde_json::from_str::<Connector>(r#"{"kind":"remote_mcp","url":"https://x.example","transport":"ws"}"#).is_err());
}

#[test]
fn peer_connectors_name_a_blueprint() {
    let peer: Connector = serde_json::from_str(r#"{"kind":"peer","blueprint":"billing"}"#).unwrap();
    assert_eq!(peer, Connector::Peer { blueprint: "billing".into() });
    assert_eq!((peer.kind(), peer.url(), peer.auth()), ("peer", "billing", &Auth::None));
    assert!(serde_json::from_str::<Connector>(r#"{"kind":"peer"}"#).is_err(), "the blueprint is required");
    assert!(serde_json::from_str::<Connector>(r#"{"kind":"peer","blueprint":"b1c","url":"x"}"#).is_err());
    let mut d = Document::default();
    d.connectors.insert("crm".into(), peer);
    d.connectors.insert("bad".into(), Connector::Peer { blueprint: "-No".into() });
    let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
    assert_eq!(fields, ["connectors.bad.blueprint"]);
}

#[test]
fn grants_narrow_and_absent_grants_allow() {
    let mut d = Document::default();
    d.connectors.insert("gh".into(), remote("https://x.example/mcp"));
    d.connectors.insert("db".into(), remote("https://y.example/mcp"));
    let member = Caller { role: Some(crate::members::Role::Member), member_id: None };
    let machine = Caller::default();
    assert!(d.granted(&machine, "gh", Some("anything")), "no grants: everything");
    d.grants = Some(vec![
        Grant { to: "role:member".into(), tools: vec!["gh.read_issue".into()], prompts: vec![], resources: vec![] },
        Grant { to: "machines".into(), tools: vec!["db".into()], prompts: vec![], resources: vec![] },
    ]);
    assert!(d.validate().is_ok());
    assert!(d.granted(&member, "gh", Some("read_issue")));
    assert!(d.granted(&member, "gh", None), "a connector with one granted tool is visible");
    assert!(!d.granted(&member, "gh", Some("close_issue")));
    assert!(!d.granted(&member, "db", Some("query")));
    assert!(d.granted(&machine, "db", Some("query")));
    assert!(!d.granted(&machine, "gh", Some("read_issue")));
    d.grants = Some(vec![Grant { to: "everyone".into(), tools: vec!["nope".into()], prompts: vec![], resources: vec![] }]);
    let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
    assert_eq!(fields, ["grants.0.to", "grants.0.tools.nope"]);
}

#[test]
fn prompts_and_resources_are_granted_with_their_connector_or_singly() {
    let mut d = Document::default();
    d.connectors.insert("gh".into(), remote("https://x.example/mcp"));
    d.connectors.insert("db".into(), remote("https://y.example/mcp"));
    let member = Caller { role: Some(crate::members::Role::Member), member_id: None };
    let machine = Caller::default();
    assert!(d.granted_part(&machine, Part::Prompt, "gh", Some("p")), "no grants: everything");
    d.grants = Some(vec![
        Grant {
            to: "role:member".into(),
            tools: vec!["gh.read_issue".into()],
            prompts: vec!["gh.triage".into()],
            resources: vec!["gh.file:///a.txt".into(), "db".into()],
        },
        Grant { to: "machines".into(), tools: vec!["db".into()], prompts: vec![], resources: vec![] },
    ]);
    assert!(d.validate().is_ok());
    // Named singly: that one only; a granted tool of the connector grants none of the rest.
    assert!(d.granted_part(&member, Part::Prompt, "gh", Some("triage")));
    assert!(!d.granted_part(&member, Part::Prompt, "gh", Some("other")));
    assert!(!d.granted_part(&member, Part::Prompt, "gh", None));
    assert!(d.granted_part(&member, Part::Resource, "gh", Some("file:///a.txt")));
    assert!(!d.granted_part(&member, Part::Resource, "gh", Some("file:///b.txt")));
    assert!(!d.granted_part(&member, Part::Resource, "gh", None), "templates need the whole connector");
    // A connector in `resources`: every resource and template of it, no prompt.
    assert!(d.granted_part(&member, Part::Resource, "db", Some("db://x")));
    assert!(d.granted_part(&member, Part::Resource, "db", None));
    assert!(!d.granted_part(&member, Part::Prompt, "db", Some("q")));
    // A whole connector in `tools`: everything of it.
    assert!(d.granted_part(&machine, Part::Prompt, "db", Some("q")));
    assert!(d.granted_part(&machine, Part::Resource, "db", None));
    assert!(!d.granted_part(&machine, Part::Prompt, "gh", Some("triage")));
    d.grants = Some(vec![Grant {
        to: "machines".into(),
        tools: vec![],
        prompts: vec!["nope.p".into()],
        resources: vec!["gone".into()],
    }]);
    let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
    assert_eq!(fields, ["grants.0.prompts.nope.p", "grants.0.resources.gone"]);
}

#[test]
fn slot_templates_are_checked_and_rendered() {
    let auth: Auth = serde_json::from_value(serde_json::json!({
        "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}", "X-Org": "{org}-x" }
    }))
    .unwrap();
    let mut d = Document::default();
    d.connectors.insert(
        "c".into(),
        Connector::RemoteMcp {
            url: "https://x.example/mcp".into(),
            transport: RemoteTransport::default(),
            headers: BTreeMap::new(),
            auth: auth.clone(),
            timeout_ms: None,
        },
    );
    assert!(d.validate().is_ok());
    assert_eq!(auth.fields_needed().into_iter().collect::<Vec<_>>(), ["org", "token"]);
    let fields = BTreeMap::from([("token".to_owned(), "t0k".to_owned()), ("org".to_owned(), "acme".to_owned())]);
    assert_eq!(
        auth.render(&fields).unwrap(),
        [("Authorization".to_owned(), "Bearer t0k".to_owned()), ("X-Org".to_owned(), "acme-x".to_owned())]
    );
    assert_eq!(auth.render(&BTreeMap::new()), Err("token".to_owned()));
    let basic: Auth = serde_json::from_value(serde_json::json!({
        "type": "slot", "slot": "personal", "basic": { "username": "user", "password": "pass" }
    }))
    .unwrap();
    let fields = BTreeMap::from([("user".to_owned(), "Aladdin".to_owned()), ("pass".to_owned(), "open sesame".to_owned())]);
    assert_eq!(basic.render(&fields).unwrap(), [("Authorization".to_owned(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".to_owned())]);

    let bad: Auth = serde_json::from_value(serde_json::json!({
        "type": "slot", "slot": "shared",
        "headers": { "Authorization": "Bearer s3cret", "X-A": "{to-ken}", "Host": "{h}", "X-Team": "{t}", "X-B": "{open" },
        "basic": { "username": "u", "password": "bad name" }
    }))
    .unwrap();
    let mut fields = Vec::new();
    let statics = BTreeMap::from([("x-team".to_owned(), "blue".to_owned())]);
    check_auth(&bad, &statics, "auth", false, &mut |f, _| fields.push(f));
    assert_eq!(
        fields,
        [
            "auth.headers.Authorization",
            "auth.headers.Host",
            "auth.headers.X-A",
            "auth.headers.X-B",
            "auth.headers.X-Team",
            "auth.basic.password"
        ]
    );
    let empty: Auth = serde_json::from_value(serde_json::json!({ "type": "slot", "slot": "shared" })).unwrap();
    let mut n = 0;
    check_auth(&empty, &BTreeMap::new(), "auth", false, &mut |_, _| n += 1);
    assert_eq!(n, 1, "a slot that sends nothing is refused");
    assert!(serde_json::from_value::<Auth>(serde_json::json!({ "type": "slot", "slot": "team" })).is_err());
}

#[test]
fn an_identity_assertion_is_a_personal_grant_of_a_confidential_client_with_its_identity_provider() {
    let issues = |auth: serde_json::Value| {
        let auth: Auth = serde_json::from_value(auth).unwrap();
        let mut fields = Vec::new();
        check_auth(&auth, &BTreeMap::new(), "auth", true, &mut |f, _| fields.push(f));
        fields
    };
    let idp = serde_json::json!({ "issuer": "https://idp.example", "client_id": "gatehouse" });
    let good = serde_json::json!({ "type": "oauth", "grant": "personal", "flow": "identity_assertion", "client_id": "c",
        "confidential": true, "identity_provider": idp });
    assert!(issues(good.clone()).is_empty(), "{:?}", issues(good.clone()));
    let with = |key: &str, value: serde_json::Value| {
        let mut auth = good.clone();
        auth[key] = value;
        auth
    };
    assert_eq!(issues(with("grant", "shared".into())), ["auth.flow"]);
    assert_eq!(issues(with("confidential", false.into())), ["auth.flow"]);
    assert_eq!(issues(with("identity_provider", serde_json::Value::Null)), ["auth.identity_provider"]);
    assert_eq!(
        issues(with("identity_provider", serde_json::json!({ "issuer": "ftp://idp", "token_endpoint": "x", "client_id": "" }))),
        ["auth.identity_provider.issuer", "auth.identity_provider.token_endpoint", "auth.identity_provider.client_id"]
    );
    assert_eq!(issues(with("flow", "authorization_code".into())), ["auth.identity_provider"]);
    assert!(
        serde_json::from_value::<Auth>(with(
            "identity_provider",
            serde_json::json!({ "issuer": "https://i", "client_id": "c", "x": 1 })
        ))
        .is_err()
    );
}

proptest! {
    #[test]
    fn connector_ids(id in "\\PC{0,70}") {
        let ok = valid_connector_id(&id);
        prop_assert_eq!(ok, !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'));
    }

    #[test]
    fn validation_never_panics(url in "\\PC{0,40}", header in "\\PC{0,20}", value in "\\PC{0,20}") {
        let mut d = Document::default();
        d.connectors.insert("c".into(), Connector::RemoteMcp { url, transport: RemoteTransport::Sse, headers: BTreeMap::from([(header, value)]), auth: Auth::None, timeout_ms: None });
        let _ = d.issues();
    }
}
