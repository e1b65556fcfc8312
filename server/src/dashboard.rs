//! `klock serve --dashboard`: the dashboard page served by the server itself, same origin as
//! the API (so the page needs no CORS). A page served elsewhere reads the server only from the
//! origins `--allow-origin` names ([`cors`]); by default the server grants no origin.
//!
//! Contract:
//! - The page's files (`dashboard/*.html|js|css`, plain source files, no build step) are
//!   compiled into the binary, so `--dashboard` works from any directory with any binary.
//! - The wasm package the page imports (`/dashboard/pkg/`) is a build product of another
//!   toolchain (the wasm32 target and the wasm-bindgen CLI, `bindings/wasm/build.sh`), so it
//!   is read from a directory at request time: `--dashboard-pkg DIR`, by default the
//!   `bindings/wasm/pkg-web` of the source tree the binary was built from. Without it the
//!   live view still works (it does not need the kernel); simulation and replay say what to
//!   build. Nothing is ever written: not by the build, not by the server.
//! - Routes: `/` redirects to `/dashboard/?live`; `/dashboard/` is the page; the files have
//!   the content types browsers need (`application/wasm` for module streaming). Of the package
//!   directory only the files the page loads are served ([`PKG_FILES`]), never any other.
//! - With a token file, every dashboard route needs a known token, as the API does: as
//!   `Authorization: Bearer <token>`, or (what a browser can send when it loads a page) HTTP
//!   Basic with the token as the password; without one the answer is 401 with
//!   `WWW-Authenticate: Basic`, so the browser asks for it.

use crate::auth::Auth;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use std::path::PathBuf;
use std::sync::Arc;

/// The page's files, compiled in.
const FILES: &[(&str, &str)] = &[
    ("index.html", include_str!("../../dashboard/index.html")),
    ("main.js", include_str!("../../dashboard/main.js")),
    ("app.js", include_str!("../../dashboard/app.js")),
    ("sim.js", include_str!("../../dashboard/sim.js")),
    ("remote.js", include_str!("../../dashboard/remote.js")),
    ("waitfor.js", include_str!("../../dashboard/waitfor.js")),
    ("style.css", include_str!("../../dashboard/style.css")),
];

/// The files of the wasm package the page loads (`wasm-bindgen --target web` output).
pub const PKG_FILES: &[&str] = &[
    "klock_wasm.js",
    "klock_wasm_bg.wasm",
    "klock_wasm.d.ts",
    "klock_wasm_bg.wasm.d.ts",
];

/// The default wasm package directory: the source tree's build output.
pub fn default_pkg_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bindings/wasm/pkg-web")
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("ts") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn missing(what: String) -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        what,
    )
        .into_response()
}

fn page_file(name: &str) -> Response {
    match FILES.iter().find(|(n, _)| *n == name) {
        Some((n, text)) => (
            [
                (header::CONTENT_TYPE, content_type(n)),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *text,
        )
            .into_response(),
        None => missing(format!("no dashboard file {name:?}")),
    }
}

async fn pkg_file(State(dir): State<Arc<PathBuf>>, Path(name): Path<String>) -> Response {
    // Only the package's own files: no other file of the directory, no way out of it.
    if !PKG_FILES.contains(&name.as_str()) {
        return missing(format!("no package file {name:?}"));
    }
    match tokio::fs::read(dir.join(&name)).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, content_type(&name)),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => missing(format!(
            "the wasm package is not built ({} has no {name}): run bash bindings/wasm/build.sh, \
             or start klock serve with --dashboard-pkg DIR; the live view works without it",
            dir.display()
        )),
    }
}

/// Decodes standard base64 (with or without padding); `None` for anything else.
fn base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The bearer secret a dashboard request carries: `Bearer <token>`, or HTTP Basic with the
/// token as the password (the user name is ignored).
fn secret_of(authorization: &str) -> Option<String> {
    if let Some(token) = crate::auth::bearer(authorization) {
        return Some(token.to_owned());
    }
    let (scheme, rest) = authorization.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let pair = String::from_utf8(base64(rest.trim())?).ok()?;
    let (_, password) = pair.split_once(':')?;
    Some(password.to_owned())
}

/// With a token file, a known token before any dashboard file (see the module contract).
async fn needs_token(
    State(auth): State<Arc<Auth>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !auth.required() {
        return next.run(request).await;
    }
    let secret = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(secret_of);
    let known = secret.is_some_and(|s| auth.identify(Some(&format!("Bearer {s}"))).is_ok());
    if known {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [
            (
                header::WWW_AUTHENTICATE,
                "Basic realm=\"klock dashboard\", charset=\"UTF-8\"",
            ),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        "this server needs a token: give it as the password (any user name), or send \
         Authorization: Bearer <token>",
    )
        .into_response()
}

/// The dashboard's routes, reading the wasm package from `pkg`; with a token file, each
/// needs a token `auth` knows.
pub fn router(pkg: PathBuf, auth: Arc<Auth>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard/?live") }))
        .route("/dashboard", get(|| async { Redirect::to("/dashboard/") }))
        .route("/dashboard/", get(|| async { page_file("index.html") }))
        .route(
            "/dashboard/{name}",
            get(|Path(name): Path<String>| async move { page_file(&name) }),
        )
        .route("/dashboard/pkg/{name}", get(pkg_file))
        .with_state(Arc::new(pkg))
        .layer(axum::middleware::from_fn_with_state(auth, needs_token))
}

/// The origins `--allow-origin` names: pages served elsewhere (say `bash scripts/dashboard.sh`
/// on another port) that may read this server from a browser.
#[derive(Clone, Debug, Default)]
pub struct Origins(pub Arc<Vec<String>>);

/// Checks one `--allow-origin` value: `scheme://host[:port]`, nothing else (a wildcard would let
/// any web page a user visits read a loopback server that asks for no token).
///
/// # Errors
/// What is wrong with it.
pub fn check_origin(origin: &str) -> Result<(), String> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(['/', '*', ' ', '?', '#']) => Ok(()),
        _ => Err(format!(
            "--allow-origin needs an exact origin like http://127.0.0.1:8080 (no wildcard, no path), got {origin:?}"
        )),
    }
}

/// CORS for the allowed origins only: a preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) is answered here, before any token check (it carries
/// none); every other answer to an allowed origin says it may read it. Requests from other
/// origins are served as before, without those headers, so the browser keeps their answers
/// from the page.
pub async fn cors(
    State(origins): State<Origins>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| origins.0.iter().any(|a| a == o))
        .map(str::to_owned);
    let Some(origin) = origin else {
        return next.run(request).await;
    };
    let allow = |response: &mut Response| {
        let h = response.headers_mut();
        if let Ok(v) = origin.parse() {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        }
        h.insert(header::VARY, header::HeaderValue::from_static("origin"));
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            header::HeaderValue::from_static("klock-index, klock-now, klock-log"),
        );
    };
    let preflight = request.method() == axum::http::Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let mut response = StatusCode::NO_CONTENT.into_response();
        allow(&mut response);
        let h = response.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            header::HeaderValue::from_static("GET, POST, DELETE"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            header::HeaderValue::from_static(
                "authorization, accept, content-type, last-event-id, klock-session-token, idempotency-key",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            header::HeaderValue::from_static("600"),
        );
        return response;
    }
    let mut response = next.run(request).await;
    allow(&mut response);
    response
}
