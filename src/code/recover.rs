//! What an agent sends is not always a bare expression: it may come inside a Markdown code
//! fence, or as a module with one `export default` function. Both are recovered here, before
//! the engine sees the text; and the common mistakes get a fixed repair hint.

/// Code larger than this (in bytes, before recovery) is refused.
pub const MAX_CODE_BYTES: usize = 65_536;

/// The program to evaluate, and how many lines of the caller's text precede its first line
/// (so a reported line number is a line of what the caller sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub source: String,
    pub line_offset: usize,
}

/// Why the text is not a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    TooLarge(usize),
    Empty,
}

/// Recovers the program from `text`: the body of the first code fence if there is one, and
/// the function after a leading `export default`; trailing semicolons are dropped.
pub fn recover(text: &str) -> Result<Program, Refused> {
    if text.len() > MAX_CODE_BYTES {
        return Err(Refused::TooLarge(text.len()));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (body, mut line_offset) = unfence(text);
    // Leading blank lines move the first line down.
    let trimmed_start = body.trim_start();
    line_offset += body[..body.len() - trimmed_start.len()].matches('\n').count();
    let mut source = trimmed_start.trim_end();
    if let Some(rest) = source.strip_prefix("export default") {
        // Only when followed by a boundary: `export defaultValue` is not this.
        if rest.starts_with(|c: char| c.is_whitespace() || c == '(') {
            let before = rest.len() - rest.trim_start().len();
            line_offset += rest[..before].matches('\n').count();
            source = rest.trim_start();
        }
    }
    let source = source.trim_end_matches(|c: char| c == ';' || c.is_whitespace());
    if source.is_empty() {
        return Err(Refused::Empty);
    }
    Ok(Program { source: source.to_owned(), line_offset })
}

/// The body of the first complete code fence (```lang … ```), and the lines before it; the
/// text itself when there is none.
fn unfence(text: &str) -> (&str, usize) {
    let mut offset = 0;
    let mut open: Option<(usize, usize)> = None; // (byte after the opening line, its line number + 1)
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let is_fence = line.trim_start().starts_with("```");
        match open {
            None if is_fence => open = Some((offset + line.len(), n + 1)),
            Some((start, lines)) if is_fence && line.trim() == "```" => return (&text[start..offset], lines),
            _ => {}
        }
        offset += line.len();
    }
    // An opening fence never closed: take everything after it.
    match open {
        Some((start, lines)) => (&text[start..], lines),
        None => (text, 0),
    }
}

/// The common mistakes, each with one fixed repair hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mistake {
    Modules,
    TypeScript,
    ShadowedGatehouse,
    InventedGlobal,
    NotAFunction,
}

impl Mistake {
    pub fn hint(self) -> &'static str {
        match self {
            Mistake::Modules => {
                "There are no modules here: remove `import`/`require` and use the global `gatehouse` object \
                 (search, describe, call, result, skill, emit) and `console`."
            }
            Mistake::TypeScript => {
                "The program is JavaScript, not TypeScript: remove type annotations, interfaces, generics and `as` casts."
            }
            Mistake::ShadowedGatehouse => {
                "Do not declare a variable or parameter named `gatehouse`: it hides the host object. Write \
                 `async () => { … await gatehouse.call(…) … }` with no parameters."
            }
            Mistake::InventedGlobal => {
                "The only globals are `gatehouse` (search, describe, call, result, skill, emit), `console` and the \
                 standard JavaScript built-ins; there is no fetch, timer, process, require or tool object."
            }
            Mistake::NotAFunction => {
                "Send one async arrow function expression, e.g. `async () => { const r = await gatehouse.search({ query: \
                 \"issues\" }); return r.total; }`."
            }
        }
    }
}

