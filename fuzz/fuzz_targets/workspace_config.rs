//! Workspace configuration documents and connector definitions (`workspaces::config`): a
//! document is refused with a typed error, or parsed into a value that serializes and parses
//! back to itself (each connector too, through the connector API's parser), whose validation
//! names its problems without panicking and whose digest is stable.
#![no_main]
use gatehouse::workspaces::{self, Document, config::Connector, http::parse_connector};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    // A blueprint's document goes through the same parser, then the validation.
    let _ = gatehouse::blueprints::parse_document(value.clone(), None);
    let Ok(document) = serde_json::from_value::<Document>(value) else { return };
    let text = serde_json::to_vec(&document).expect("serializes");
    let again: Document = serde_json::from_slice(&text).expect("what it wrote parses");
    assert_eq!(again, document);
    assert_eq!(serde_json::to_vec(&again).expect("serializes"), text);
    assert_eq!(workspaces::digest(&again).ok(), workspaces::digest(&document).ok());
    let issues = document.issues();
    assert_eq!(issues.is_empty(), document.validate().is_ok());
    for (id, connector) in &document.connectors {
        let value = serde_json::to_value(connector).expect("serializes");
        if let Ok(parsed) = parse_connector(id, value) {
            assert_eq!(&parsed, connector);
        }
        let _: &Connector = connector;
        let _ = (connector.timeout_ms(), connector.kind(), connector.url(), connector.auth());
    }
    if issues.is_empty() {
        let _ = workspaces::config::redaction::Redactor::of(&document.redaction);
    }
});
