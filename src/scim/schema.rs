//! The schemas Gatehouse publishes (RFC 7643 §4: the core User, without `password`, and the
//! core Group, whose members are Users), read once from `schemas/schemas.json`, and the one
//! validator every write goes through: a document in, the canonical attributes out, or a SCIM
//! error naming what is wrong. Patches are applied to a document and validated the same way,
//! so no write stores anything the schema does not describe.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::ScimError;

pub const USER_URN: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
pub const GROUP_URN: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
/// Values one multi-valued attribute may hold (a group's members: [`MAX_MEMBERS`]).
pub const MAX_VALUES: usize = 100;
pub const MAX_MEMBERS: usize = 1000;
/// Characters one string value may hold (binary values: [`MAX_BINARY_CHARS`]).
pub const MAX_STRING_CHARS: usize = 2048;
pub const MAX_BINARY_CHARS: usize = 16_384;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    String,
    Boolean,
    Decimal,
    Integer,
    DateTime,
    Binary,
    Reference,
    Complex,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutability {
    ReadOnly,
    ReadWrite,
    Immutable,
    WriteOnly,
}

/// One attribute (or sub-attribute) of a schema.
#[derive(Clone, Debug)]
pub struct Attr {
    pub name: String,
    pub kind: Kind,
    pub multi: bool,
    pub required: bool,
    pub case_exact: bool,
    pub mutability: Mutability,
    pub sub: Vec<Attr>,
}

impl Attr {
    fn simple(name: &str, kind: Kind, case_exact: bool, mutability: Mutability) -> Attr {
        Attr { name: name.into(), kind, multi: false, required: false, case_exact, mutability, sub: Vec::new() }
    }

    /// The sub-attribute named `name` (case-insensitively, as SCIM names are).
    pub fn find_sub(&self, name: &str) -> Option<&Attr> {
        self.sub.iter().find(|a| a.name.eq_ignore_ascii_case(name))
    }
}

/// The two resource types served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    User,
    Group,
}

impl ResourceKind {
    pub fn urn(self) -> &'static str {
        match self {
            ResourceKind::User => USER_URN,
            ResourceKind::Group => GROUP_URN,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::User => "User",
            ResourceKind::Group => "Group",
        }
    }
    pub fn endpoint(self) -> &'static str {
        match self {
            ResourceKind::User => "Users",
            ResourceKind::Group => "Groups",
        }
    }
    /// Every attribute of a resource of this type: the schema's, then the common ones
    /// (`id`, `externalId`, `meta`; RFC 7643 §3.1).
    pub fn attrs(self) -> &'static [Attr] {
        match self {
            ResourceKind::User => &SCHEMAS.user,
            ResourceKind::Group => &SCHEMAS.group,
        }
    }
    pub fn find(self, name: &str) -> Option<&'static Attr> {
        self.attrs().iter().find(|a| a.name.eq_ignore_ascii_case(name))
    }
}

struct Schemas {
    documents: Vec<Value>,
    user: Vec<Attr>,
    group: Vec<Attr>,
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    // The file is part of the binary and a unit test parses it: it cannot fail at run time.
    let documents: Vec<Value> = serde_json::from_str(include_str!("schemas/schemas.json")).unwrap_or_default();
    let attrs_of = |urn: &str| {
        let mut attrs: Vec<Attr> = documents
            .iter()
            .find(|d| d["id"] == urn)
            .and_then(|d| d["attributes"].as_array())
            .map(|a| a.iter().filter_map(parse_attr).collect())
            .unwrap_or_default();
        attrs.extend(common_attrs());
        attrs
    };
    let (user, group) = (attrs_of(USER_URN), attrs_of(GROUP_URN));
    Schemas { documents, user, group }
});

/// The published schema documents (User, Group, ResourceType, ServiceProviderConfig, Schema).
pub fn documents() -> &'static [Value] {
    &SCHEMAS.documents
}

fn common_attrs() -> Vec<Attr> {
    use Kind::*;
    use Mutability::*;
    let meta_sub = vec![
        Attr::simple("resourceType", String, true, ReadOnly),
        Attr::simple("created", DateTime, false, ReadOnly),
        Attr::simple("lastModified", DateTime, false, ReadOnly),
        Attr::simple("location", Reference, true, ReadOnly),
        Attr::simple("version", String, true, ReadOnly),
    ];
    vec![
        Attr::simple("id", String, true, ReadOnly),
        Attr::simple("externalId", String, true, ReadWrite),
        Attr { sub: meta_sub, kind: Complex, ..Attr::simple("meta", Complex, false, ReadOnly) },
    ]
}

