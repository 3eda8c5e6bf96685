use serde_json::{Value, json};

use super::{changes, digest, guarded};

fn tool(description: &str, annotations: Value) -> Value {
    json!({ "name": "t", "description": description, "inputSchema": { "type": "object", "properties": { "a": { "type": "string" } } }, "annotations": annotations })
}

#[test]
fn the_digest_ignores_key_order_nulls_and_unpinned_fields() {
    let a = tool("d", json!({ "readOnlyHint": true }));
    let reordered: Value = serde_json::from_str(
        r#"{"annotations":{"readOnlyHint":true},"inputSchema":{"properties":{"a":{"type":"string"}},"type":"object"},"description":"d","name":"t","title":null,"icons":[{"src":"x"}],"_meta":{"k":1}}"#,
    )
    .unwrap();
    assert_eq!(digest(&a), digest(&reordered));
    assert_ne!(digest(&a), digest(&tool("d ", json!({ "readOnlyHint": true }))), "a description change is a change");
    assert_ne!(digest(&a), digest(&tool("d", json!({ "readOnlyHint": false }))), "an annotation change is a change");
    let mut schema = a.clone();
    schema["inputSchema"]["properties"]["b"] = json!({ "type": "number" });
    assert_ne!(digest(&a), digest(&schema));
    let mut output = a.clone();
    output["outputSchema"] = json!({ "type": "object" });
    assert_ne!(digest(&a), digest(&output));
}

#[test]
fn changes_name_each_differing_field_with_both_sides() {
    let a = tool("old", json!({ "readOnlyHint": true }));
    let b = tool("new", json!({ "readOnlyHint": true }));
    assert_eq!(changes(&a, &b), vec![json!({ "field": "description", "pinned": "old", "pending": "new" })]);
    assert!(changes(&a, &a).is_empty());
}

/// Whether MCP's fail-closed rule calls a definition a read.
fn read(d: &Value) -> bool {
    let a = &d["annotations"];
    a["readOnlyHint"] == true && a["destructiveHint"] != true
}

/// Every combination of the two hints (absent, false, true) on both sides: what is served
/// while a change waits is a read only when both the pinned and the pending definition are.
#[test]
fn a_guarded_definition_is_never_wider_than_either_side() {
    let states = [None, Some(false), Some(true)];
    let annotations = |ro: Option<bool>, de: Option<bool>| {
        let mut a = serde_json::Map::new();
        if let Some(ro) = ro {
            a.insert("readOnlyHint".into(), ro.into());
        }
        if let Some(de) = de {
            a.insert("destructiveHint".into(), de.into());
        }
        Value::Object(a)
    };
    for ro_p in states {
        for de_p in states {
            for ro_q in states {
                for de_q in states {
                    let pinned = tool("d", annotations(ro_p, de_p));
                    let pending = tool("e", annotations(ro_q, de_q));
                    let served = guarded(&pinned, &pending);
                    assert_eq!(read(&served), read(&pinned) && read(&pending), "{pinned} / {pending} → {served}");
                    assert_eq!(served["description"], "d", "the pinned text is served");
                }
            }
        }
    }
    let no_annotations = json!({ "name": "t", "inputSchema": { "type": "object" } });
    assert!(!read(&guarded(&no_annotations, &tool("d", annotations(Some(true), None)))));
}
