//! SCIM PATCH (RFC 7644 §3.5.2): a parser for the `PatchOp` message and its paths, and the
//! operations applied to a resource's document. The patched document is then validated whole
//! by [`super::schema::normalize`], exactly like a replace, so a patch can never store what a
//! replace could not; every error is found before anything is written.

use serde_json::{Map, Value};

use super::{
    ScimError,
    filter::{self, Filter, Scope},
    schema::{Attr, Kind, Mutability, ResourceKind, canonical_keys, clip, strip_urn},
};

pub const PATCH_URN: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
/// Operations one request may carry.
pub const MAX_OPERATIONS: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Add,
    Remove,
    Replace,
}

/// Where an operation applies: `attr`, `attr.sub`, `attr[filter]` or `attr[filter].sub`.
#[derive(Clone, Debug)]
pub struct Target {
    pub attr: &'static Attr,
    pub filter: Option<Filter>,
    pub sub: Option<&'static Attr>,
}

#[derive(Clone, Debug)]
pub struct Operation {
    pub op: OpKind,
    pub path: Option<Target>,
    pub value: Option<Value>,
}

fn path_error(detail: impl Into<String>) -> ScimError {
    ScimError::bad("invalidPath", detail)
}

/// Parses a `PatchOp` message.
pub fn parse(kind: ResourceKind, body: &Value) -> Result<Vec<Operation>, ScimError> {
    let Value::Object(body) = body else {
        return Err(ScimError::syntax("the request body is not a JSON object"));
    };
    let mut ops = None;
    let mut schema_ok = false;
    for (k, v) in body {
        if k.eq_ignore_ascii_case("schemas") {
            schema_ok =
                v.as_array().is_some_and(|l| l.iter().any(|s| s.as_str().is_some_and(|s| s.eq_ignore_ascii_case(PATCH_URN))));
        } else if k.eq_ignore_ascii_case("Operations") {
            ops = Some(v);
        } else {
            return Err(ScimError::syntax(format!("unknown member '{}' of a PatchOp", clip(k))));
        }
    }
    if !schema_ok {
        return Err(ScimError::syntax(format!("'schemas' must be [\"{PATCH_URN}\"]")));
    }
    let Some(Value::Array(ops)) = ops else {
        return Err(ScimError::syntax("'Operations' must be a list"));
    };
    if ops.is_empty() {
        return Err(ScimError::syntax("'Operations' is empty"));
    }
    if ops.len() > MAX_OPERATIONS {
        return Err(ScimError::value(format!("a PatchOp carries at most {MAX_OPERATIONS} operations")));
    }
    ops.iter().map(|op| operation(kind, op)).collect()
}

fn operation(kind: ResourceKind, raw: &Value) -> Result<Operation, ScimError> {
    let Value::Object(raw) = raw else {
        return Err(ScimError::syntax("an operation is not an object"));
    };
    let (mut op, mut path, mut value) = (None, None, None);
    for (k, v) in raw {
        match k.to_ascii_lowercase().as_str() {
            "op" => op = v.as_str(),
            "path" => path = Some(v.as_str().ok_or_else(|| path_error("'path' is not a string"))?),
            "value" => value = Some(v.clone()),
            _ => return Err(ScimError::syntax(format!("unknown member '{}' of an operation", clip(k)))),
        }
    }
    let op = match op.map(str::to_ascii_lowercase).as_deref() {
        Some("add") => OpKind::Add,
        Some("remove") => OpKind::Remove,
        Some("replace") => OpKind::Replace,
        _ => return Err(ScimError::syntax("'op' is add, remove or replace")),
    };
    let path = path.map(|p| parse_path(kind, p)).transpose()?;
    match (op, &path, &value) {
        (OpKind::Remove, None, _) => return Err(ScimError::bad("noTarget", "remove needs a path")),
        (OpKind::Add | OpKind::Replace, _, None) => return Err(ScimError::syntax("add and replace need a value")),
        (OpKind::Add | OpKind::Replace, None, Some(v)) if !v.is_object() => {
            return Err(ScimError::syntax("without a path, the value is an object of attributes"));
        }
        _ => {}
    }
    Ok(Operation { op, path, value })
}

