//! SCIM filters (RFC 7644 §3.4.2.2): a parser to a tree whose attribute paths are resolved
//! against the resource's schema (an unknown attribute is `invalidFilter`, like a malformed
//! filter), and an evaluator over rendered resources.
//!
//! Precedence, from the RFC: `not` binds tightest, then `and`, then `or`; parentheses group;
//! `attr[…]` filters the values of a multi-valued complex attribute.

use std::cmp::Ordering;

use serde_json::Value;

use super::{
    ScimError,
    schema::{Attr, Kind, ResourceKind, strip_urn},
};

/// Characters a filter may have.
pub const MAX_CHARS: usize = 4096;
/// Nesting (parentheses, `not`, `[…]`) a filter may have.
pub const MAX_DEPTH: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Co,
    Sw,
    Ew,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    fn parse(word: &str) -> Option<Op> {
        Some(match word.to_ascii_lowercase().as_str() {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "co" => Op::Co,
            "sw" => Op::Sw,
            "ew" => Op::Ew,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            "lt" => Op::Lt,
            "le" => Op::Le,
            _ => return None,
        })
    }
}

/// An attribute path, resolved: canonical names, and how its values compare.
#[derive(Clone, Debug, PartialEq)]
pub struct AttrPath {
    pub attr: String,
    pub sub: Option<String>,
    pub case_exact: bool,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    Or(Box<Filter>, Box<Filter>),
    And(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
    Present(AttrPath),
    Compare(AttrPath, Op, Value),
    /// `attr[inner]`: some value of the multi-valued complex `attr` matches `inner`, whose
    /// paths name `attr`'s sub-attributes.
    ValuePath(String, Box<Filter>),
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Open,
    Close,
    OpenBracket,
    CloseBracket,
    Str(String),
    Word(String),
}

fn invalid(detail: impl Into<String>) -> ScimError {
    ScimError::bad("invalidFilter", detail)
}

fn tokenize(s: &str) -> Result<Vec<Token>, ScimError> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' | ')' | '[' | ']' => {
                tokens.push(match c {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    '[' => Token::OpenBracket,
                    _ => Token::CloseBracket,
                });
                i += 1;
            }
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                if i >= chars.len() {
                    return Err(invalid("a string is not closed"));
                }
                i += 1;
                let literal: String = chars[start..i].iter().collect();
                let text: String = serde_json::from_str(&literal).map_err(|_| invalid("a string has a bad escape"))?;
                tokens.push(Token::Str(text));
            }
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '(' | ')' | '[' | ']' | '"') {
                    i += 1;
                }
                tokens.push(Token::Word(chars[start..i].iter().collect()));
            }
        }
    }
    Ok(tokens)
}

/// Parses `text` as a filter on resources of `kind`.
pub fn parse(kind: ResourceKind, text: &str) -> Result<Filter, ScimError> {
    parse_in(&Scope::Resource(kind), text)
}

/// Parses `text` as a filter whose names resolve in `scope` (a patch path's `[…]`).
pub fn parse_in(scope: &Scope, text: &str) -> Result<Filter, ScimError> {
    if text.chars().count() > MAX_CHARS {
        return Err(invalid(format!("a filter has at most {MAX_CHARS} characters")));
    }
    let tokens = tokenize(text)?;
    let mut p = Parser { tokens, at: 0, depth: 0 };
    let f = p.or(scope)?;
    if p.at != p.tokens.len() {
        return Err(invalid("unexpected text after the filter"));
    }
    Ok(f)
}

impl Filter {
    /// `name eq value` on a plain attribute: its name and value.
    pub fn simple_equality(&self) -> Option<(&str, &Value)> {
        match self {
            Filter::Compare(p, Op::Eq, v) if p.sub.is_none() && !v.is_null() => Some((&p.attr, v)),
            _ => None,
        }
    }
}

