//! What a listener serves ([`Front`]): the router, and before it the busy routes (acquire,
//! release, heartbeat of a session) dispatched straight to their handlers, without the
//! router's matching, layers and extractors.
//!
//! Why: these three are nearly every request of a working fleet, and under 64 clients the
//! router's machinery (the route match, a boxed future and a route clone per layer, the
//! extractors' copies of the path and the headers) cost about a fifth of the server's CPU
//! per request (docs/DECISIONS.md, "the busy routes without the router").
//!
//! Contract:
//! - A request is taken here only when the router would answer it the same: `POST` to
//!   `/v1/ns/{ns}/sessions/{sid}/acquire`, `/release` or `/heartbeat` exactly (no segment
//!   empty, no `%` in the path, which the router would percent-decode), a `Content-Length`
//!   within [`MAX_BODY_BYTES`] (the router's body limit), and no `Origin` header (a browser's
//!   request, which the CORS layer may answer). Anything else goes to the router untouched.
//! - A request taken goes through what the router's stack does, in its order and by the same
//!   code: the web-page guard ([`RequestGuard`]), then the access layer's work
//!   (`access::around`: token, role, namespace, rate, slots, index headers, metrics by route
//!   template, the request log), then the route's own handler.

use super::*;
use crate::guard::RequestGuard;
use axum::extract::{FromRequest, Request};
use axum::routing::future::RouteFuture;
use futures_util::future::BoxFuture;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What a listener serves (module contract).
#[derive(Clone)]
pub struct Front {
    router: Router,
    busy: Option<Arc<Busy>>,
}

/// The busy routes' shared state: the API, and the guard the router is layered with.
struct Busy {
    api: Shared,
    guard: Option<RequestGuard>,
}

impl Front {
    /// The router alone: every request is matched by it.
    pub fn router(router: Router) -> Front {
        Front { router, busy: None }
    }

    /// `router` (built by [`router`] on `api`, perhaps merged with other routes) with the busy
    /// routes of `api` before it.
    pub(crate) fn new(router: Router, api: Shared) -> Front {
        let busy = Busy { api, guard: None };
        Front {
            router,
            busy: Some(Arc::new(busy)),
        }
    }

    /// Every request checked by `guard` first: the router's as a layer, the busy routes' by
    /// the same check.
    pub fn guarded(self, guard: RequestGuard) -> Front {
        let busy = self.busy.map(|busy| {
            Arc::new(Busy {
                api: Arc::clone(&busy.api),
                guard: Some(guard.clone()),
            })
        });
        Front {
            router: self.router.layer(guard),
            busy,
        }
    }

    /// The answer to `request`, from a busy route's handler or the router.
    pub fn call<B>(&self, request: axum::http::Request<B>) -> Dispatch
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        if let Some(busy) = &self.busy {
            if let Some((route, ns, sid)) = busy_route(&request) {
                let path = (ns.to_owned(), sid.to_owned());
                let request = request.map(axum::body::Body::new);
                return Dispatch::Direct {
                    future: Box::pin(Arc::clone(busy).serve(route, path, request)),
                };
            }
        }
        let mut router = self.router.clone();
        Dispatch::Routed {
            future: tower_service::Service::call(&mut router, request),
        }
    }
}

/// A busy route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Acquire,
    Release,
    Heartbeat,
}

impl Route {
    #[cfg(test)]
    const ALL: [Route; 3] = [Route::Acquire, Route::Release, Route::Heartbeat];

    /// Its template, as the router names it (`MatchedPath`), which the metrics count by.
    fn template(self) -> &'static str {
        match self {
            Route::Acquire => "/v1/ns/{ns}/sessions/{sid}/acquire",
            Route::Release => "/v1/ns/{ns}/sessions/{sid}/release",
            Route::Heartbeat => "/v1/ns/{ns}/sessions/{sid}/heartbeat",
        }
    }
}