/// Parses a patch path against the resource's schema.
pub fn parse_path(kind: ResourceKind, raw: &str) -> Result<Target, ScimError> {
    let s = strip_urn(kind, raw.trim());
    let target = if let Some(open) = s.find('[') {
        let close = s.rfind(']').filter(|c| *c > open).ok_or_else(|| path_error("a '[' is not closed"))?;
        let attr = kind.find(&s[..open]).ok_or_else(|| path_error(format!("unknown attribute '{}'", clip(&s[..open]))))?;
        if !(attr.multi && attr.kind == Kind::Complex) {
            return Err(path_error(format!("'{}' cannot be filtered with [ ]", attr.name)));
        }
        let inner = filter::parse_in(&Scope::Values(attr), &s[open + 1..close])?;
        let sub = match &s[close + 1..] {
            "" => None,
            rest => {
                let name = rest.strip_prefix('.').ok_or_else(|| path_error("unexpected text after ']'"))?;
                Some(attr.find_sub(name).ok_or_else(|| path_error(format!("unknown attribute '{}.{}'", attr.name, clip(name))))?)
            }
        };
        Target { attr, filter: Some(inner), sub }
    } else {
        let (attr, sub) = Scope::Resource(kind).resolve(s).map_err(|e| path_error(e.detail))?;
        Target { attr, filter: None, sub }
    };
    if target.attr.mutability == Mutability::ReadOnly || target.sub.is_some_and(|s| s.mutability == Mutability::ReadOnly) {
        return Err(ScimError::bad("mutability", format!("'{}' is read-only", clip(raw))));
    }
    Ok(target)
}

/// Applies `ops`, in order, to the resource's document (its writable attributes).
pub fn apply(kind: ResourceKind, doc: &mut Map<String, Value>, ops: &[Operation]) -> Result<(), ScimError> {
    for op in ops {
        match (&op.path, &op.value) {
            (Some(t), value) => apply_at(doc, op.op, t, value.clone())?,
            (None, Some(Value::Object(attrs))) => {
                for (k, v) in attrs {
                    // The core attributes may come wrapped in their schema's URN.
                    if k.eq_ignore_ascii_case(kind.urn())
                        && let Value::Object(inner) = v
                    {
                        for (k, v) in inner {
                            apply_at(doc, op.op, &parse_path(kind, k)?, Some(v.clone()))?;
                        }
                        continue;
                    }
                    apply_at(doc, op.op, &parse_path(kind, k)?, Some(v.clone()))?;
                }
            }
            (None, _) => return Err(ScimError::syntax("without a path, the value is an object of attributes")),
        }
    }
    Ok(())
}

fn as_list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        v => vec![v],
    }
}

