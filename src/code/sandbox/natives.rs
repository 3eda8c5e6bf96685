//! The native functions the bootstrap hands the guest: host calls, logging and emitted
//! blocks, each counted against the run's limits.

use std::rc::Rc;

use rquickjs::{Ctx, Exception, Function, Object, context::EvalOptions};
use serde_json::Value as Json;

use super::{Api, Emitted, HostRequest, Kind, Shared};

const BOOTSTRAP: &str = include_str!("../bootstrap.js");

/// Evaluates the bootstrap with the native functions.
pub(super) fn install<'js>(ctx: &Ctx<'js>, shared: &Rc<Shared>) -> rquickjs::Result<Api<'js>> {
    let mut options = EvalOptions::default();
    options.strict = true;
    options.filename = Some("gatehouse.js".to_owned());
    let install: Function = ctx.eval_with_options(BOOTSTRAP, options)?;
    let s = shared.clone();
    let host = Function::new(ctx.clone(), move |ctx: Ctx<'js>, kind: String, payload: String| -> rquickjs::Result<u32> {
        host_call(&ctx, &s, &kind, &payload)
    })?;
    let s = shared.clone();
    let log = Function::new(ctx.clone(), move |ctx: Ctx<'js>, level: String, text: String| -> rquickjs::Result<()> {
        log_line(&ctx, &s, &level, &text)
    })?;
    let s = shared.clone();
    let emit =
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, block: String| -> rquickjs::Result<()> { emit_block(&ctx, &s, &block) })?;
    let api: Object = install.call((host, log, emit))?;
    Ok(Api { start: api.get("start")?, settle: api.get("settle")?, poll: api.get("poll")? })
}

fn host_call(ctx: &Ctx<'_>, s: &Shared, kind: &str, payload: &str) -> rquickjs::Result<u32> {
    let Some(kind) = Kind::parse(kind) else { return Err(Exception::throw_type(ctx, "no such host call")) };
    let calls = s.calls.get() + 1;
    s.calls.set(calls);
    if calls > s.limits.host_calls {
        let message = format!("the program made more than {} host calls", s.limits.host_calls);
        s.stop("budget_exceeded", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    let payload: Json = serde_json::from_str(payload).unwrap_or(Json::Null);
    let id = s.next_id.get();
    s.next_id.set(id + 1);
    s.pending.borrow_mut().insert(id);
    (s.dispatch)(HostRequest { id, kind, payload }, s.tx.clone());
    Ok(id)
}

fn log_line(ctx: &Ctx<'_>, s: &Shared, level: &str, text: &str) -> rquickjs::Result<()> {
    let line = if level == "log" { format!("{text}\n") } else { format!("{level}: {text}\n") };
    let chars = line.chars().count();
    let used = s.log_chars.get();
    if used + chars > s.limits.log_chars {
        let room = s.limits.log_chars.saturating_sub(used);
        s.logs.borrow_mut().extend(line.chars().take(room));
        s.log_chars.set(s.limits.log_chars);
        let message = format!("the program logged more than {} characters", s.limits.log_chars);
        s.stop("log_limit", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    s.log_chars.set(used + chars);
    s.logs.borrow_mut().push_str(&line);
    Ok(())
}

fn emit_block(ctx: &Ctx<'_>, s: &Shared, block: &str) -> rquickjs::Result<()> {
    let block: Json = serde_json::from_str(block).unwrap_or(Json::Null);
    let field = |name: &str| block.get(name).and_then(Json::as_str).map(str::to_owned);
    let media = |prefix: &str| -> Option<(String, String)> {
        let (data, mime_type) = (field("data")?, field("mimeType")?);
        use base64::Engine;
        let valid = mime_type.starts_with(prefix) && base64::engine::general_purpose::STANDARD.decode(&data).is_ok();
        valid.then_some((data, mime_type))
    };
    let emitted = match block.get("type").and_then(Json::as_str) {
        Some("text") => field("text").map(Emitted::Text),
        Some("image") => media("image/").map(|(data, mime_type)| Emitted::Image { data, mime_type }),
        Some("audio") => media("audio/").map(|(data, mime_type)| Emitted::Audio { data, mime_type }),
        _ => None,
    };
    let Some(emitted) = emitted else {
        return Err(Exception::throw_type(
            ctx,
            "emit takes {type: \"text\", text} or {type: \"image\"|\"audio\", data: <base64>, mimeType: \"image/…\"|\"audio/…\"}",
        ));
    };
    let bytes = match &emitted {
        Emitted::Text(text) => text.len(),
        Emitted::Image { data, .. } | Emitted::Audio { data, .. } => data.len(),
    };
    let count = s.emitted.borrow().len() + 1;
    let total = s.emitted_bytes.get() + bytes;
    if count > s.limits.emit_blocks || total > s.limits.emit_bytes {
        let message = format!("the program emitted more than {} blocks or {} bytes", s.limits.emit_blocks, s.limits.emit_bytes);
        s.stop("emit_limit", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    s.emitted_bytes.set(total);
    s.emitted.borrow_mut().push(emitted);
    Ok(())
}
