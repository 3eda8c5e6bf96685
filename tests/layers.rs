//! The layer rule of `docs/architecture.md`, checked against every file under `src/`: a
//! module may name its own layer and the layers below, never one above. The rule is the
//! fenced `layers` block of that document, read here as data; this file knows no module.
//!
//! Paths are read from the source text (comments and literals removed): `crate::…`,
//! `super::…`, `self::…`, a `use` of a child module, and `gatehouse::…` in `main.rs`,
//! including every leaf of a `use crate::{…}` tree. Each is mapped to the longest module
//! path that the rule places (so `vault::slots` can sit above `vault`), and inline modules
//! (`mod tests { … }`) are followed, so `super::` resolves where it really points.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// One layer of the rule: its name and the module patterns placed in it.
struct Layer {
    name: String,
    patterns: Vec<String>,
}

/// The rule as data: layers from the top, and the modules any layer may name (the crate
/// root, which holds `AppState`).
struct Rule {
    layers: Vec<Layer>,
    anywhere: BTreeSet<String>,
}

impl Rule {
    fn parse(doc: &str) -> Rule {
        let start = doc.find("```layers\n").expect("docs/architecture.md has a ```layers block") + "```layers\n".len();
        let end = start + doc[start..].find("```").expect("the layers block is closed");
        let mut layers = Vec::new();
        let mut anywhere = BTreeSet::new();
        for (n, line) in doc[start..end].lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (name, patterns) =
                line.split_once('=').unwrap_or_else(|| panic!("layers block line {}: `name = modules…`", n + 1));
            let patterns: Vec<String> = patterns.split_whitespace().map(str::to_owned).collect();
            if name.trim() == "anywhere" {
                anywhere.extend(patterns);
            } else {
                layers.push(Layer { name: name.trim().to_owned(), patterns });
            }
        }
        assert!(layers.len() >= 2, "the layers block names at least two layers");
        Rule { layers, anywhere }
    }

    /// The layer (index from the top) of a module path: the longest prefix the rule places,
    /// an exact pattern before a `*::name` one.
    fn place(&self, path: &[String]) -> Option<usize> {
        for len in (1..=path.len()).rev() {
            let prefix = path[..len].join("::");
            if let Some(i) = self.layers.iter().position(|l| l.patterns.contains(&prefix)) {
                return Some(i);
            }
            if len >= 2 {
                let wild = format!("*::{}", path[len - 1]);
                if let Some(i) = self.layers.iter().position(|l| l.patterns.contains(&wild)) {
                    return Some(i);
                }
            }
        }
        None
    }
}

