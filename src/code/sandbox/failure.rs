//! What a program's failure is called: the guest's error, described by its properties,
//! becomes a typed `Failure` with a code, its line in the program and a hint.

use rquickjs::{Ctx, Exception, Value};
use serde_json::{Map, Value as Json, json};

use super::{End, FILENAME, Failure};
use crate::code::recover::{self, Mistake, Program};

/// The program's outcome as `poll` gave it: `{"ok":true,"value":…}` (built by the bootstrap,
/// so the value is the text between the two) or `{"ok":false,"error":{…}}`.
pub(super) fn outcome(program: &Program, text: &str) -> End {
    const OK: &str = "{\"ok\":true,\"value\":";
    if let Some(value) = text.strip_prefix(OK).and_then(|rest| rest.strip_suffix('}')) {
        return End::Value(value.to_owned());
    }
    let parsed: Json = serde_json::from_str(text).unwrap_or(Json::Null);
    End::Failed(failure(program, &parsed["error"], false))
}

/// An exception that escaped to the host: described by its properties.
pub(super) fn thrown<'js>(ctx: &Ctx<'js>, program: &Program, e: rquickjs::Error, compiling: bool) -> Failure {
    let caught = ctx.catch();
    if is_out_of_memory(ctx, &caught, &e) {
        return Failure::new("memory_exceeded", memory_message());
    }
    let Some(object) = caught.as_object() else {
        return Failure::new("runtime_error", format!("the program failed: {e}"));
    };
    let text = |name: &str| object.get::<_, Option<rquickjs::Coerced<String>>>(name).ok().flatten().map(|c| c.0);
    let described = json!({
        "name": text("name").unwrap_or_default(),
        "message": text("message").unwrap_or_default(),
        "stack": text("stack").unwrap_or_default(),
    });
    failure(program, &described, compiling)
}

fn memory_message() -> String {
    "the program ran out of memory".into()
}

pub(super) fn is_out_of_memory<'js>(_ctx: &Ctx<'js>, caught: &Value<'js>, e: &rquickjs::Error) -> bool {
    if matches!(e, rquickjs::Error::Allocation) {
        return true;
    }
    caught
        .as_object()
        .and_then(|o| Exception::from_object(o.clone()))
        .and_then(|x| x.message())
        .is_some_and(|m| m == "out of memory")
}

/// The typed failure of a described error `{name, message, stack, host?, code?, …}`.
fn failure(program: &Program, error: &Json, compiling: bool) -> Failure {
    let name = error["name"].as_str().unwrap_or("Error");
    let message = error["message"].as_str().unwrap_or("");
    let stack = error["stack"].as_str().unwrap_or("");
    let line = line_of(stack).map(|l| l + program.line_offset);
    if name == "InternalError" && message == "out of memory" {
        return Failure::new("memory_exceeded", memory_message());
    }
    if (name == "InternalError" && message == "string too long")
        || (name == "RangeError" && (message == "invalid string length" || message == "invalid array length"))
    {
        return Failure {
            line,
            ..Failure::new("memory_exceeded", "the program built a string or array larger than the sandbox allows")
        };
    }
    if name == "RangeError" && message.contains("call stack size exceeded") {
        return Failure {
            line,
            hint: Some("Recursion went too deep: use a loop, or recurse less deeply."),
            ..Failure::new("stack_overflow", "the program's recursion went deeper than its stack allows")
        };
    }
    if error["host"] == true {
        let mut extra: Map<String, Json> = error.as_object().cloned().unwrap_or_default();
        for k in ["name", "message", "stack", "host", "code"] {
            extra.remove(k);
        }
        return Failure {
            code: error["code"].as_str().unwrap_or("host_error").to_owned(),
            message: format!("not caught by the program: {}", crate::code::cap(message)),
            line,
            hint: None,
            extra,
        };
    }
    if name == "NotAFunction" {
        return Failure { hint: Some(Mistake::NotAFunction.hint()), ..Failure::new("invalid_program", message) };
    }
    let code = if compiling && name == "SyntaxError" { "syntax_error" } else { "runtime_error" };
    Failure {
        code: code.to_owned(),
        message: crate::code::cap(&format!("{name}: {message}")),
        line,
        hint: recover::diagnose(&program.source, name, message).map(Mistake::hint),
        extra: Map::new(),
    }
}

/// The first line of the program named in a stack (`program.js:LINE[:COL]`).
fn line_of(stack: &str) -> Option<usize> {
    stack.match_indices(FILENAME).find_map(|(i, _)| {
        let rest = stack[i + FILENAME.len()..].strip_prefix(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}
