//! SEP-2243's `Mcp-Param-*` headers (`gateway::param_headers`): any value encodes to a valid
//! header value that decodes to itself; for a schema and arguments, the headers computed for
//! them pass the check.
#![no_main]
use axum::http::HeaderValue;
use gatehouse::gateway::param_headers::{check, compute, decode, encode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let encoded = encode(text);
        let header = HeaderValue::from_str(&encoded).expect("an encoded value is a header value");
        assert_eq!(header.to_str().ok(), Some(encoded.as_str()));
        assert_eq!(decode(&encoded).as_deref(), Some(text), "encoded as {encoded:?}");
        let _ = decode(text);
    }
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [Value::Object(schema), Value::Object(arguments)] = &pair[..] else { return };
    let computed = compute(schema, arguments);
    let sent: Vec<(String, String)> =
        computed.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().expect("visible ASCII").to_owned())).collect();
    if let Err(e) = check(&sent, schema, arguments) {
        // Only a schema that annotates two arguments with one header (both present:
        // `duplicate`; one present and one absent: `unexpected` for the absent one), or with a
        // name no header can have (`missing`), computes headers its own check refuses.
        assert!(
            e.starts_with("duplicate") || e.starts_with("missing") || e.starts_with("unexpected"),
            "{e}: computed {sent:?}"
        );
    }
});
