//! `http_api` path templates and mappings (`workspaces::config::http_api_description`,
//! `gateway::http_api_connector`): a template is refused with a message or names its
//! placeholders; rendered with any arguments, the request URL is refused with a message or
//! keeps the template's shape — every path argument stays in its own segment and reads back
//! as itself, and the query carries exactly the query arguments.
#![no_main]
use arbitrary::Arbitrary;
use gatehouse::{
    gateway::http_api_connector::request_url,
    workspaces::config::http_api_description::{HttpApi, placeholders},
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug)]
struct Input {
    template: String,
    /// Path and query arguments, in the order their names come.
    values: Vec<String>,
    query: Vec<String>,
    base: bool,
}

fuzz_target!(|input: Input| {
    let Ok(names) = placeholders(&input.template) else { return };
    for name in &names {
        assert!(input.template.contains(&format!("{{{name}}}")));
    }
    // The validation's rules for a path: absolute, bounded, no query or fragment.
    if !input.template.starts_with('/') || input.template.len() > 1024 || input.template.contains(['?', '#']) {
        return;
    }
    let base = if input.base { "https://api.example/v1/" } else { "http://127.0.0.1:9" };
    let query: Vec<String> = input.query.iter().filter(|q| !names.contains(&q.as_str())).cloned().collect();
    let api: HttpApi = serde_json::from_value(json!({ "base_url": base, "tools": [{
        "name": "t", "description": "d", "method": "GET", "path": input.template, "query": query
    }] }))
    .expect("an API");
    let mut args = serde_json::Map::new();
    let mut values = input.values.iter().cycle();
    for name in names.iter().map(|n| n.to_string()).chain(query.iter().cloned()) {
        let value = values.next().cloned().unwrap_or_default();
        args.entry(name).or_insert(Value::String(value));
    }
    let url = match request_url(&api, &api.tools[0], &args) {
        Ok(url) => url,
        Err(message) => {
            assert!(message.contains("cannot") || message.contains("not valid"), "{message}");
            return;
        }
    };
    assert!(url.as_str().starts_with(base.trim_end_matches('/')), "{url} left {base}");
    // The query: exactly the query arguments, in order.
    let pairs: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let expected: Vec<(String, String)> =
        query.iter().map(|q| (q.clone(), args[q].as_str().unwrap_or_default().to_owned())).collect();
    assert_eq!(pairs, expected, "{url}");
    // The path: one segment per template segment, after the base's.
    let base_segments = url::Url::parse(base).expect("a URL").path_segments().map_or(0, |s| s.filter(|s| !s.is_empty()).count());
    let segments: Vec<&str> = url.path_segments().expect("a base URL").skip(base_segments).collect();
    let template: Vec<&str> = input.template[1..].split('/').collect();
    if !simple(&input.template) {
        return;
    }
    assert_eq!(segments.len(), template.len(), "{url} from {}", input.template);
    // Each segment reads back as its template segment with the arguments in place.
    for (segment, pattern) in segments.iter().zip(&template) {
        // In one pass: an argument's value may itself look like a placeholder.
        let (mut rendered, mut rest) = (String::new(), *pattern);
        while let (Some(open), Some(close)) = (rest.find('{'), rest.find('}')) {
            rendered.push_str(&rest[..open]);
            rendered.push_str(args[&rest[open + 1..close]].as_str().unwrap_or_default());
            rest = &rest[close + 1..];
        }
        rendered.push_str(rest);
        let decoded = percent_decode(segment);
        assert_eq!(decoded, rendered, "{url} from {}", input.template);
    }
});

/// A template whose literal text the URL parser keeps as it is (no percent signs, backslashes,
/// blanks, controls or dot segments of its own), so the URL's segments map onto it.
fn simple(template: &str) -> bool {
    let literal_dots = template[1..].split('/').any(|s| matches!(s, "." | ".."));
    !literal_dots && !template.chars().any(|c| c == '%' || c == '\\' || c.is_whitespace() || c.is_control())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