/// The busy route `request` is for, with its namespace and session as the path has them, when
/// the router would answer it the same (module contract).
fn busy_route<B>(request: &axum::http::Request<B>) -> Option<(Route, &str, &str)> {
    if request.method() != axum::http::Method::POST {
        return None;
    }
    let headers = request.headers();
    if headers.contains_key(axum::http::header::ORIGIN) {
        return None;
    }
    let length = headers.get(axum::http::header::CONTENT_LENGTH)?;
    let length: usize = length.to_str().ok()?.parse().ok()?;
    if length > MAX_BODY_BYTES {
        return None;
    }
    let path = request.uri().path();
    if path.contains('%') {
        return None;
    }
    let mut parts = path.strip_prefix("/v1/ns/")?.split('/');
    let (ns, sessions, sid, what) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ns.is_empty() || sid.is_empty() || sessions != "sessions" {
        return None;
    }
    let route = match what {
        "acquire" => Route::Acquire,
        "release" => Route::Release,
        "heartbeat" => Route::Heartbeat,
        _ => return None,
    };
    Some((route, ns, sid))
}

impl Busy {
    /// The router's stack for a busy route, in its order (module contract).
    async fn serve(
        self: Arc<Busy>,
        route: Route,
        path: (String, String),
        request: Request,
    ) -> Response {
        if let Some(refused) = self.guard.as_ref().and_then(|g| g.refusal(&request)) {
            return refused;
        }
        let api = &self.api;
        access::around(api, Some(route.template()), request, |request| {
            handle(Arc::clone(api), route, path, request)
        })
        .await
    }
}

/// The route's handler, given what its extractors would take from `request`.
async fn handle(
    api: Shared,
    route: Route,
    path: (String, String),
    mut request: Request,
) -> Response {
    let slots = request.extensions().get::<PollSlots>().cloned();
    let headers = std::mem::take(request.headers_mut());
    let raw = match Bytes::from_request(request, &()).await {
        Ok(raw) => raw,
        Err(rejected) => return rejected.into_response(),
    };
    let (state, path) = (State(api), Path(path));
    match route {
        Route::Acquire => {
            let slots = slots.map(axum::Extension);
            leases::acquire(state, path, slots, headers, raw)
                .await
                .into_response()
        }
        Route::Release => leases::release(state, path, headers, raw)
            .await
            .into_response(),
        Route::Heartbeat => leases::heartbeat(state, path, headers, raw)
            .await
            .into_response(),
    }
}