fn parse_attr(v: &Value) -> Option<Attr> {
    let kind = match v["type"].as_str()? {
        "string" => Kind::String,
        "boolean" => Kind::Boolean,
        "decimal" => Kind::Decimal,
        "integer" => Kind::Integer,
        "dateTime" => Kind::DateTime,
        "binary" => Kind::Binary,
        "reference" => Kind::Reference,
        "complex" => Kind::Complex,
        _ => return None,
    };
    let mutability = match v["mutability"].as_str().unwrap_or("readWrite") {
        "readOnly" => Mutability::ReadOnly,
        "immutable" => Mutability::Immutable,
        "writeOnly" => Mutability::WriteOnly,
        _ => Mutability::ReadWrite,
    };
    Some(Attr {
        name: v["name"].as_str()?.to_owned(),
        kind,
        multi: v["multiValued"].as_bool().unwrap_or(false),
        required: v["required"].as_bool().unwrap_or(false),
        case_exact: v["caseExact"].as_bool().unwrap_or(false),
        mutability,
        sub: v["subAttributes"].as_array().map(|a| a.iter().filter_map(parse_attr).collect()).unwrap_or_default(),
    })
}

/// Renames the keys of `value` (a value of `attr`) to their canonical spelling, so a merge
/// never holds one attribute under two spellings. Unknown keys stay for the validator to
/// refuse.
pub fn canonical_keys(attr: &Attr, value: Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(|v| canonical_keys(attr, v)).collect()),
        Value::Object(map) if attr.kind == Kind::Complex => {
            Value::Object(map.into_iter().map(|(k, v)| (attr.find_sub(&k).map(|s| s.name.clone()).unwrap_or(k), v)).collect())
        }
        other => other,
    }
}

/// Validates a whole resource document (a create, a replace, or a patched document) and
/// returns its writable attributes, canonically spelled, unassigned ones left out. `id`,
/// `meta` and read-only attributes are the server's and are ignored, as RFC 7643 §7 says.
pub fn normalize(kind: ResourceKind, input: &Value) -> Result<Map<String, Value>, ScimError> {
    let Value::Object(doc) = input else {
        return Err(ScimError::syntax("the request body is not a JSON object"));
    };
    let mut out = Map::new();
    for (key, value) in doc {
        if key.eq_ignore_ascii_case("schemas") {
            check_schemas(kind, value)?;
        } else if key.eq_ignore_ascii_case(kind.urn()) {
            // The core attributes may also come wrapped in their schema's URN.
            let Value::Object(inner) = value else {
                return Err(ScimError::syntax(format!("'{key}' is not an object")));
            };
            for (k, v) in inner {
                put(kind, &mut out, k, v)?;
            }
        } else {
            put(kind, &mut out, key, value)?;
        }
    }
    for attr in kind.attrs() {
        if attr.required && attr.mutability != Mutability::ReadOnly && !out.contains_key(&attr.name) {
            return Err(ScimError::value(format!("'{}' is required", attr.name)));
        }
    }
    Ok(out)
}

fn check_schemas(kind: ResourceKind, value: &Value) -> Result<(), ScimError> {
    let Some(list) = value.as_array() else {
        return Err(ScimError::syntax("'schemas' is not a list"));
    };
    let mut core = false;
    for s in list {
        match s.as_str() {
            Some(urn) if urn.eq_ignore_ascii_case(kind.urn()) => core = true,
            Some(urn) => return Err(ScimError::value(format!("unknown schema '{}'", clip(urn)))),
            None => return Err(ScimError::syntax("'schemas' holds a value that is not a string")),
        }
    }
    if !core {
        return Err(ScimError::value(format!("'schemas' must include {}", kind.urn())));
    }
    Ok(())
}

fn put(kind: ResourceKind, out: &mut Map<String, Value>, key: &str, value: &Value) -> Result<(), ScimError> {
    let Some(attr) = kind.find(key) else {
        return Err(ScimError::syntax(format!("unknown attribute '{}'", clip(key))));
    };
    if attr.mutability == Mutability::ReadOnly {
        return Ok(());
    }
    if let Some(v) = validate(attr, value)? {
        out.insert(attr.name.clone(), v);
    }
    Ok(())
}