/// What attribute names resolve against: the resource's attributes, or inside `attr[…]` the
/// sub-attributes of `attr`.
pub enum Scope {
    Resource(ResourceKind),
    Values(&'static Attr),
}

impl Scope {
    /// Resolves a raw path (`name`, `name.sub`, `urn:…:name.sub`).
    pub fn resolve(&self, raw: &str) -> Result<(&'static Attr, Option<&'static Attr>), ScimError> {
        let name = match self {
            Scope::Resource(kind) => strip_urn(*kind, raw),
            Scope::Values(_) => raw,
        };
        let unknown = || invalid(format!("unknown attribute '{}'", super::schema::clip(raw)));
        if !valid_name(name) {
            return Err(invalid(format!("'{}' is not an attribute path", super::schema::clip(raw))));
        }
        let (top, sub) = match name.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (name, None),
        };
        let attr = match self {
            Scope::Resource(kind) => kind.find(top),
            Scope::Values(parent) => parent.find_sub(top),
        }
        .ok_or_else(unknown)?;
        let sub = match sub {
            Some(s) => Some(attr.find_sub(s).ok_or_else(unknown)?),
            None => None,
        };
        Ok((attr, sub))
    }
}

/// ATTRNAME *1("." ATTRNAME), where a name is ALPHA *(ALPHA / DIGIT / "-" / "_") or `$ref`.
fn valid_name(s: &str) -> bool {
    let part = |p: &str| {
        p == "$ref"
            || p.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let mut parts = s.split('.');
    let ok = parts.next().is_some_and(part) && parts.clone().count() <= 1;
    ok && parts.all(part)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn keyword(&self, k: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w.eq_ignore_ascii_case(k))
    }

    fn expect(&mut self, t: Token, what: &str) -> Result<(), ScimError> {
        if self.peek() == Some(&t) {
            self.at += 1;
            Ok(())
        } else {
            Err(invalid(format!("expected {what}")))
        }
    }

    fn deeper(&mut self) -> Result<(), ScimError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(invalid(format!("a filter nests at most {MAX_DEPTH} deep")));
        }
        Ok(())
    }

    fn or(&mut self, scope: &Scope) -> Result<Filter, ScimError> {
        let mut left = self.and(scope)?;
        while self.keyword("or") {
            self.at += 1;
            let right = self.and(scope)?;
            left = Filter::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self, scope: &Scope) -> Result<Filter, ScimError> {
        let mut left = self.unary(scope)?;
        while self.keyword("and") {
            self.at += 1;
            let right = self.unary(scope)?;
            left = Filter::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self, scope: &Scope) -> Result<Filter, ScimError> {
        if self.keyword("not") && self.tokens.get(self.at + 1) == Some(&Token::Open) {
            self.at += 1;
            return Ok(Filter::Not(Box::new(self.group(scope)?)));
        }
        if self.peek() == Some(&Token::Open) {
            return self.group(scope);
        }
        self.attr_expr(scope)
    }

    fn group(&mut self, scope: &Scope) -> Result<Filter, ScimError> {
        self.deeper()?;
        self.expect(Token::Open, "'('")?;
        let f = self.or(scope)?;
        self.expect(Token::Close, "')'")?;
        self.depth -= 1;
        Ok(f)
    }

    fn attr_expr(&mut self, scope: &Scope) -> Result<Filter, ScimError> {
        let Some(Token::Word(raw)) = self.peek().cloned() else {
            return Err(invalid("expected an attribute path"));
        };
        self.at += 1;
        let (attr, sub) = scope.resolve(&raw)?;
        if self.peek() == Some(&Token::OpenBracket) {
            if sub.is_some() || attr.kind != Kind::Complex || !matches!(scope, Scope::Resource(_)) {
                return Err(invalid(format!("'{}' cannot be filtered with [ ]", attr.name)));
            }
            self.deeper()?;
            self.at += 1;
            let inner = self.or(&Scope::Values(attr))?;
            self.expect(Token::CloseBracket, "']'")?;
            self.depth -= 1;
            return Ok(Filter::ValuePath(attr.name.clone(), Box::new(inner)));
        }
        // A complex attribute without a sub-attribute compares its `value` (RFC 7644 §3.4.2.2).
        let target = sub.or_else(|| (attr.kind == Kind::Complex).then(|| attr.find_sub("value")).flatten()).unwrap_or(attr);
        let path = AttrPath {
            attr: attr.name.clone(),
            sub: sub.map(|s| s.name.clone()),
            case_exact: target.case_exact,
            kind: target.kind,
        };
        let Some(Token::Word(op)) = self.peek().cloned() else {
            return Err(invalid(format!("expected an operator after '{}'", attr.name)));
        };
        self.at += 1;
        if op.eq_ignore_ascii_case("pr") {
            return Ok(Filter::Present(path));
        }
        let op = Op::parse(&op).ok_or_else(|| invalid(format!("unknown operator '{}'", super::schema::clip(&op))))?;
        let value = match self.peek().cloned() {
            Some(Token::Str(s)) => Value::String(s),
            Some(Token::Word(w)) => match w.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" => Value::Null,
                n => serde_json::from_str::<serde_json::Number>(n)
                    .map(Value::Number)
                    .map_err(|_| invalid(format!("'{}' is not a value", super::schema::clip(n))))?,
            },
            _ => return Err(invalid("expected a value")),
        };
        self.at += 1;
        let ordering = matches!(op, Op::Gt | Op::Ge | Op::Lt | Op::Le);
        let substring = matches!(op, Op::Co | Op::Sw | Op::Ew);
        if (ordering && matches!(path.kind, Kind::Boolean | Kind::Binary)) || (substring && path.kind == Kind::Boolean) {
            return Err(invalid(format!("'{}' cannot be compared that way", attr.name)));
        }
        Ok(Filter::Compare(path, op, value))
    }
}