/// Source text with comments, string and char literals blanked (newlines kept, so byte
/// offsets still give line numbers).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if rest[0] == b'r' && (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) && !prev_ident(&out) {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(rest[0]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)]).ok().or_else(|| std::str::from_utf8(&rest[1..2]).ok());
                ch.and_then(|s| s.chars().next()).map(char::len_utf8).filter(|n| rest.get(1 + n) == Some(&b'\'')).map(|n| n + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn prev_ident(out: &[u8]) -> bool {
    out.last().is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// One path a file names: where, and the module path it resolves to (absolute, from the
/// crate root).
struct Use {
    line: usize,
    target: Vec<String>,
}

/// Reads the leaves of a path tree at `text[i..]` (after its first segment), appending each
/// full path to `out`. Returns the index after the tree.
fn tree(text: &[u8], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        let ws = |i: &mut usize| {
            while *i < text.len() && text[*i].is_ascii_whitespace() {
                *i += 1;
            }
        };
        ws(&mut i);
        if !text[i..].starts_with(b"::") {
            out.push(path);
            return i;
        }
        i += 2;
        ws(&mut i);
        if i < text.len() && text[i] == b'{' {
            i += 1;
            loop {
                ws(&mut i);
                if i >= text.len() || text[i] == b'}' {
                    out.push(path.clone());
                    return i + 1;
                }
                let start = i;
                while i < text.len() && (is_ident(text[i]) || text[i] == b'*') {
                    i += 1;
                }
                let seg = String::from_utf8_lossy(&text[start..i]).into_owned();
                let mut sub = path.clone();
                if seg != "self" && seg != "*" && !seg.is_empty() {
                    sub.push(seg);
                }
                i = tree(text, i, sub, out);
                ws(&mut i);
                if text[i..].starts_with(b"as") && !is_ident(text[i + 2]) {
                    i += 2;
                    ws(&mut i);
                    while i < text.len() && is_ident(text[i]) {
                        i += 1;
                    }
                    ws(&mut i);
                }
                if i < text.len() && text[i] == b',' {
                    i += 1;
                } else {
                    ws(&mut i);
                    if i < text.len() && text[i] == b'}' {
                        return i + 1;
                    }
                    return i;
                }
            }
        }
        let start = i;
        while i < text.len() && is_ident(text[i]) {
            i += 1;
        }
        if start == i {
            // `::*` or `::<…>`: the path so far is what is named.
            if i < text.len() && text[i] == b'*' {
                i += 1;
            }
            out.push(path);
            return i;
        }
        let seg = String::from_utf8_lossy(&text[start..i]).into_owned();
        if seg != "self" {
            path.push(seg);
        }
    }
}

/// Every path that leaves its own module, in one file whose module path is `module`.
fn uses(source: &str, module: &[String], root: &str, children: &BTreeSet<String>) -> Vec<Use> {
    let text = strip(source);
    let t = text.as_bytes();
    let mut found = Vec::new();
    // The inline modules open at each brace depth (`mod tests {`).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut pending_mod: Option<String> = None;
    // Right after `use`: the next word may name a child module (`use store::Row`).
    let mut use_head = false;
    while i < t.len() {
        let c = t[i];
        if c == b'{' {
            depth += 1;
            if let Some(name) = pending_mod.take() {
                inline.push((depth, name));
            }
            i += 1;
            continue;
        }
        if c == b'}' {
            if inline.last().is_some_and(|(d, _)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if c == b';' {
            pending_mod = None;
            i += 1;
            continue;
        }
        if !is_ident(c) || (i > 0 && (is_ident(t[i - 1]) || t[i - 1] == b'$' || t[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < t.len() && is_ident(t[i]) {
            i += 1;
        }
        let word = &text[start..i];
        let here: Vec<String> = module.iter().cloned().chain(inline.iter().map(|(_, n)| n.clone())).collect();
        if word == "mod" {
            let mut j = i;
            while j < t.len() && t[j].is_ascii_whitespace() {
                j += 1;
            }
            let s = j;
            while j < t.len() && is_ident(t[j]) {
                j += 1;
            }
            pending_mod = Some(text[s..j].to_owned());
            continue;
        }
        if word == "use" {
            use_head = true;
            continue;
        }
        let head = std::mem::take(&mut use_head);
        let base: Option<Vec<String>> = match word {
            w if w == root => Some(Vec::new()),
            "super" => Some(here[..here.len().saturating_sub(1)].to_vec()),
            "self" => Some(here.clone()),
            w if head && inline.is_empty() && children.contains(w) && t[i..].starts_with(b"::") => {
                let mut b = here.clone();
                b.push(w.to_owned());
                Some(b)
            }
            _ => None,
        };
        let Some(mut base) = base else { continue };
        // `super::super::…`
        while t[i..].starts_with(b"::super") && !is_ident(*t.get(i + 7).unwrap_or(&b' ')) {
            base.pop();
            i += 7;
        }
        let line = text[..start].matches('\n').count() + 1;
        let mut leaves = Vec::new();
        i = tree(t, i, base, &mut leaves);
        found.extend(leaves.into_iter().map(|target| Use { line, target }));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/` (`src/vault/slots.rs` → `vault::slots`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The violations of the rule in the tree at `src` (file:line messages), and the top-level
/// modules the rule does not place.
fn check(rule: &Rule, src: &Path) -> (Vec<String>, Vec<String>) {
    let mut tops = BTreeSet::new();
    for entry in fs::read_dir(src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let name = name.trim_end_matches(".rs").to_owned();
        if !name.contains('.') {
            tops.insert(name);
        }
    }
    let mut missing = Vec::new();
    for top in &tops {
        let placed: Vec<&str> =
            rule.layers.iter().filter(|l| l.patterns.iter().any(|p| p == top)).map(|l| l.name.as_str()).collect();
        if rule.anywhere.contains(top) {
            continue;
        }
        match placed.len() {
            1 => {}
            0 => missing.push(format!("src/{top}: the top-level module `{top}` is in no layer of docs/architecture.md")),
            _ => missing.push(format!("src/{top}: the top-level module `{top}` is in several layers: {placed:?}")),
        }
    }
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let rel_text = rel.to_string_lossy();
        let source = fs::read_to_string(&file).unwrap();
        // The library's root (`lib.rs`) and the binary's (`main.rs`) are crate roots.
        let (module, root) = match rel_text.as_ref() {
            "lib.rs" => (vec!["lib".to_owned()], "crate"),
            "main.rs" => (vec!["main".to_owned()], "gatehouse"),
            _ => (module_of(rel), "crate"),
        };
        let children: BTreeSet<String> = {
            let dir = if rel.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            let mut c = BTreeSet::new();
            if rel_text != "lib.rs" && rel_text != "main.rs" && dir.is_dir() {
                for e in fs::read_dir(&dir).unwrap() {
                    let n = e.unwrap().file_name().to_string_lossy().into_owned();
                    c.insert(n.trim_end_matches(".rs").to_owned());
                }
            }
            c
        };
        let from_top = module[0].clone();
        if rule.anywhere.contains(&from_top) {
            continue;
        }
        let Some(from) = rule.place(&module) else {
            violations.push(format!("src/{rel_text}: module `{}` is in no layer", module.join("::")));
            continue;
        };
        for u in uses(&source, &module, root, &children) {
            let Some(first) = u.target.first() else { continue };
            // An item of the crate root (`crate::AppState`) belongs to the root.
            let target = if tops.contains(first) { u.target.clone() } else { vec!["lib".to_owned()] };
            if rule.anywhere.contains(&target[0]) {
                continue;
            }
            let Some(to) = rule.place(&target) else {
                violations.push(format!("src/{rel_text}:{}: `{}` is in no layer", u.line, target.join("::")));
                continue;
            };
            if to < from {
                violations.push(format!(
                    "src/{rel_text}:{}: `{}` (layer `{}`) imports `{}` from the layer above, `{}`",
                    u.line,
                    module.join("::"),
                    rule.layers[from].name,
                    target.join("::"),
                    rule.layers[to].name,
                ));
            }
        }
    }
    (violations, missing)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_points_down_the_layers() {
    let rule = Rule::parse(&fs::read_to_string(root().join("docs/architecture.md")).unwrap());
    let (violations, missing) = check(&rule, &root().join("src"));
    let all: Vec<String> = missing.into_iter().chain(violations).collect();
    assert!(all.is_empty(), "the layer rule of docs/architecture.md is broken:\n{}", all.join("\n"));
}

/// The checker itself, on a small tree it writes: it must see an upward import in every
/// form the source uses, and a module the rule forgot.
#[test]
fn the_checker_sees_upward_imports_and_unplaced_modules() {
    let dir = std::env::temp_dir().join(format!("gatehouse-layers-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let src = dir.join("src");
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod top;\npub mod low;\npub mod noun;\npub struct AppState;\n");
    write("top.rs", "use crate::{low::X, noun::{self, Thing}};\n");
    write(
        "low.rs",
        "// crate::top::Y in a comment is no import\nconst S: &str = \"crate::top::Z\";\nuse crate::{error::E,\n    top::Y};\nfn f(_: crate::AppState) {}\n",
    );
    write(
        "noun/mod.rs",
        "pub mod http;\npub mod store;\nuse store::Row;\nfn g() { crate::noun::http::router(); }\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    );
    write("noun/http.rs", "use super::store;\nuse crate::top;\n");
    write("noun/store.rs", "use super::super::low;\n");
    write("error.rs", "");
    let rule = Rule::parse(
        "x\n```layers\ntop = top\nroutes = *::http   # a noun's routes\nnouns = noun\nbottom = low\nanywhere = lib\n```\n",
    );
    let (violations, missing) = check(&rule, &src);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(missing, vec!["src/error: the top-level module `error` is in no layer of docs/architecture.md".to_owned()]);
    assert_eq!(
        violations,
        [
            "src/error.rs: module `error` is in no layer",
            "src/low.rs:3: `error::E` is in no layer",
            "src/low.rs:3: `low` (layer `bottom`) imports `top::Y` from the layer above, `top`",
            "src/noun/http.rs:2: `noun::http` (layer `routes`) imports `top` from the layer above, `top`",
            "src/noun/mod.rs:4: `noun` (layer `nouns`) imports `noun::http::router` from the layer above, `routes`",
        ]
    );
}

/// Stores are private to their noun: no `store` module is declared `pub` in any form, so
/// another noun can reach a store only through what its noun re-exports (its `tx` module:
/// the statements another noun may run inside its own transaction).
#[test]
fn every_store_is_private_to_its_noun() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut public = Vec::new();
    let mut stores = 0;
    for file in files {
        let source = strip(&fs::read_to_string(&file).unwrap());
        for (n, line) in source.lines().enumerate() {
            let line = line.trim();
            if line.ends_with("mod store;") {
                stores += 1;
                if line != "mod store;" {
                    public.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(stores >= 20, "found only {stores} store modules: is the scan still reading src/?");
    assert!(public.is_empty(), "store modules must be private to their noun:\n{}", public.join("\n"));
}