/// The mistake behind an error of `name` with `message` in `source`, if it is a common one.
pub fn diagnose(source: &str, name: &str, message: &str) -> Option<Mistake> {
    let modules = message.contains("import")
        || message.contains("require")
        || message.contains("export")
        || source.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("import ") || l.starts_with("import{") || l.starts_with("export ")
        })
        || source.contains("require(");
    if modules && (name == "SyntaxError" || message.contains("is not defined") || message.contains("module")) {
        return Some(Mistake::Modules);
    }
    if name == "SyntaxError" && looks_like_typescript(source) {
        return Some(Mistake::TypeScript);
    }
    if declares_gatehouse(source) {
        return Some(Mistake::ShadowedGatehouse);
    }
    if name == "ReferenceError" && message.contains("is not defined") {
        return Some(Mistake::InventedGlobal);
    }
    None
}

/// Type annotations, interfaces, generics on calls, `as` casts.
fn looks_like_typescript(source: &str) -> bool {
    const TYPES: [&str; 10] = ["string", "number", "boolean", "any", "unknown", "void", "Promise<", "Record<", "Array<", "never"];
    let annotated = source.match_indices(':').any(|(i, _)| {
        let after = source[i + 1..].trim_start();
        TYPES.iter().any(|t| {
            after.starts_with(t) && after[t.len()..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$'))
        })
    });
    let declared = source.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("interface ") || l.starts_with("type ") && l.contains('=') || l.starts_with("enum ")
    });
    annotated || declared || source.contains(" as any") || source.contains(" as const") || source.contains(" as string")
}