fn apply_at(doc: &mut Map<String, Value>, op: OpKind, t: &Target, value: Option<Value>) -> Result<(), ScimError> {
    let name = t.attr.name.clone();
    let value = value.map(|v| canonical_keys(t.sub.unwrap_or(t.attr), v));
    match (&t.filter, t.sub, op) {
        (None, None, OpKind::Remove) => match (value, doc.get_mut(&name)) {
            // `remove` with a value (as some directories send for group members): the values
            // whose `value` matches go.
            (Some(v), Some(Value::Array(items))) if t.attr.multi => {
                let gone: Vec<Value> = as_list(v).into_iter().filter_map(|i| i.get("value").cloned()).collect();
                items.retain(|i| !i.get("value").is_some_and(|x| gone.contains(x)));
            }
            _ => {
                doc.remove(&name);
            }
        },
        (None, None, _) => {
            let value = value.unwrap_or(Value::Null);
            if t.attr.multi {
                let new = as_list(value);
                let mut items = match (op, doc.remove(&name)) {
                    (OpKind::Add, Some(old)) => as_list(old),
                    _ => Vec::new(),
                };
                if new.iter().any(|v| v.get("primary") == Some(&Value::Bool(true))) {
                    for i in items.iter_mut() {
                        if let Some(o) = i.as_object_mut() {
                            o.insert("primary".into(), Value::Bool(false));
                        }
                    }
                }
                for v in new {
                    if !items.contains(&v) {
                        items.push(v);
                    }
                }
                doc.insert(name, Value::Array(items));
            } else if t.attr.kind == Kind::Complex {
                merge(doc.entry(name).or_insert_with(|| Value::Object(Map::new())), value)?;
            } else {
                doc.insert(name, value);
            }
        }
        (None, Some(sub), _) => {
            let Some(current) = doc.get_mut(&name) else {
                if op == OpKind::Remove {
                    return Ok(());
                }
                let mut o = Map::new();
                o.insert(sub.name.clone(), value.unwrap_or(Value::Null));
                doc.insert(name, if t.attr.multi { Value::Array(vec![Value::Object(o)]) } else { Value::Object(o) });
                return Ok(());
            };
            let targets: Vec<&mut Value> = match current {
                Value::Array(items) => items.iter_mut().collect(),
                v => vec![v],
            };
            for item in targets {
                set_sub(item, &sub.name, op, value.clone());
            }
        }
        (Some(f), sub, _) => {
            let items = doc.get_mut(&name).and_then(Value::as_array_mut);
            let hits: Vec<usize> = items
                .as_ref()
                .map(|items| items.iter().enumerate().filter(|(_, i)| filter::matches(f, i)).map(|(n, _)| n).collect())
                .unwrap_or_default();
            if hits.is_empty() {
                // Adding to `emails[type eq "work"].value` when there is no work email yet
                // creates it (as directories expect); anything else has no target.
                if op != OpKind::Remove
                    && let (Some(sub), Some((key, expected))) = (sub, f.simple_equality())
                {
                    let mut o = Map::new();
                    o.insert(key.to_owned(), expected.clone());
                    o.insert(sub.name.clone(), value.unwrap_or(Value::Null));
                    let list = doc.entry(name).or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(items) = list {
                        items.push(Value::Object(o));
                    }
                    return Ok(());
                }
                return Err(ScimError::bad("noTarget", format!("no value of '{}' matches the filter", t.attr.name)));
            }
            let Some(items) = doc.get_mut(&name).and_then(Value::as_array_mut) else { return Ok(()) };
            match (sub, op) {
                (None, OpKind::Remove) => {
                    let mut n = 0;
                    items.retain(|_| {
                        n += 1;
                        !hits.contains(&(n - 1))
                    });
                }
                (None, _) => {
                    let value = value.unwrap_or(Value::Null);
                    for n in hits {
                        items[n] = value.clone();
                    }
                }
                (Some(sub), _) => {
                    for n in hits {
                        set_sub(&mut items[n], &sub.name, op, value.clone());
                    }
                }
            }
        }
    }
    Ok(())
}

fn set_sub(item: &mut Value, sub: &str, op: OpKind, value: Option<Value>) {
    if let Some(o) = item.as_object_mut() {
        match op {
            OpKind::Remove => {
                o.remove(sub);
            }
            _ => {
                o.insert(sub.to_owned(), value.unwrap_or(Value::Null));
            }
        }
    }
}