/// One attribute's value, checked against its definition; `None` when unassigned (null, an
/// empty list or an empty object).
pub fn validate(attr: &Attr, value: &Value) -> Result<Option<Value>, ScimError> {
    if value.is_null() {
        return Ok(None);
    }
    if !attr.multi {
        return single(attr, value);
    }
    let Value::Array(items) = value else {
        return Err(ScimError::value(format!("'{}' is multi-valued: send a list", attr.name)));
    };
    let cap = if attr.name == "members" { MAX_MEMBERS } else { MAX_VALUES };
    if items.len() > cap {
        return Err(ScimError::value(format!("'{}' holds more than {cap} values", attr.name)));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if let Some(v) = single(attr, item)?
            && !out.contains(&v)
        {
            out.push(v);
        }
    }
    let primaries = out.iter().filter(|v| v.get("primary") == Some(&Value::Bool(true))).count();
    if primaries > 1 {
        return Err(ScimError::value(format!("at most one value of '{}' is primary", attr.name)));
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

fn single(attr: &Attr, value: &Value) -> Result<Option<Value>, ScimError> {
    let bad = |what: &str| ScimError::value(format!("'{}' must be {what}", attr.name));
    let v = match (attr.kind, value) {
        (_, Value::Null) => return Ok(None),
        (Kind::String | Kind::Reference, Value::String(s)) => {
            if s.chars().count() > MAX_STRING_CHARS {
                return Err(bad(&format!("at most {MAX_STRING_CHARS} characters")));
            }
            value.clone()
        }
        (Kind::Binary, Value::String(s)) => {
            if s.len() > MAX_BINARY_CHARS {
                return Err(bad(&format!("at most {MAX_BINARY_CHARS} characters")));
            }
            value.clone()
        }
        (Kind::Boolean, Value::Bool(_)) => value.clone(),
        // Some directories send booleans as strings ("True"): taken, as their meaning is plain.
        (Kind::Boolean, Value::String(s)) if s.eq_ignore_ascii_case("true") => Value::Bool(true),
        (Kind::Boolean, Value::String(s)) if s.eq_ignore_ascii_case("false") => Value::Bool(false),
        (Kind::Integer, Value::Number(n)) if n.is_i64() => value.clone(),
        (Kind::Decimal, Value::Number(_)) => value.clone(),
        (Kind::DateTime, Value::String(s)) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => value.clone(),
        (Kind::Complex, Value::Object(map)) => {
            let mut out = Map::new();
            for (k, v) in map {
                let Some(sub) = attr.find_sub(k) else {
                    return Err(ScimError::syntax(format!("unknown attribute '{}.{}'", attr.name, clip(k))));
                };
                if sub.mutability == Mutability::ReadOnly {
                    continue;
                }
                if let Some(v) = validate(sub, v)? {
                    out.insert(sub.name.clone(), v);
                }
            }
            if out.is_empty() {
                return Ok(None);
            }
            Value::Object(out)
        }
        (Kind::String | Kind::Reference | Kind::Binary, _) => return Err(bad("a string")),
        (Kind::Boolean, _) => return Err(bad("true or false")),
        (Kind::Integer, _) => return Err(bad("an integer")),
        (Kind::Decimal, _) => return Err(bad("a number")),
        (Kind::DateTime, _) => return Err(bad("a date and time (RFC 3339)")),
        (Kind::Complex, _) => return Err(bad("an object")),
    };
    Ok(Some(v))
}

/// A client's text, cut short for an error message.
pub fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// `attributes` / `excludedAttributes` (RFC 7644 §3.4.2.5): which attributes a response
/// carries. Names are matched case-insensitively, with or without the schema's URN.
#[derive(Clone, Debug, Default)]
pub struct Projection {
    include: Vec<(String, Option<String>)>,
    exclude: Vec<(String, Option<String>)>,
}

impl Projection {
    pub fn new(kind: ResourceKind, attributes: Option<&str>, excluded: Option<&str>) -> Projection {
        let parse = |raw: Option<&str>| -> Vec<(String, Option<String>)> {
            raw.unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let s = strip_urn(kind, s);
                    match s.split_once('.') {
                        Some((a, b)) => (a.to_ascii_lowercase(), Some(b.to_ascii_lowercase())),
                        None => (s.to_ascii_lowercase(), None),
                    }
                })
                .collect()
        };
        Projection { include: parse(attributes), exclude: parse(excluded) }
    }

    /// Applies the projection to a rendered resource; `id` and `schemas` always stay.
    pub fn apply(&self, mut doc: Map<String, Value>) -> Map<String, Value> {
        let always = |k: &str| k == "id" || k == "schemas";
        if !self.include.is_empty() {
            doc = doc
                .into_iter()
                .filter_map(|(k, v)| {
                    if always(&k) {
                        return Some((k, v));
                    }
                    let lower = k.to_ascii_lowercase();
                    let picks: Vec<&Option<String>> = self.include.iter().filter(|(a, _)| *a == lower).map(|(_, s)| s).collect();
                    if picks.is_empty() {
                        None
                    } else if picks.iter().any(|s| s.is_none()) {
                        Some((k, v))
                    } else {
                        let subs: Vec<&str> = picks.iter().filter_map(|s| s.as_deref()).collect();
                        keep_subs(v, &subs).map(|v| (k, v))
                    }
                })
                .collect();
        }
        for (attr, sub) in &self.exclude {
            let Some(key) = doc.keys().find(|k| k.eq_ignore_ascii_case(attr)).cloned() else { continue };
            if always(&key) {
                continue;
            }
            match sub {
                None => {
                    doc.remove(&key);
                }
                Some(sub) => {
                    if let Some(v) = doc.get_mut(&key) {
                        drop_sub(v, sub);
                    }
                }
            }
        }
        doc
    }
}