/// Whether the program binds the name `gatehouse` itself (a declaration or a parameter).
fn declares_gatehouse(source: &str) -> bool {
    let bytes = source.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    source.match_indices("gatehouse").any(|(i, _)| {
        let end = i + "gatehouse".len();
        if (i > 0 && ident(bytes[i - 1])) || bytes.get(end).is_some_and(|&c| ident(c)) {
            return false;
        }
        let before = source[..i].trim_end();
        let after = source[end..].trim_start();
        let declared = ["const", "let", "var", "function", "class"].iter().any(|k| {
            before.ends_with(k) && before[..before.len() - k.len()].chars().next_back().is_none_or(|c| !c.is_alphanumeric())
        });
        let parameter = (before.ends_with('(') || before.ends_with(',')) && (after.starts_with(')') || after.starts_with(','))
            || after.starts_with("=>")
            || (after.starts_with('=') && !after.starts_with("==") && before.ends_with('('));
        declared || parameter
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(text: &str) -> Program {
        recover(text).unwrap()
    }

    #[test]
    fn a_bare_expression_is_itself() {
        assert_eq!(ok("async () => 42"), Program { source: "async () => 42".into(), line_offset: 0 });
        assert_eq!(ok("  async () => 42;;  \n").source, "async () => 42");
    }

    #[test]
    fn fences_are_unwrapped_and_lines_counted() {
        let p = ok("Here you go:\n```javascript\nasync () => {\n  return 1;\n}\n```\nThanks");
        assert_eq!(p.source, "async () => {\n  return 1;\n}");
        assert_eq!(p.line_offset, 2, "the program's line 1 is the caller's line 3");
        assert_eq!(ok("```\nasync () => 1\n```").source, "async () => 1");
        assert_eq!(ok("```js\nasync () => 1").source, "async () => 1", "an unclosed fence");
        // A fence inside a string of the program is not a closing fence of its own line.
        assert_eq!(ok("```js\nasync () => \"```x\"\n```").source, "async () => \"```x\"");
    }

    #[test]
    fn export_default_is_recovered() {
        assert_eq!(ok("export default async () => 1;").source, "async () => 1");
        assert_eq!(ok("export default async function main() {\n return 2\n}").source, "async function main() {\n return 2\n}");
        let p = ok("```ts\nexport default\n  async () => 3\n```");
        assert_eq!((p.source.as_str(), p.line_offset), ("async () => 3", 2));
        assert_eq!(ok("export defaultish").source, "export defaultish", "only the keyword pair");
    }

    #[test]
    fn size_and_emptiness_are_refused() {
        assert_eq!(recover(""), Err(Refused::Empty));
        assert_eq!(recover("```js\n```"), Err(Refused::Empty));
        assert_eq!(recover(" ;; "), Err(Refused::Empty));
        let big = format!("async () => \"{}\"", "x".repeat(MAX_CODE_BYTES));
        assert_eq!(recover(&big), Err(Refused::TooLarge(big.len())));
    }

    #[test]
    fn mistakes_are_diagnosed() {
        let d = |src: &str, name: &str, msg: &str| diagnose(src, name, msg);
        assert_eq!(d("import x from 'y'\nasync () => 1", "SyntaxError", "unexpected token"), Some(Mistake::Modules));
        assert_eq!(d("async () => require('fs')", "ReferenceError", "require is not defined"), Some(Mistake::Modules));
        assert_eq!(d("async (x: string) => x", "SyntaxError", "unexpected token"), Some(Mistake::TypeScript));
        assert_eq!(d("async () => { const a = 1 as any; }", "SyntaxError", "x"), Some(Mistake::TypeScript));
        assert_eq!(d("async (gatehouse) => gatehouse.call('a.b')", "TypeError", "x"), Some(Mistake::ShadowedGatehouse));
        assert_eq!(d("async () => { const gatehouse = 1; }", "TypeError", "x"), Some(Mistake::ShadowedGatehouse));
        assert_eq!(d("async () => fetch('x')", "ReferenceError", "fetch is not defined"), Some(Mistake::InventedGlobal));
        assert_eq!(d("async () => gatehouse.call('a.b')", "TypeError", "x"), None);
        assert_eq!(d("async () => { const mygatehouse = 1 }", "TypeError", "x"), None);
        assert_eq!(d("async () => ({ a: 'string' })", "SyntaxError", "x"), None, "an object literal is not an annotation");
    }

    proptest! {
        /// Any text, of any characters: recovery never panics, never grows the program, and
        /// refuses exactly what is over the limit.
        #[test]
        fn any_text_recovers_or_is_refused(text in "(\\PC|\n|`){0,400}") {
            match recover(&text) {
                Ok(p) => {
                    prop_assert!(!p.source.is_empty());
                    prop_assert!(p.source.len() <= text.len());
                    prop_assert!(p.line_offset <= text.matches('\n').count());
                }
                Err(Refused::Empty) => {}
                Err(Refused::TooLarge(_)) => prop_assert!(false, "small text refused as too large"),
            }
            let _ = diagnose(&text, "SyntaxError", &text);
        }

        /// A fenced or `export default` program comes back as the program, unicode included.
        #[test]
        fn wrapped_programs_come_back(body in "[\\p{L}\\p{N}\\p{Emoji} +*/-]{1,60}", lang in "(js|javascript|ts|)") {
            let program = format!("async () => \"{body}\"");
            prop_assert_eq!(&ok(&format!("```{lang}\n{program}\n```")).source, &program);
            prop_assert_eq!(&ok(&format!("export default {program};")).source, &program);
            prop_assert_eq!(&ok(&format!("text\n\n```{lang}\nexport default {program}\n```\n")).source, &program);
        }

        /// The size limit is in bytes of what was sent, wherever the multi-byte characters fall.
        #[test]
        fn the_limit_is_in_bytes(fill in 0usize..8, wide in proptest::sample::select(vec!["é", "€", "𝄞", "a"])) {
            let head = "async () => \"";
            let room = MAX_CODE_BYTES - head.len() - 1 - fill;
            let n = room / wide.len();
            let text = format!("{head}{}{}\"", wide.repeat(n), "b".repeat(fill));
            prop_assert!(text.len() <= MAX_CODE_BYTES);
            prop_assert!(recover(&text).is_ok());
            let over = format!("{text}{wide}");
            prop_assert_eq!(recover(&over), Err(Refused::TooLarge(over.len())));
        }
    }
}
