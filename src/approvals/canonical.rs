//! The digest of a call's arguments in canonical form, so the approval binds what the call
//! means, not how the agent happened to write it: object keys are sorted (by their UTF-16
//! code units, as JSON Canonicalization, RFC 8785, orders them), whitespace goes, strings are
//! escaped one way, and a number is written one way for its value (`1`, `1.0` and `1e0` are
//! the same number; `-0` is `0`). Arrays keep their order: it is part of what they mean.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `sha256:` and the hex SHA-256 of the canonical text of `value`.
pub fn digest(value: &Value) -> String {
    let mut text = String::new();
    write(value, &mut text);
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The canonical text of `value`.
pub fn canonical(value: &Value) -> String {
    let mut text = String::new();
    write(value, &mut text);
    text
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(key, out);
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

fn string(s: &str, out: &mut String) {
    // serde_json escapes exactly the characters JSON requires, always the same way.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Integers as integers; any other number as the shortest text that reads back as the same
/// double (an integral double within ±2^53 is written as that integer).
fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if f.fract() == 0.0 && f.abs() <= EXACT {
        return (f as i64).to_string();
    }
    // Rust writes the shortest representation that round-trips, never in exponent form.
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;

    #[test]
    fn key_order_whitespace_and_number_forms_do_not_change_the_digest() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2.0, "x"], "x": null}, "c": true}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"c":true,"a":{"x":null,"y":[1.0,2,"x"]},"b":1e0}"#).unwrap();
        assert_eq!(canonical(&a), r#"{"a":{"x":null,"y":[1,2,"x"]},"b":1,"c":true}"#);
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(canonical(&json!(-0.0)), "0");
        assert_eq!(canonical(&json!(0.5)), "0.5");
        assert_eq!(canonical(&json!(1e21)), canonical(&json!(1_000_000_000_000_000_000_000.0)));
    }

    #[test]
    fn a_changed_value_order_of_items_type_or_nesting_changes_the_digest() {
        let base = json!({ "id": 7, "tags": ["a", "b"], "deep": { "n": 1 } });
        for other in [
            json!({ "id": 8, "tags": ["a", "b"], "deep": { "n": 1 } }),
            json!({ "id": 7, "tags": ["b", "a"], "deep": { "n": 1 } }),
            json!({ "id": "7", "tags": ["a", "b"], "deep": { "n": 1 } }),
            json!({ "id": 7, "tags": ["a", "b"], "deep": { "n": 1.5 } }),
            json!({ "id": 7, "tags": ["a", "b"], "deep": { "n": [1] } }),
            json!({ "id": 7, "tags": ["a", "b"], "deep": { "n": 1 }, "extra": null }),
            json!({ "id": 7, "tags": ["a", "b"], "n": 1 }),
        ] {
            assert_ne!(digest(&base), digest(&other), "{other}");
        }
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+E000 sorts after U+1F600 in UTF-8 byte order, before it in UTF-16 code units.
        let v = json!({ "\u{1F600}": 1, "\u{E000}": 2, "a": 3 });
        assert_eq!(canonical(&v), "{\"a\":3,\"\u{1F600}\":1,\"\u{E000}\":2}");
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            (-1.0e12f64..1.0e12).prop_map(|f| json!(f)),
            "[a-z\u{e9}\u{1F600}\"\\\\ ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z0-9_\u{e9}]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// The same value with every object's keys in reverse order and every integral number
    /// written as a float (where a float holds it exactly).
    fn rewritten(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut entries: Vec<_> = m.iter().collect();
                entries.reverse();
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), rewritten(v))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(rewritten).collect()),
            Value::Number(n) => match n.as_i64() {
                Some(i) if i.unsigned_abs() < (1u64 << 53) => json!(i as f64),
                _ => v.clone(),
            },
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn the_digest_is_blind_to_key_order_and_number_form(v in arb_json()) {
            prop_assert_eq!(digest(&v), digest(&rewritten(&v)));
            // Printed and read back (whitespace, escapes), it is the same call.
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            prop_assert_eq!(digest(&v), digest(&serde_json::from_str(&pretty).unwrap()));
            // The canonical text is JSON that means the same value.
            let back: Value = serde_json::from_str(&canonical(&v)).unwrap();
            prop_assert_eq!(canonical(&back), canonical(&v));
        }

        #[test]
        fn wrapping_a_value_changes_the_digest(v in arb_json()) {
            prop_assert_ne!(digest(&v), digest(&json!([v.clone()])));
            prop_assert_ne!(digest(&v), digest(&json!({ "v": v.clone() })));
        }
    }
}