fn merge(target: &mut Value, value: Value) -> Result<(), ScimError> {
    match (target, value) {
        (Value::Object(t), Value::Object(v)) => {
            t.extend(v);
            Ok(())
        }
        (t, Value::Null) => {
            *t = Value::Null;
            Ok(())
        }
        _ => Err(ScimError::value("a complex attribute takes an object")),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::scim::schema::normalize;

    fn patch(doc: Value, ops: Value) -> Result<Value, ScimError> {
        let kind = ResourceKind::User;
        let ops = parse(kind, &json!({"schemas": [PATCH_URN], "Operations": ops}))?;
        let Value::Object(mut doc) = doc else { unreachable!() };
        apply(kind, &mut doc, &ops)?;
        Ok(Value::Object(normalize(kind, &Value::Object(doc))?))
    }

    fn base() -> Value {
        json!({"userName": "bjensen", "emails": [{"value": "b@work.example", "type": "work", "primary": true}], "name": {"givenName": "B"}})
    }

    #[test]
    fn the_rfc_operations_do_what_they_say() {
        let d = patch(base(), json!([{"op": "replace", "path": "active", "value": "False"}])).unwrap();
        assert_eq!(d["active"], false);
        let d = patch(base(), json!([{"op": "Add", "value": {"displayName": "Babs", "name": {"familyName": "J"}}}])).unwrap();
        assert_eq!((d["displayName"].clone(), d["name"].clone()), (json!("Babs"), json!({"givenName": "B", "familyName": "J"})));
        let d = patch(base(), json!([{"op": "add", "path": "emails", "value": [{"value": "h@home.example", "primary": true}]}]))
            .unwrap();
        assert_eq!(d["emails"].as_array().unwrap().len(), 2);
        assert_eq!(d["emails"][0]["primary"], false, "the new primary value takes over");
        let d = patch(base(), json!([{"op": "replace", "path": "emails[type eq \"work\"].value", "value": "new@work.example"}]))
            .unwrap();
        assert_eq!(d["emails"][0]["value"], "new@work.example");
        let d =
            patch(base(), json!([{"op": "add", "path": "emails[type eq \"home\"].value", "value": "h@home.example"}])).unwrap();
        assert_eq!(d["emails"][1], json!({"type": "home", "value": "h@home.example"}));
        let d = patch(base(), json!([{"op": "remove", "path": "emails[type eq \"work\"]"}])).unwrap();
        assert!(d.get("emails").is_none());
        let d = patch(base(), json!([{"op": "remove", "path": "name.givenName"}])).unwrap();
        assert!(d.get("name").is_none());
        let d = patch(
            base(),
            json!([{"op": "replace", "path": "urn:ietf:params:scim:schemas:core:2.0:User:userName", "value": "x"}]),
        )
        .unwrap();
        assert_eq!(d["userName"], "x");
    }

    #[test]
    fn bad_patches_are_scim_errors() {
        let cases = [
            (json!([{"op": "remove", "path": "userName"}]), "invalidValue"),
            (json!([{"op": "add", "path": "shoeSize", "value": 3}]), "invalidPath"),
            (json!([{"op": "add", "path": "name.nick", "value": 3}]), "invalidPath"),
            (json!([{"op": "replace", "path": "id", "value": "x"}]), "mutability"),
            (json!([{"op": "replace", "path": "groups", "value": []}]), "mutability"),
            (json!([{"op": "remove"}]), "noTarget"),
            (json!([{"op": "remove", "path": "emails[type eq \"home\"]"}]), "noTarget"),
            (json!([{"op": "move", "path": "title", "value": "x"}]), "invalidSyntax"),
            (json!([{"op": "add", "path": "title"}]), "invalidSyntax"),
            (json!([{"op": "add", "value": "not an object"}]), "invalidSyntax"),
            (json!([{"op": "add", "value": {"shoeSize": 1}}]), "invalidPath"),
            (json!([{"op": "add", "path": "title", "value": 3}]), "invalidValue"),
            (json!([{"op": "add", "path": "emails[type eq]", "value": 3}]), "invalidFilter"),
            (json!([{"op": "add", "path": "title", "value": "x", "extra": 1}]), "invalidSyntax"),
            (json!([]), "invalidSyntax"),
            (
                json!((0..=MAX_OPERATIONS).map(|_| json!({"op": "add", "path": "title", "value": "x"})).collect::<Vec<_>>()),
                "invalidValue",
            ),
        ];
        for (ops, expected) in cases {
            let e = patch(base(), ops.clone()).unwrap_err();
            assert_eq!((e.status, e.scim_type), (400, Some(expected)), "{ops}");
        }
        let e = parse(ResourceKind::User, &json!({"Operations": [{"op": "add", "path": "title", "value": "x"}]})).unwrap_err();
        assert_eq!(e.scim_type, Some("invalidSyntax"), "the PatchOp schema is required");
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["value", "type", "primary", "givenName", "x"]).prop_map(str::to_owned),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn any_path() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "title",
                "name",
                "name.givenName",
                "emails",
                "emails.value",
                "emails[type eq \"work\"]",
                "emails[type eq \"work\"].value",
                "active",
                "userName",
                "groups",
                "id",
                "nope",
                "emails[",
                "emails[value pr]x",
                "name[givenName pr]",
                "meta.created",
            ])
            .prop_map(str::to_owned),
            "\\PC{0,20}",
        ]
    }

    proptest! {
        /// Any operation on any document: a valid document or a 400 SCIM error, never a panic.
        #[test]
        fn any_patch_yields_a_valid_document_or_a_scim_error(
            op in prop::sample::select(vec!["add", "remove", "replace", "Replace", "bogus"]),
            path in prop::option::of(any_path()),
            value in prop::option::of(any_json()),
        ) {
            let mut o = serde_json::Map::new();
            o.insert("op".into(), json!(op));
            if let Some(p) = path { o.insert("path".into(), json!(p)); }
            if let Some(v) = value { o.insert("value".into(), v); }
            match patch(base(), json!([o])) {
                Ok(doc) => prop_assert!(normalize(ResourceKind::User, &doc).is_ok()),
                Err(e) => prop_assert_eq!(e.status, 400),
            }
        }
    }
}
