//! `WWW-Authenticate` challenges (RFC 9110 §11.6.1), parsed just far enough to read a Bearer
//! challenge's `resource_metadata` (RFC 9728 §5.1). Hand-written because no crate we use parses
//! the general grammar; it never panics and refuses what it cannot read rather than guessing.
//!
//! ```text
//! challenge  = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
//! auth-param = token BWS "=" BWS ( token / quoted-string )
//! ```

/// One challenge: its scheme and its parameters (names lowercased; a token68 is dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    fn token(&mut self) -> Option<String> {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii() && is_tchar(b as char)) {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.s[start..self.at]).into_owned())
    }

    fn quoted(&mut self) -> Option<String> {
        if self.peek() != Some(b'"') {
            return None;
        }
        self.at += 1;
        let mut out = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(String::from_utf8_lossy(&out).into_owned());
                }
                b'\\' => {
                    self.at += 1;
                    out.push(self.peek()?);
                    self.at += 1;
                }
                b => {
                    out.push(b);
                    self.at += 1;
                }
            }
        }
    }

    /// Whether what follows is `token BWS "="` (an auth-param) rather than a new challenge.
    fn param_ahead(&self) -> bool {
        let mut probe = Cursor { s: self.s, at: self.at };
        if probe.token().is_none() {
            return false;
        }
        probe.skip_ws();
        // `token=` but not `token==` (a token68 ending in padding is not a parameter).
        probe.peek() == Some(b'=')
    }
}

/// Parses a `WWW-Authenticate` value into its challenges; `None` when it is malformed.
pub fn parse(header: &str) -> Option<Vec<Challenge>> {
    let mut c = Cursor { s: header.as_bytes(), at: 0 };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        // Empty list elements are allowed (`, ,`).
        c.skip_ws();
        while c.peek() == Some(b',') {
            c.at += 1;
            c.skip_ws();
        }
        if c.peek().is_none() {
            return Some(out);
        }
        let scheme = c.token()?;
        let mut challenge = Challenge { scheme, params: Vec::new() };
        let spaced = matches!(c.peek(), Some(b' ' | b'\t'));
        c.skip_ws();
        if spaced && c.peek().is_some() && c.peek() != Some(b',') {
            if c.param_ahead() {
                // #auth-param, until a list element that starts another challenge.
                loop {
                    let name = c.token()?.to_ascii_lowercase();
                    c.skip_ws();
                    if c.peek() != Some(b'=') {
                        return None;
                    }
                    c.at += 1;
                    c.skip_ws();
                    let value = if c.peek() == Some(b'"') { c.quoted()? } else { c.token()? };
                    challenge.params.push((name, value));
                    c.skip_ws();
                    match c.peek() {
                        None => break,
                        Some(b',') => {
                            while c.peek() == Some(b',') {
                                c.at += 1;
                                c.skip_ws();
                            }
                            if c.peek().is_none() || !c.param_ahead() {
                                break;
                            }
                        }
                        Some(_) => return None,
                    }
                }
            } else {
                // token68: kept out of the result (no scheme we read uses one).
                let start = c.at;
                while c.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)) {
                    c.at += 1;
                }
                while c.peek() == Some(b'=') {
                    c.at += 1;
                }
                if c.at == start {
                    return None;
                }
                c.skip_ws();
                if !matches!(c.peek(), None | Some(b',')) {
                    return None;
                }
            }
        } else if c.peek().is_some() && c.peek() != Some(b',') {
            return None;
        }
        out.push(challenge);
    }
}

/// The `resource_metadata` URL of the first Bearer challenge in any of `values`.
pub fn resource_metadata<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<String> {
    bearer_param(values, "resource_metadata")
}

/// The parameter `name` (lowercase) of the first Bearer challenge in any of `values`; a DPoP
/// challenge (RFC 9449 §7.1) counts as one, since it carries the same parameters.
pub fn bearer_param<'a>(values: impl IntoIterator<Item = &'a str>, name: &str) -> Option<String> {
    values
        .into_iter()
        .filter_map(parse)
        .flatten()
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer") || c.scheme.eq_ignore_ascii_case("dpop"))
        .and_then(|c| c.params.into_iter().find(|(n, _)| n == name).map(|(_, v)| v))
}

