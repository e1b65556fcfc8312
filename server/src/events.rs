//! Per-session event streams, fed from the engine's durable events.
//!
//! Contract: every event the engine publishes (only after its entry is durable) is kept in the
//! ring of the session it concerns, with an id `"<index>.<k>"` (the k-th event of log entry
//! `index`), so ids grow in log order and stay unique across restarts (the log's indexes
//! persist, and recovery feeds the replayed entries' events back in). A reader asks for the
//! events after an id and may wait for more ([`EventHub::wait_after`]); a ring keeps the last
//! [`RING`] events of a session, and a reader that fell further behind is told so (`gap`).
//! The same events are kept per namespace too (the watch stream of dashboards): the hub
//! learns each session's namespace from the open or resume that answered it.

use klock_core::{Event, Output, SessionId};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Events kept per session.
pub const RING: usize = 4096;

/// Where an event sits in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct EventId {
    pub index: u64,
    pub k: u32,
}

impl EventId {
    /// Parses `"<index>.<k>"`.
    pub fn parse(text: &str) -> Option<EventId> {
        let (index, k) = text.split_once('.')?;
        Some(EventId {
            index: index.parse().ok()?,
            k: k.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.index, self.k)
    }
}

/// An event with its id, as streams carry it.
#[derive(Clone, Debug, Serialize)]
pub struct Stamped {
    pub id: String,
    #[serde(flatten)]
    pub event: Event,
}

/// What a reader gets.
#[derive(Clone, Debug, Serialize)]
pub struct Batch {
    pub events: Vec<Stamped>,
    /// The id to ask after next time.
    pub next: String,
    /// Events after the asked id were dropped from the ring before this read.
    pub gap: bool,
}

#[derive(Default)]
struct Ring {
    events: VecDeque<(EventId, Event)>,
    /// The id of the newest event dropped from the front.
    dropped: Option<EventId>,
}

impl Ring {
    fn push(&mut self, id: EventId, event: &Event) {
        self.events.push_back((id, event.clone()));
        if self.events.len() > RING {
            self.dropped = self.events.pop_front().map(|(id, _)| id);
        }
    }
}

/// Which stream a reader follows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Session(SessionId),
    Namespace(String),
}

#[derive(Default)]
struct Rings {
    streams: HashMap<Stream, Ring>,
    namespace_of: HashMap<SessionId, String>,
}

/// The rings of every stream, and a signal that something new arrived.
pub struct EventHub {
    rings: Mutex<Rings>,
    latest: watch::Sender<u64>,
}

impl Default for EventHub {
    fn default() -> EventHub {
        EventHub {
            rings: Mutex::new(Rings::default()),
            latest: watch::channel(0).0,
        }
    }
}

impl EventHub {
    /// Publishes an entry's events, first binding the session an open or resume answered.
    pub fn record<E>(&self, output: &Result<Output, E>, index: u64, events: &[Event]) {
        if let Ok(Output::Session { session }) = output {
            self.bind(session.session_id, &session.namespace);
        }
        self.publish(index, events);
    }

    /// Records that `session` belongs to `namespace`.
    pub fn bind(&self, session: SessionId, namespace: &str) {
        let mut rings = self.rings.lock().expect("event rings lock");
        rings.namespace_of.insert(session, namespace.to_owned());
    }

    /// Adds the events of log entry `index`.
    pub fn publish(&self, index: u64, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let mut rings = self.rings.lock().expect("event rings lock");
        for (k, event) in events.iter().enumerate() {
            let id = EventId { index, k: k as u32 };
            let session = event.session();
            if let Some(ns) = rings.namespace_of.get(&session).cloned() {
                let ring = rings.streams.entry(Stream::Namespace(ns)).or_default();
                ring.push(id, event);
            }
            let ring = rings.streams.entry(Stream::Session(session)).or_default();
            ring.push(id, event);
            if let Event::SessionClosed { .. } = event {
                // The kernel closed it: nothing can read its stream any more.
                rings.streams.remove(&Stream::Session(session));
                rings.namespace_of.remove(&session);
            }
        }
        drop(rings);
        self.latest.send_replace(index);
    }

    /// Forgets a closed session's ring and namespace.
    pub fn forget(&self, session: SessionId) {
        let mut rings = self.rings.lock().expect("event rings lock");
        rings.streams.remove(&Stream::Session(session));
        rings.namespace_of.remove(&session);
    }

    /// Forgets every stream (a reset of a manual-clock server).
    pub fn clear(&self) {
        *self.rings.lock().expect("event rings lock") = Rings::default();
        self.latest.send_replace(0);
    }

    /// The stream's events after `after`.
    pub fn after(&self, stream: &Stream, after: EventId) -> Batch {
        let rings = self.rings.lock().expect("event rings lock");
        let Some(ring) = rings.streams.get(stream) else {
            return Batch {
                events: Vec::new(),
                next: after.to_string(),
                gap: false,
            };
        };
        let events: Vec<Stamped> = ring
            .events
            .iter()
            .filter(|(id, _)| *id > after)
            .map(|(id, event)| Stamped {
                id: id.to_string(),
                event: event.clone(),
            })
            .collect();
        let next = events.last().map_or(after.to_string(), |e| e.id.clone());
        Batch {
            events,
            next,
            gap: ring.dropped.is_some_and(|d| d > after),
        }
    }

    /// The stream's events after `after`, waiting up to `wait` for the first one.
    pub async fn wait_after(&self, stream: &Stream, after: EventId, wait: Duration) -> Batch {
        let mut changes = self.latest.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let batch = self.after(stream, after);
            if !batch.events.is_empty() || batch.gap {
                return batch;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.after(stream, after),
            }
        }
    }
}
