use proptest::prelude::*;
use serde_json::json;

use super::{Action, Detector, Redaction, Redactor, Scan, problem};

fn builtins(action: Action) -> Redaction {
    Redaction {
        detectors: super::BUILTINS.iter().map(|(name, _)| Detector { name: (*name).into(), regex: None, action }).collect(),
    }
}

const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
const GTH: &str = "gth_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ";
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc=\n-----END RSA PRIVATE KEY-----";

#[test]
fn every_builtin_masks_its_format_and_leaves_the_rest() {
    let r = Redactor::of(&builtins(Action::Mask)).unwrap();
    let mut v = json!({ "content": [{ "type": "text", "text": format!("key {AWS} and {GTH}; jwt {JWT}\n{PEM}\nend") }] });
    let scan = r.scan(&mut v);
    let text = v["content"][0]["text"].as_str().unwrap();
    assert_eq!(scan, Scan { masked: 4, blocked: None });
    assert_eq!(
        text,
        "key [redacted:aws_access_key] and [redacted:gatehouse_token]; jwt [redacted:jwt]\n[redacted:pem_private_key]\nend"
    );
    assert_eq!(v["content"][0]["type"], "text", "keys and other values are untouched");
    let mut plain = json!({ "text": "AKIA is a prefix; gth_short; eyJ alone" });
    assert_eq!(r.scan(&mut plain), Scan::default());
}

#[test]
fn a_blocking_detector_names_itself() {
    let r = Redactor::of(&builtins(Action::Block)).unwrap();
    let mut v = json!(["fine", format!("x {AWS}")]);
    assert_eq!(r.scan(&mut v).blocked.as_deref(), Some("aws_access_key"));
    let mut big = json!("a".repeat(super::MAX_SCAN_BYTES + 1));
    assert_eq!(r.scan(&mut big).blocked.as_deref(), Some("too_large_to_scan"), "never passed unscanned");
}

#[test]
fn bad_detectors_are_refused() {
    let custom = |name: &str, regex: &str| Detector { name: name.into(), regex: Some(regex.into()), action: Action::Mask };
    assert!(problem(&Detector { name: "nope".into(), regex: None, action: Action::Mask }).is_some());
    assert!(problem(&custom("jwt", "x")).is_some(), "a built-in's name");
    assert!(problem(&custom("c", "(")).is_some());
    assert!(problem(&custom("c", "a*")).is_some(), "matches the empty text");
    assert!(problem(&custom("c", &"a".repeat(513))).is_some());
    assert!(problem(&custom("c", r"(\w{1000}){1000}")).is_some(), "compiled size is capped");
    assert!(problem(&custom("Bad Name", "x")).is_some());
    assert!(problem(&custom("ticket", r"TICKET-\d{6}")).is_none());
}

fn secret() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9A-Z]{16}".prop_map(|s| format!("AKIA{s}")),
        "[A-Za-z0-9_-]{43}".prop_map(|s| format!("gth_{s}")),
        "[A-Za-z0-9_-]{43}".prop_map(|s| format!("gss_{s}")),
        ("[A-Za-z0-9_-]{4,40}", "[A-Za-z0-9_-]{4,40}", "[A-Za-z0-9_-]{0,60}").prop_map(|(a, b, c)| format!("eyJ{a}.eyJ{b}.{c}")),
        "[A-Za-z0-9+/=\n]{0,200}".prop_map(|s| format!("-----BEGIN PRIVATE KEY-----\n{s}\n-----END PRIVATE KEY-----")),
    ]
}

proptest! {
    /// A secret between arbitrary separators never survives masking, wherever it sits.
    #[test]
    fn no_secret_survives_masking(before in "[ -~]{0,40}", s in secret(), after in "[ -~]{0,40}") {
        let r = Redactor::of(&builtins(Action::Mask)).unwrap();
        let mut v = json!({ "a": [format!("{before} {s} {after}")] });
        let scan = r.scan(&mut v);
        let out = v["a"][0].as_str().unwrap();
        prop_assert!(!out.contains(&s), "{} survived in {}", s, out);
        prop_assert!(scan.masked >= 1);
        prop_assert!(scan.blocked.is_none());
    }

    /// Text with nothing secret-shaped in it (no digits or upper case) comes back unchanged.
    #[test]
    fn harmless_text_is_unchanged(text in "[a-z .,;:!?\n-]{0,300}") {
        let r = Redactor::of(&builtins(Action::Mask)).unwrap();
        let mut v = json!({ "t": text.clone() });
        prop_assert_eq!(r.scan(&mut v), Scan::default());
        prop_assert_eq!(v["t"].as_str().unwrap(), text.as_str());
    }

    /// A custom pattern: whatever it is, compiling is refused or scanning terminates, and a
    /// masked text holds no match of any masking detector.
    #[test]
    fn custom_patterns_compile_or_are_refused(pattern in "[a-c\\[\\]()*+?|{}0-9,.\\\\]{1,24}", text in "[a-c0-9 ]{0,200}") {
        let d = Detector { name: "custom".into(), regex: Some(pattern), action: Action::Mask };
        if problem(&d).is_none() {
            let r = Redactor::of(&Redaction { detectors: vec![d] }).unwrap();
            let mut scan = Scan::default();
            let masked = r.text(&text, &mut scan);
            prop_assert_eq!(masked.is_some(), scan.masked > 0);
        }
    }
}