/// The scopes a Bearer challenge's `scope` names (RFC 6750 §3: space-separated), if it names any.
pub fn scopes<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Vec<String>> {
    let scope = bearer_param(values, "scope")?;
    let scopes: Vec<String> = scope.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect();
    (!scopes.is_empty()).then_some(scopes)
}

/// Whether a Bearer challenge says the token lacks scope (RFC 6750 §3.1 `insufficient_scope`).
pub fn insufficient_scope<'a>(values: impl IntoIterator<Item = &'a str>) -> bool {
    bearer_param(values, "error").as_deref() == Some("insufficient_scope")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_examples_of_rfc_9728_and_9110() {
        let h = r#"Bearer resource_metadata="https://resource.example.com/.well-known/oauth-protected-resource""#;
        assert_eq!(resource_metadata([h]).as_deref(), Some("https://resource.example.com/.well-known/oauth-protected-resource"));
        let h = r#"Basic realm="simple", Newauth realm="apps", type=1, title="Login to \"apps\"", Bearer error="invalid_token", resource_metadata="https://r.example/m""#;
        let parsed = parse(h).unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[1].params[2], ("title".into(), r#"Login to "apps""#.into()));
        assert_eq!(resource_metadata([h]).as_deref(), Some("https://r.example/m"));
        assert_eq!(parse("Negotiate abc/+==, Bearer").unwrap().len(), 2);
        assert_eq!(resource_metadata(["Basic realm=x", "bearer RESOURCE_METADATA = \"u\""]).as_deref(), Some("u"));
        assert_eq!(resource_metadata(["Bearer realm=\"x\""]), None);
        let h = r#"Bearer error="insufficient_scope", scope="mcp:basic  mcp:write", resource_metadata="u""#;
        assert!(insufficient_scope([h]));
        assert_eq!(scopes([h]), Some(vec!["mcp:basic".to_owned(), "mcp:write".to_owned()]));
        assert!(!insufficient_scope([r#"Bearer error="invalid_token""#]));
        assert_eq!(
            resource_metadata([r#"DPoP algs="ES256", resource_metadata="https://r.example/m""#]).as_deref(),
            Some("https://r.example/m")
        );
        assert_eq!(scopes(["Bearer scope=\"\""]), None);
        for bad in ["Bearer realm=\"open", "Bearer =x", "Bearer realm=x y", "\"x\"", "Bearer a=b c=d"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
    }

    fn value() -> impl Strategy<Value = String> {
        // Any printable text, quotes and backslashes included.
        "[ -~]{0,40}"
    }

    fn quote(v: &str) -> String {
        format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
    }

    proptest! {
        /// Challenges rendered with quoted or bare values and arbitrary spacing parse back to
        /// exactly what was rendered.
        #[test]
        fn rendered_challenges_parse_back(
            challenges in prop::collection::vec((token(), prop::collection::vec((token(), value(), any::<bool>()), 0..4)), 1..4),
            gap in "[ \t]{0,2}",
        ) {
            let mut parts = Vec::new();
            let mut expected = Vec::new();
            for (scheme, params) in &challenges {
                let mut rendered: Vec<String> = Vec::new();
                let mut kept = Vec::new();
                for (name, v, bare) in params {
                    let bare = *bare && !v.is_empty() && v.chars().all(is_tchar);
                    let shown = if bare { v.clone() } else { quote(v) };
                    rendered.push(format!("{name}{gap}={gap}{shown}"));
                    kept.push((name.to_ascii_lowercase(), v.clone()));
                }
                let text = if rendered.is_empty() { scheme.clone() } else { format!("{scheme} {}", rendered.join(&format!("{gap},{gap}"))) };
                parts.push(text);
                expected.push(Challenge { scheme: scheme.clone(), params: kept });
            }
            let header = parts.join(&format!("{gap},{gap}"));
            prop_assert_eq!(parse(&header), Some(expected));
        }

        /// Arbitrary input never panics, and a Bearer challenge's resource_metadata is found
        /// whatever comes before it.
        #[test]
        fn arbitrary_input_never_panics(junk in "\\PC{0,80}", url in value()) {
            let _ = parse(&junk);
            let header = format!("Basic realm={}, Bearer error=\"invalid_token\", resource_metadata={}", quote(&junk), quote(&url));
            prop_assert_eq!(resource_metadata([header.as_str()]), Some(url));
        }
    }
}
