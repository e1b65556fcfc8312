//! Who may call what: bearer token, role, namespace, rate and long-poll slots (before any
//! handler), and the `Klock-Index` / `Klock-Now` headers and request metrics (around it).

use super::*;

/// The role a route needs (`None`: anyone, even without a token).
fn role_for(route: &str) -> Option<Role> {
    match route {
        "/v1/health" | "/v1/openapi.json" => None,
        "/v1/advance" | "/v1/reset" => Some(Role::Admin),
        r if r.starts_with("/v1/ns/{ns}/sessions") || r == "/v1/ns/{ns}/batch" => Some(Role::Agent),
        _ => Some(Role::Observer),
    }
}

/// Routes whose requests may wait: they take one of the caller's long-poll slots.
fn waits(route: &str) -> bool {
    route.ends_with("/tickets/{tid}") || route.ends_with("/events") || route.ends_with("/watch")
}

/// The namespace a `/v1/ns/{ns}/...` path names, percent-decoded.
fn path_namespace(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/ns/")?;
    let raw = rest.split('/').next()?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                let text = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(text, 16).ok()?);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Who the caller is, for the routes that export every namespace: whether it may see every
/// namespace (no token file, or a token for `"*"`), the token's name and role.
#[derive(Clone)]
pub(super) struct Reach {
    pub everywhere: bool,
    pub name: Option<String>,
    pub role: Option<Role>,
}

fn refuse(status: StatusCode, name: &'static str, message: String) -> Response {
    ApiError {
        status,
        code: 0,
        name,
        message,
    }
    .into_response()
}

/// Bearer token, role, namespace, rate and long-poll slots, before any handler runs.
pub(super) async fn guard(
    State(api): State<Api>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let Some(route) = route else {
        return next.run(request).await; // the 404 fallback
    };
    let Some(needed) = role_for(&route) else {
        return next.run(request).await;
    };
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let caller = match api.auth.identify(authorization) {
        Ok(caller) => caller,
        Err(why) => return refuse(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", why.to_owned()),
    };
    if let auth::Caller::Token(grant) = &caller {
        if grant.role < needed {
            let message = format!(
                "token {:?} is a {:?}; this route needs {needed:?}",
                grant.name, grant.role
            );
            return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", message);
        }
        if let Some(ns) = path_namespace(request.uri().path()) {
            if !grant.covers(&ns) {
                let message = format!("token {:?} does not cover namespace {ns:?}", grant.name);
                return refuse(StatusCode::FORBIDDEN, "FORBIDDEN", message);
            }
        }
    }
    let limits = caller.limits();
    if !limits.admit() {
        let message = String::from("over this token's rate of requests per second; slow down");
        return refuse(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", message);
    }
    let slots = limits.long_polls().clone();
    let _slot = if waits(&route) {
        match slots.take() {
            Some(slot) => Some(slot),
            None => {
                let message = format!(
                    "at most {} waiting requests at once for this token",
                    slots.max()
                );
                return refuse(StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_WAITS", message);
            }
        }
    } else {
        None
    };
    let reach = match &caller {
        auth::Caller::Local(_) => Reach {
            everywhere: true,
            name: None,
            role: None,
        },
        auth::Caller::Token(grant) => Reach {
            everywhere: grant.covers_all(),
            name: Some(grant.name.clone()),
            role: Some(grant.role),
        },
    };
    request.extensions_mut().insert(slots);
    request.extensions_mut().insert(reach);
    next.run(request).await
}

tokio::task_local! {
    /// The log index and time of the command the current request made, for the
    /// `Klock-Index` and `Klock-Now` headers.
    pub(super) static INDEX: std::cell::Cell<Option<(u64, u64)>>;
}

/// Adds `Klock-Index` and `Klock-Now` to the answer of a request that made a command, and
/// counts the request by route template and status.
pub(super) async fn with_index(
    State(api): State<Api>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let started = std::time::Instant::now();
    INDEX
        .scope(std::cell::Cell::new(None), async move {
            let mut response = next.run(request).await;
            let status = response.status().as_u16();
            api.engine
                .metrics()
                .request(&route, status, started.elapsed());
            if let Some((index, now)) = INDEX.with(std::cell::Cell::get) {
                let headers = response.headers_mut();
                headers.insert("klock-index", index.to_string().parse().expect("digits"));
                headers.insert("klock-now", now.to_string().parse().expect("digits"));
            }
            response
        })
        .await
}