pin_project_lite::pin_project! {
    /// [`Front::call`]'s answer to come.
    #[project = Dispatching]
    pub enum Dispatch {
        /// From the router.
        Routed { #[pin] future: RouteFuture<Infallible> },
        /// From a busy route.
        Direct { future: BoxFuture<'static, Response> },
    }
}

impl Future for Dispatch {
    type Output = Response;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        match self.project() {
            Dispatching::Routed { future } => future.poll(cx).map(|Ok(response)| response),
            Dispatching::Direct { future } => future.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(path: &str, length: Option<&str>) -> axum::http::Request<()> {
        let mut request = axum::http::Request::post(path);
        if let Some(length) = length {
            request = request.header("content-length", length);
        }
        request.body(()).unwrap()
    }

    /// What `front` answers to `method path` with `headers` and `body`: status and JSON body.
    async fn ask(
        front: &Front,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let mut request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .header("content-length", body.len());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        let response = front.call(request).await;
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn busy_requests_are_answered_by_their_handlers_and_the_rest_by_the_router() {
        let app = crate::serve::app(&crate::serve::ServeConfig::memory())
            .await
            .unwrap();
        let (status, opened) = ask(
            &app.front,
            "POST",
            "/v1/ns/team/sessions",
            &[],
            r#"{"agent_id": "a"}"#,
        )
        .await;
        assert_eq!(status, 200, "{opened}");
        let token = opened["session_token"].as_str().unwrap();
        let session = [("klock-session-token", token)];
        // The same busy routes in front of a router that answers everything 418.
        let teapot = Router::new().fallback(|| async { StatusCode::IM_A_TEAPOT });
        let front = Front {
            router: teapot,
            busy: app.front.busy.clone(),
        };
        let acquire = "/v1/ns/team/sessions/1/acquire";
        let x = r#"{"intents": ["MUTATES FILE:/x"]}"#;
        let (status, granted) = ask(&front, "POST", acquire, &session, x).await;
        assert_eq!(
            (status, &granted["verdict"]),
            (200, &json!("GRANTED")),
            "{granted}"
        );
        let heartbeat = ask(
            &front,
            "POST",
            "/v1/ns/team/sessions/1/heartbeat",
            &session,
            "{}",
        )
        .await;
        assert_eq!(heartbeat.0, 200, "{}", heartbeat.1);
        let all = r#"{"all": true}"#;
        let released = ask(
            &front,
            "POST",
            "/v1/ns/team/sessions/1/release",
            &session,
            all,
        )
        .await;
        assert_eq!(released, (200, json!({"released": 1})));
        // Anything the router must answer reaches it.
        for (method, path, headers) in [
            ("GET", "/v1/health", &[][..]),
            ("POST", "/v1/ns/team/sessions/1/cancel", &session[..]),
            (
                "POST",
                acquire,
                &[("origin", "http://127.0.0.1"), session[0]][..],
            ),
        ] {
            let (status, _) = ask(&front, method, path, headers, x).await;
            assert_eq!(status, 418, "{method} {path} {headers:?}");
        }
    }

    #[test]
    fn every_busy_template_is_a_route_the_router_counts() {
        let templates = route_templates();
        for route in Route::ALL {
            assert!(
                templates.iter().any(|t| t == route.template()),
                "{} is not one of the router's templates",
                route.template()
            );
        }
    }

    #[test]
    fn only_requests_the_router_would_answer_the_same_are_taken() {
        let taken = |request: &axum::http::Request<()>| {
            busy_route(request).map(|(r, n, s)| (r, n.to_owned(), s.to_owned()))
        };
        for route in Route::ALL {
            let what = route.template().rsplit('/').next().unwrap();
            let path = format!("/v1/ns/team/sessions/7/{what}");
            assert_eq!(
                taken(&post(&path, Some("2"))),
                Some((route, "team".into(), "7".into()))
            );
        }
        let acquire = "/v1/ns/team/sessions/7/acquire";
        let refused = [
            post(acquire, None),                                 // no Content-Length
            post(acquire, Some("1048577")),                      // over the body limit
            post(acquire, Some("x")),                            // not a length
            post("/v1/ns/te%61m/sessions/7/acquire", Some("2")), // percent-encoded
            post("/v1/ns//sessions/7/acquire", Some("2")),       // empty namespace
            post("/v1/ns/team/sessions//acquire", Some("2")),    // empty session
            post("/v1/ns/team/sessions/7/acquire/", Some("2")),  // one segment more
            post("/v1/ns/team/session/7/acquire", Some("2")),    // not sessions
            post("/v1/ns/team/sessions/7/cancel", Some("2")),    // not a busy route
            post("/v1/ns/team/sessions/7", Some("2")),           // too short
            post("/v2/ns/team/sessions/7/acquire", Some("2")),   // another prefix
        ];
        for request in &refused {
            assert_eq!(taken(request), None, "{}", request.uri());
        }
        let mut get = post(acquire, Some("2"));
        *get.method_mut() = axum::http::Method::GET;
        assert_eq!(taken(&get), None, "GET");
        let mut browser = post(acquire, Some("2"));
        browser
            .headers_mut()
            .insert("origin", "http://localhost:3000".parse().unwrap());
        assert_eq!(taken(&browser), None, "Origin");
        assert!(
            taken(&post(acquire, Some("1048576"))).is_some(),
            "at the limit"
        );
    }
}