/// `name` without its schema's URN prefix (`urn:…:User:name` → `name`).
pub fn strip_urn(kind: ResourceKind, name: &str) -> &str {
    // `get` rather than indexing: a client's text may have a multi-byte character there.
    let urn = kind.urn();
    match (name.get(..urn.len()), name.get(urn.len()..)) {
        (Some(head), Some(rest)) if head.eq_ignore_ascii_case(urn) => rest.strip_prefix(':').unwrap_or(name),
        _ => name,
    }
}

fn keep_subs(v: Value, subs: &[&str]) -> Option<Value> {
    let keep = |o: Map<String, Value>| -> Map<String, Value> {
        o.into_iter().filter(|(k, _)| subs.iter().any(|s| s.eq_ignore_ascii_case(k))).collect()
    };
    match v {
        Value::Object(o) => Some(Value::Object(keep(o))),
        Value::Array(items) => Some(Value::Array(
            items.into_iter().map(|i| if let Value::Object(o) = i { Value::Object(keep(o)) } else { i }).collect(),
        )),
        _ => None,
    }
}

fn drop_sub(v: &mut Value, sub: &str) {
    match v {
        Value::Object(o) => o.retain(|k, _| !k.eq_ignore_ascii_case(sub)),
        Value::Array(items) => items.iter_mut().for_each(|i| drop_sub(i, sub)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_published_schemas_parse_and_describe_users_and_groups() {
        assert_eq!(documents().len(), 5);
        assert!(ResourceKind::User.find("USERNAME").is_some_and(|a| a.required));
        assert!(ResourceKind::User.find("password").is_none(), "no password is ever taken");
        assert!(ResourceKind::Group.find("members").is_some_and(|a| a.multi && a.find_sub("$ref").is_some()));
        assert!(ResourceKind::User.find("groups").is_some_and(|a| a.mutability == Mutability::ReadOnly));
    }

    #[test]
    fn documents_are_checked_and_canonicalized() {
        let ok = normalize(
            ResourceKind::User,
            &json!({"schemas": [USER_URN], "UserName": "a", "id": "x", "name": {"GIVENNAME": "A"}, "emails": [], "active": "False"}),
        )
        .unwrap();
        assert_eq!(Value::Object(ok), json!({"userName": "a", "name": {"givenName": "A"}, "active": false}));
        let refused = [
            json!([]),
            json!({"userName": "a", "shoeSize": 3}),
            json!({"userName": "a", "name": {"nick": "b"}}),
            json!({"displayName": "no userName"}),
            json!({"userName": 7}),
            json!({"userName": "a", "emails": {"value": "not a list"}}),
            json!({"userName": "a", "emails": [{"value": "a", "primary": true}, {"value": "b", "primary": true}]}),
            json!({"userName": "a", "schemas": ["urn:example:other"]}),
            json!({"userName": "a", "phoneNumbers": (0..=MAX_VALUES).map(|i| json!({"value": i.to_string()})).collect::<Vec<_>>()}),
        ];
        for doc in refused {
            let e = normalize(ResourceKind::User, &doc).unwrap_err();
            assert_eq!(e.status, 400, "{doc}");
        }
    }

    #[test]
    fn a_urn_prefix_is_cut_only_at_a_character_boundary() {
        // Found by the filter's property test: a multi-byte character where the URN would end.
        let name = format!("{}\u{1F574}x", &USER_URN[..USER_URN.len() - 2]);
        assert_eq!(strip_urn(ResourceKind::User, &name), name);
        assert_eq!(strip_urn(ResourceKind::User, &format!("{USER_URN}:userName")), "userName");
        assert_eq!(strip_urn(ResourceKind::User, USER_URN), USER_URN);
    }

    #[test]
    fn projections_keep_and_drop_what_they_name() {
        let doc = json!({"schemas": [USER_URN], "id": "1", "userName": "a", "name": {"givenName": "A", "familyName": "B"}});
        let Value::Object(doc) = doc else { unreachable!() };
        let p = Projection::new(ResourceKind::User, Some("name.givenName"), None);
        assert_eq!(Value::Object(p.apply(doc.clone())), json!({"schemas": [USER_URN], "id": "1", "name": {"givenName": "A"}}));
        let p = Projection::new(ResourceKind::User, None, Some(&format!("{USER_URN}:userName,id")));
        assert_eq!(
            Value::Object(p.apply(doc)),
            json!({"schemas": [USER_URN], "id": "1", "name": {"givenName": "A", "familyName": "B"}})
        );
    }
}
