//! A client's request that a cluster follower relays to its leader as it came, and the
//! leader's answer it returns as it went.
//!
//! Contract:
//! - A follower relays only batch requests: a batch carries its own many operations, so
//!   joining it with other requests (as a follower joins single writes into one request to
//!   its leader) would save the leader little. It sends the request's path, its body
//!   untouched, and the headers [`RELAYED_REQUEST_HEADERS`] names (the client's bearer token,
//!   its idempotency key, its clock), marked [`RELAYED_HEADER`]; the leader checks and
//!   answers it exactly as if the client had asked it directly (the same token checks, the
//!   same bounds, the same answer and errors), so the follower decodes and encodes nothing of
//!   it.
//! - A relayed request is never relayed again: the node it reaches answers it as the leader,
//!   or refuses it (503 `NO_LEADER`, `Retry-After`) when it no longer leads.
//! - The leader's answer to a write names its last entry's machine index in [`INDEX_HEADER`]
//!   (as every write's answer does): the follower applies up to it before any later read
//!   through it, so a client reads its own writes there. The follower gives the client the
//!   leader's status, headers (less those of the leader's connection) and body.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

/// The header a follower marks a relayed request with (see the module contract).
pub const RELAYED_HEADER: &str = "klock-relayed";

/// The header of a write's answer that names its (last) entry's machine index
/// (`Klock-Index`, docs/SPEC.md).
pub const INDEX_HEADER: &str = "klock-index";

/// The client's headers a relayed request carries: what the leader's answer depends on.
pub const RELAYED_REQUEST_HEADERS: [HeaderName; 4] = [
    axum::http::header::AUTHORIZATION,
    axum::http::header::CONTENT_TYPE,
    HeaderName::from_static("idempotency-key"),
    HeaderName::from_static("klock-now"),
];

/// A request to relay: the path (with its query) and the headers and body to send.
pub struct Relay {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Relay {
    /// The relay of a request to `path` with `headers` and `body` (only the headers of
    /// [`RELAYED_REQUEST_HEADERS`] go). Made only once a request is to be relayed: a node
    /// that answers itself copies nothing.
    pub fn of(path: &str, headers: &HeaderMap, body: &Bytes) -> Relay {
        let mut relayed = HeaderMap::with_capacity(RELAYED_REQUEST_HEADERS.len());
        for name in &RELAYED_REQUEST_HEADERS {
            for value in headers.get_all(name) {
                relayed.append(name.clone(), value.clone());
            }
        }
        Relay {
            path: path.to_owned(),
            headers: relayed,
            body: body.clone(),
        }
    }
}

/// The leader's answer to a relayed request.
pub struct Relayed {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Relayed {
    /// The answer as the leader gave it, less the headers that describe the leader's
    /// connection rather than the answer (the follower's server sets its own).
    pub fn new(status: StatusCode, mut headers: HeaderMap, body: Bytes) -> Relayed {
        for name in [
            axum::http::header::CONNECTION,
            axum::http::header::CONTENT_LENGTH,
            axum::http::header::TRANSFER_ENCODING,
            axum::http::header::DATE,
            HeaderName::from_static("keep-alive"),
        ] {
            headers.remove(name);
        }
        Relayed {
            status,
            headers,
            body,
        }
    }

    /// The machine index `headers` (a leader's answer) names in [`INDEX_HEADER`], if any.
    pub fn index(headers: &HeaderMap) -> Option<u64> {
        headers.get(INDEX_HEADER)?.to_str().ok()?.parse().ok()
    }
}

impl IntoResponse for Relayed {
    fn into_response(self) -> Response {
        let mut response = self.body.into_response();
        *response.status_mut() = self.status;
        // The leader's headers, every value of each (its content type among them), replace
        // the defaults.
        *response.headers_mut() = self.headers;
        response
    }
}

/// Whether `headers` mark a request another node relayed here.
pub fn is_relayed(headers: &HeaderMap) -> bool {
    headers.contains_key(RELAYED_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_relay_carries_only_what_the_answer_depends_on() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer t"));
        headers.insert("idempotency-key", HeaderValue::from_static("k1"));
        headers.insert("klock-now", HeaderValue::from_static("5"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("host", HeaderValue::from_static("127.0.0.1:1"));
        headers.insert("cookie", HeaderValue::from_static("c=1"));
        headers.insert(RELAYED_HEADER, HeaderValue::from_static("1"));
        let relay = Relay::of("/v1/ns/a/batch", &headers, &Bytes::from_static(b"{}"));
        let mut names: Vec<&str> = relay.headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "authorization",
                "content-type",
                "idempotency-key",
                "klock-now"
            ]
        );
        assert_eq!(relay.headers["authorization"], "Bearer t");
        assert_eq!(&relay.body[..], b"{}");
    }

    #[test]
    fn an_answer_loses_its_connection_headers_and_keeps_the_rest() {
        let mut headers = HeaderMap::new();
        headers.insert(INDEX_HEADER, HeaderValue::from_static("42"));
        headers.insert("content-length", HeaderValue::from_static("2"));
        headers.insert("connection", HeaderValue::from_static("keep-alive"));
        headers.insert("date", HeaderValue::from_static("x"));
        headers.insert("retry-after", HeaderValue::from_static("1"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("vary", HeaderValue::from_static("origin"));
        headers.append("vary", HeaderValue::from_static("authorization"));
        assert_eq!(Relayed::index(&headers), Some(42));
        let relayed = Relayed::new(
            StatusCode::SERVICE_UNAVAILABLE,
            headers,
            Bytes::from_static(b"{}"),
        );
        let response = relayed.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let mut names: Vec<&str> = response.headers().keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-type", INDEX_HEADER, "retry-after", "vary"]);
        assert_eq!(response.headers()["content-type"], "application/json");
        let vary: Vec<_> = response.headers().get_all("vary").iter().collect();
        assert_eq!(vary, ["origin", "authorization"], "every value kept");
    }

    #[test]
    fn an_index_that_is_not_a_number_is_none() {
        let mut headers = HeaderMap::new();
        assert_eq!(Relayed::index(&headers), None);
        headers.insert(INDEX_HEADER, HeaderValue::from_static("x"));
        assert_eq!(Relayed::index(&headers), None);
    }
}