/// The values `path` names in `doc`: every element of a multi-valued attribute, and each
/// element's sub-attribute (or `value`, for a complex one named without sub-attribute).
fn values<'a>(doc: &'a Value, path: &AttrPath) -> Vec<&'a Value> {
    let top = match doc.get(&path.attr) {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(v) => vec![v],
        None => Vec::new(),
    };
    top.into_iter()
        .filter_map(|v| match (&path.sub, v) {
            (Some(sub), v) => v.get(sub),
            (None, Value::Object(o)) => o.get("value"),
            (None, v) => Some(v),
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn fold(s: &str, exact: bool) -> String {
    if exact { s.to_owned() } else { s.to_lowercase() }
}

fn compare(actual: &Value, op: Op, expected: &Value, path: &AttrPath) -> bool {
    match (actual, expected) {
        (Value::String(a), Value::String(e)) => {
            if path.kind == Kind::DateTime
                && let (Ok(a), Ok(e)) = (chrono::DateTime::parse_from_rfc3339(a), chrono::DateTime::parse_from_rfc3339(e))
            {
                return ordered(a.cmp(&e), op);
            }
            let (a, e) = (fold(a, path.case_exact), fold(e, path.case_exact));
            match op {
                Op::Co => a.contains(&e),
                Op::Sw => a.starts_with(&e),
                Op::Ew => a.ends_with(&e),
                _ => ordered(a.cmp(&e), op),
            }
        }
        (Value::Number(a), Value::Number(e)) => match (a.as_f64(), e.as_f64()) {
            (Some(a), Some(e)) => a.partial_cmp(&e).is_some_and(|o| ordered(o, op)),
            _ => false,
        },
        (Value::Bool(a), Value::Bool(e)) => op == Op::Eq && a == e,
        _ => false,
    }
}

fn ordered(o: Ordering, op: Op) -> bool {
    match op {
        Op::Eq => o == Ordering::Equal,
        Op::Gt => o == Ordering::Greater,
        Op::Ge => o != Ordering::Less,
        Op::Lt => o == Ordering::Less,
        Op::Le => o != Ordering::Greater,
        Op::Ne | Op::Co | Op::Sw | Op::Ew => false,
    }
}

/// Does the rendered resource (or, inside `[…]`, one value of it) match?
pub fn matches(f: &Filter, doc: &Value) -> bool {
    match f {
        Filter::Or(a, b) => matches(a, doc) || matches(b, doc),
        Filter::And(a, b) => matches(a, doc) && matches(b, doc),
        Filter::Not(a) => !matches(a, doc),
        Filter::Present(p) => values(doc, p).iter().any(|v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        }),
        // `eq null` is "not present"; `ne` is the negation of `eq` over all the values.
        Filter::Compare(p, Op::Eq, Value::Null) => values(doc, p).is_empty(),
        Filter::Compare(p, Op::Ne, e) => !matches(&Filter::Compare(p.clone(), Op::Eq, e.clone()), doc),
        Filter::Compare(p, op, e) => values(doc, p).into_iter().any(|v| compare(v, *op, e, p)),
        Filter::ValuePath(attr, inner) => match doc.get(attr) {
            Some(Value::Array(items)) => items.iter().any(|item| matches(inner, item)),
            Some(v @ Value::Object(_)) => matches(inner, v),
            _ => false,
        },
    }
}

/// The one form a directory sends to find a resource by name (`userName eq "…"`,
/// `displayName eq "…"`), answered by the unique index instead of a scan.
pub fn equality_on<'a>(f: &'a Filter, attr: &str) -> Option<&'a str> {
    match f {
        Filter::Compare(p, Op::Eq, Value::String(s)) if p.attr == attr && p.sub.is_none() => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn user() -> Value {
        json!({
            "id": "2819c223", "userName": "Bjensen", "active": true,
            "name": {"familyName": "Jensen", "givenName": "Barbara"},
            "emails": [{"value": "bjensen@example.com", "type": "work", "primary": true}, {"value": "babs@jensen.org", "type": "home"}],
            "meta": {"lastModified": "2026-05-13T04:42:34Z", "resourceType": "User"},
        })
    }

    fn check(text: &str) -> bool {
        matches(&parse(ResourceKind::User, text).unwrap_or_else(|e| panic!("{text}: {}", e.detail)), &user())
    }

    #[test]
    fn the_rfc_examples_parse_and_match() {
        for yes in [
            r#"userName eq "bjensen""#,
            r#"USERNAME Eq "BJENSEN""#,
            r#"name.familyName co "ens""#,
            r#"userName sw "B""#,
            r#"urn:ietf:params:scim:schemas:core:2.0:User:userName sw "bj""#,
            "name.givenName pr",
            r#"meta.lastModified gt "2026-01-01T00:00:00Z""#,
            r#"meta.lastModified ge "2026-05-13T04:42:34+00:00""#,
            r#"emails[type eq "work" and value co "@example.com"]"#,
            r#"emails co "jensen.org""#,
            r#"userType eq null"#,
            r#"not (userName eq "x") and (active eq true or title pr)"#,
            r#"emails.type eq "home""#,
            r#"userName ne "someone""#,
            "active eq true",
        ] {
            assert!(check(yes), "{yes}");
        }
        for no in [
            r#"id eq "2819C223""#,
            r#"userName eq "x" or name.givenName eq "y""#,
            r#"emails[type eq "work" and value co "jensen.org"]"#,
            "title pr",
            r#"not(userName sw "b")"#,
            "active eq false",
            r#"meta.lastModified lt "2026-01-01T00:00:00Z""#,
        ] {
            assert!(!check(no), "{no}");
        }
    }

    #[test]
    fn and_binds_tighter_than_or() {
        // a or (b and c), not (a or b) and c.
        assert!(check(r#"userName eq "bjensen" or title pr and title pr"#));
    }

    #[test]
    fn malformed_and_unknown_filters_are_invalid_filter() {
        for bad in [
            "",
            "userName",
            r#"userName eq"#,
            r#"userName eq "unterminated"#,
            r#"userName zz "x""#,
            r#"shoeSize eq 3"#,
            r#"name.nickname eq "x""#,
            r#"urn:example:other:userName eq "x""#,
            r#"(userName eq "x""#,
            r#"userName eq "x")"#,
            r#"emails[type eq "work""#,
            r#"emails[shoe eq "x"]"#,
            r#"userName[value eq "x"]"#,
            r#"active gt true"#,
            r#"userName eq "x" and"#,
            r#"userName eq bare"#,
            r#"a.b.c eq "x""#,
            r#"userName eq "\q""#,
        ] {
            let e = parse(ResourceKind::User, bad).unwrap_err();
            assert_eq!((e.status, e.scim_type), (400, Some("invalidFilter")), "{bad}");
        }
        let deep = format!("{}userName pr{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        assert!(parse(ResourceKind::User, &deep).is_err());
        let long = format!(r#"userName eq "{}""#, "x".repeat(MAX_CHARS));
        assert!(parse(ResourceKind::User, &long).is_err());
    }

    fn leaf() -> impl Strategy<Value = String> {
        let attr = prop::sample::select(vec!["userName", "name.givenName", "emails.value", "title", "active", "emails"]);
        let op = prop::sample::select(vec!["eq", "ne", "co", "sw", "ew", "pr"]);
        (attr, op, "[a-zA-Z@.]{0,6}").prop_map(|(a, o, v)| match (a, o) {
            (_, "pr") => format!("{a} pr"),
            ("active", _) => "active eq true".to_owned(),
            _ => format!("{a} {o} \"{v}\""),
        })
    }

    fn sub_leaf() -> impl Strategy<Value = String> {
        let attr = prop::sample::select(vec!["value", "type", "display"]);
        let op = prop::sample::select(vec!["eq", "ne", "co", "sw", "ew", "gt", "le"]);
        (attr, op, "[a-z@.]{0,4}").prop_map(|(a, o, v)| format!("{a} {o} \"{v}\""))
    }

    fn filter_text() -> impl Strategy<Value = String> {
        leaf().prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} and {b}")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) or ({b})")),
                inner.clone().prop_map(|a| format!("not ({a})")),
                (inner, sub_leaf()).prop_map(|(a, s)| format!("{a} or emails[value pr and {s}]")),
            ]
        })
    }

    proptest! {
        /// Any text: a filter or an `invalidFilter` error, never a panic or another error.
        #[test]
        fn any_text_parses_or_is_invalid_filter(text in "\\PC{0,120}") {
            if let Err(e) = parse(ResourceKind::User, &text) {
                prop_assert_eq!((e.status, e.scim_type), (400, Some("invalidFilter")));
            }
        }

        /// Well-formed filters parse, and `not (f)` always matches exactly where `f` does not.
        #[test]
        fn generated_filters_parse_and_negate(text in filter_text()) {
            let f = parse(ResourceKind::User, &text);
            prop_assert!(f.is_ok(), "{}: {:?}", text, f.err().map(|e| e.detail));
            let not = parse(ResourceKind::User, &format!("not ({text})")).unwrap();
            prop_assert_ne!(matches(&f.unwrap(), &user()), matches(&not, &user()));
        }

        /// Cutting a well-formed filter short is refused, or still a filter; never a panic.
        #[test]
        fn truncated_filters_never_panic(text in filter_text(), cut in 0usize..200) {
            let cut: String = text.chars().take(cut).collect();
            if let Err(e) = parse(ResourceKind::User, &cut) {
                prop_assert_eq!(e.scim_type, Some("invalidFilter"));
            }
        }
    }
}
