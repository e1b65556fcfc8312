//! Per-session and per-namespace event streams, fed from the engine's durable events.
//!
//! Contract:
//! - Every event the engine publishes (only after its entry is durable) is kept in the ring of
//!   the session it concerns and in the ring of that session's namespace (the watch stream of
//!   dashboards), with an id `"<index>.<k>"` (the k-th event of log entry `index`), so ids grow
//!   in log order and stay unique across restarts (the log's indexes persist, and recovery
//!   feeds the replayed entries' events back in). Both rings share one copy of each event.
//! - Which session belongs to which namespace is learnt in one place, [`EventHub::record`]
//!   (from the open or resume that answered it, and the close or `SESSION_CLOSED` that ended
//!   it), which the engine's live path and recovery's replay both call, plus
//!   [`EventHub::restore`] for the sessions a snapshot holds.
//! - Retained bytes are budgeted: every event is charged its estimated heap size, and while
//!   the charge of all retained events is over the budget the oldest event (of any stream) is
//!   dropped; a ring also keeps at most [`RING`] events. A reader that asks for events after
//!   an id older than what its stream dropped is told so (`gap`): it never gets silence
//!   instead of events it missed. After a restart from a snapshot the events folded into it
//!   are gone, so every stream that could have held them reports a gap to a reader resuming
//!   before the snapshot (a session opened later cannot have, so its stream does not).
//! - Rings no one needs are freed: a session's when it closed and no reader follows it any
//!   more (a reader already following it gets its final events, then the end); a namespace's
//!   when it has no open session, no reader, and its events were dropped by the budget. What a
//!   freed ring had dropped is kept as one hub-wide mark, so a later reader still learns of it.
//! - Readers wait on their own ring's signal: a publish wakes only the streams it concerns.
//! - Event ids count entries of one log, named by [`EventHub::log`] (a single server's data
//!   file's id or its process's own, a cluster's `Machine::log`, which the applier hands
//!   over), and every batch says which. A reader
//!   whose cursor belongs to another log (a `--memory` server restarted on its port, a new
//!   data file, a new cluster) is read this log from its start, told so as a `gap`
//!   ([`EventHub::other_log`]): its cursor's number means nothing here, and taken as one it
//!   would skip this log's events up to it.

use crate::machine::{Call, Refused};
use klock_core::{Command, Event, Output, SessionId};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Events kept per stream at most (besides the byte budget).
pub const RING: usize = 4096;

/// Bytes of retained events, by default (`klock serve --event-bytes`): a few hundred large
/// grants, thousands of small events, well within a small machine's memory.
pub const DEFAULT_BUDGET: usize = 64 << 20;

/// A read returns at most about this many bytes of events (at least one event); the reader
/// asks again after its `next` for the rest.
const BATCH_BYTES: usize = 1 << 20;

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

    /// The largest id of log entry `index`: every event of the entry is at or before it.
    pub fn end_of(index: u64) -> EventId {
        EventId { index, k: u32::MAX }
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.index, self.k)
    }
}

/// One retained event: shared by its session's ring, its namespace's ring and the budget.
#[derive(Debug)]
struct Held {
    id: EventId,
    session: SessionId,
    namespace: Option<Arc<str>>,
    /// What it is charged against the budget.
    bytes: usize,
    event: Event,
}

/// An event with its id, as streams carry it (cheap to clone: the event is shared).
#[derive(Clone, Debug)]
pub struct Stamped(Arc<Held>);

impl Stamped {
    /// The event's id.
    pub fn id(&self) -> EventId {
        self.0.id
    }

    /// The event.
    pub fn event(&self) -> &Event {
        &self.0.event
    }
}

impl Serialize for Stamped {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            id: String,
            #[serde(flatten)]
            event: &'a Event,
        }
        View {
            id: self.0.id.to_string(),
            event: &self.0.event,
        }
        .serialize(serializer)
    }
}

/// What a reader gets.
#[derive(Clone, Debug, Serialize)]
pub struct Batch {
    pub events: Vec<Stamped>,
    /// The id to ask after next time.
    pub next: String,
    /// Events after the asked id were dropped before this read (by the byte budget, the ring
    /// size, or a restart from a snapshot): the reader missed some.
    pub gap: bool,
    /// The stream has ended (its session closed) and this batch holds its last events.
    #[serde(skip)]
    pub ended: bool,
    /// The log the ids count entries of ([`EventHub::log`]); none before a cluster named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<Arc<str>>,
}

/// Which stream a reader follows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Session(SessionId),
    Namespace(String),
}

/// Which events a reader asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinds {
    /// Every event of the stream.
    Every,
    /// Every event but the holder events (ACQUIRED, RELEASED: docs/SPEC.md §13.8), which a
    /// client that learns its grants and releases from their answers needs nowhere. They are
    /// skipped, not held back: the batch's `next` moves past them, and a long-poll is not
    /// answered by them alone.
    NoHolderEvents,
}

impl Kinds {
    fn wants(self, event: &Event) -> bool {
        self == Kinds::Every || !matches!(event, Event::Acquired { .. } | Event::Released { .. })
    }
}

/// What an applied entry changes in which session belongs to which namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Membership {
    Unchanged,
    /// An open or resume answered this session (not a repeated answer).
    Opened(SessionId, String),
    /// An explicit close ended this session.
    Closed(SessionId),
}

impl Membership {
    /// What `call` (a command; none for `Recovered` or `LeaderChanged`), answered `output`
    /// (`repeat`: a repeated idempotency key's first answer), changes. Events
    /// (`SESSION_CLOSED`) are read by [`EventHub::record`] itself.
    pub fn of(
        call: Option<Call<'_>>,
        output: &Result<Output, Refused>,
        repeat: bool,
    ) -> Membership {
        if repeat {
            return Membership::Unchanged; // the first answer already did
        }
        match (call.map(|c| c.command), output) {
            (_, Ok(Output::Session { session })) => {
                Membership::Opened(session.session_id, session.namespace.clone())
            }
            (Some(Command::Close { session }), Ok(_)) => Membership::Closed(*session),
            _ => Membership::Unchanged,
        }
    }
}

#[derive(Default)]
struct Ring {
    events: VecDeque<Arc<Held>>,
    /// The id of the newest event dropped from the front (or lost in a restart).
    dropped: Option<EventId>,
    /// Woken when an event arrives or the stream ends; made when a reader first follows.
    signal: Option<Arc<Notify>>,
    /// Readers following the ring now.
    readers: usize,
    /// For a namespace's ring: its open sessions.
    sessions: usize,
}

impl Ring {
    fn with_dropped(dropped: Option<EventId>) -> Ring {
        Ring {
            dropped,
            ..Ring::default()
        }
    }

    fn push(&mut self, held: &Arc<Held>) {
        self.events.push_back(Arc::clone(held));
        if self.events.len() > RING {
            self.dropped = self.events.pop_front().map(|h| h.id);
        }
        if let Some(signal) = &self.signal {
            signal.notify_waiters();
        }
    }

    /// Drops `id` if it is the oldest event kept (it is, if still kept: rings and the
    /// budget's queue are all in log order).
    fn evict(&mut self, id: EventId) {
        if self.events.front().is_some_and(|h| h.id == id) {
            self.events.pop_front();
            self.dropped = Some(id);
        }
    }
}

/// The hub's maps: looked up for every event of every entry applied, so hashed with the
/// kernel's hasher (foldhash, seeded per process) rather than SipHash (1.8% of a cluster
/// follower's samples under batch load went to hashing these keys).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Default)]
struct Rings {
    sessions: Map<SessionId, Ring>,
    namespaces: Map<Arc<str>, Ring>,
    /// The namespace of every open session.
    namespace_of: Map<SessionId, Arc<str>>,
    /// Every retained event, oldest first: the budget drops from the front.
    order: VecDeque<Arc<Held>>,
    bytes: usize,
    /// The newest event dropped from a ring that was freed since, or lost in a restart from a
    /// snapshot: a stream without a ring, or a namespace ring made later, reports a gap to a
    /// reader before it.
    lost: Option<EventId>,
}

impl Rings {
    fn bind(&mut self, session: SessionId, namespace: &str) {
        if self.namespace_of.contains_key(&session) {
            return;
        }
        let lost = self.lost;
        let ns: Arc<str> = match self.namespaces.get_key_value(namespace) {
            Some((name, _)) => Arc::clone(name),
            None => Arc::from(namespace),
        };
        self.namespaces
            .entry(Arc::clone(&ns))
            .or_insert_with(|| Ring::with_dropped(lost))
            .sessions += 1;
        self.namespace_of.insert(session, ns);
        self.sessions.entry(session).or_default();
    }

    fn unbind(&mut self, session: SessionId) {
        if let Some(ns) = self.namespace_of.remove(&session) {
            if let Some(ring) = self.namespaces.get_mut(&ns) {
                ring.sessions = ring.sessions.saturating_sub(1);
            }
            self.free_namespace(&ns);
        }
        self.free_session(session);
    }

    /// Frees a session's ring once no one can read it: the session closed and no reader
    /// follows it (readers following it were woken to read its last events, then end).
    fn free_session(&mut self, session: SessionId) {
        if self.namespace_of.contains_key(&session) {
            return;
        }
        let Some(ring) = self.sessions.get(&session) else {
            return;
        };
        if let Some(signal) = &ring.signal {
            signal.notify_waiters();
        }
        if ring.readers == 0 {
            // No one can ask for it again (reads of a closed session are refused), so what
            // it dropped need not be remembered.
            self.sessions.remove(&session);
        }
    }

    /// Frees a namespace's ring when it has no open session, no reader and no event kept.
    fn free_namespace(&mut self, ns: &str) {
        let Some(ring) = self.namespaces.get(ns) else {
            return;
        };
        if ring.sessions == 0 && ring.readers == 0 && ring.events.is_empty() {
            let ring = self.namespaces.remove(ns).expect("just found");
            self.lost = self.lost.max(ring.dropped);
        }
    }

    /// Drops the oldest events until the retained bytes fit `budget` (the newest event is
    /// always kept, so its readers can still get it).
    fn fit(&mut self, budget: usize) -> u64 {
        let mut evicted = 0;
        while self.bytes > budget && self.order.len() > 1 {
            let held = self.order.pop_front().expect("more than one");
            self.bytes -= held.bytes;
            evicted += 1;
            if let Some(ring) = self.sessions.get_mut(&held.session) {
                ring.evict(held.id);
            }
            if let Some(ns) = &held.namespace {
                if let Some(ring) = self.namespaces.get_mut(ns) {
                    ring.evict(held.id);
                }
                self.free_namespace(ns);
            }
        }
        evicted
    }

    fn ring(&self, stream: &Stream) -> Option<&Ring> {
        match stream {
            Stream::Session(s) => self.sessions.get(s),
            Stream::Namespace(ns) => self.namespaces.get(ns.as_str()),
        }
    }

    fn ring_mut(&mut self, stream: &Stream) -> Option<&mut Ring> {
        match stream {
            Stream::Session(s) => self.sessions.get_mut(s),
            Stream::Namespace(ns) => self.namespaces.get_mut(ns.as_str()),
        }
    }

    fn ended(&self, stream: &Stream) -> bool {
        match stream {
            Stream::Session(s) => !self.namespace_of.contains_key(s),
            Stream::Namespace(_) => false,
        }
    }
}

/// What the hub counts, for `/metrics`.
#[derive(Default)]
struct Counters {
    wakeups: AtomicU64,
    evicted: AtomicU64,
}

/// The rings of every stream, with their readers' signals.
pub struct EventHub {
    rings: Mutex<Rings>,
    budget: usize,
    counters: Counters,
    /// The log the event ids count entries of (module contract).
    log: Mutex<Option<Arc<str>>>,
}

impl Default for EventHub {
    fn default() -> EventHub {
        EventHub::new(DEFAULT_BUDGET)
    }
}

/// The estimated heap size of an event: what the budget charges it.
fn size_of(event: &Event) -> usize {
    use std::mem::size_of;
    let base = size_of::<Held>() + 2 * size_of::<Arc<Held>>() + 64;
    base + match event {
        Event::Granted { leases, .. } | Event::Acquired { leases, .. } => leases
            .iter()
            .map(|l| size_of::<klock_core::Lease>() + l.agent_id.len() + l.resource.len())
            .sum(),
        Event::Wounded {
            lost_leases,
            lost_tickets,
            ..
        } => 8 * (lost_leases.len() + lost_tickets.len()),
        Event::Released { leases, .. } => 8 * leases.len(),
        _ => 0,
    }
}

impl EventHub {
    /// A hub that retains at most about `budget` bytes of events.
    pub fn new(budget: usize) -> EventHub {
        EventHub {
            rings: Mutex::new(Rings::default()),
            budget,
            counters: Counters::default(),
            log: Mutex::new(None),
        }
    }

    /// Names the log the event ids count entries of: a single server's (its data file's id,
    /// or a `--memory` process's own), or a cluster's (the applier, from its machine).
    pub fn name_log(&self, id: &str) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.as_deref() != Some(id) {
            *log = Some(Arc::from(id));
        }
    }

    /// The log the event ids count entries of (module contract); none before one is named.
    pub fn log(&self) -> Option<Arc<str>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether a reader's cursor, said to be of log `asked`, belongs to another log than this
    /// hub's: then it counts nothing here, and the reader is read this log from its start with
    /// a `gap` (module contract). A reader that names no log, or a hub that has none yet,
    /// cannot tell: the cursor is taken as it is.
    pub fn other_log(&self, asked: Option<&str>) -> bool {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        asked.is_some_and(|asked| log.as_deref().is_some_and(|ours| ours != asked))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        self.rings.lock().expect("event rings lock")
    }

    /// Publishes the events of log entry `index` after applying what it changed in the
    /// sessions' namespaces: the one place both the live path and recovery keep the streams.
    pub fn record(&self, index: u64, membership: &Membership, events: &[Event]) {
        self.record_from(index, 0, membership, events);
    }

    /// [`record`](Self::record), the events numbered from `first` (`"<index>.<first>"`): a
    /// batch entry's commands record their events in turn, counted across the entry.
    pub fn record_from(&self, index: u64, first: u32, membership: &Membership, events: &[Event]) {
        if events.is_empty() && *membership == Membership::Unchanged {
            return; // most entries: no lock taken
        }
        let mut rings = self.lock();
        if let Membership::Opened(session, ns) = membership {
            rings.bind(*session, ns);
        }
        for (k, event) in events.iter().enumerate() {
            let session = event.session();
            let namespace = rings.namespace_of.get(&session).cloned();
            let held = Arc::new(Held {
                id: EventId {
                    index,
                    k: first.saturating_add(u32::try_from(k).unwrap_or(u32::MAX)),
                },
                session,
                namespace,
                bytes: size_of(event),
                event: event.clone(),
            });
            let lost = rings.lost;
            rings
                .sessions
                .entry(session)
                .or_insert_with(|| Ring::with_dropped(lost))
                .push(&held);
            if let Some(ns) = &held.namespace {
                if let Some(ring) = rings.namespaces.get_mut(ns) {
                    ring.push(&held);
                }
            }
            rings.bytes += held.bytes;
            rings.order.push_back(held);
            if let Event::SessionClosed { .. } = event {
                // The kernel closed it: its stream ends after this event.
                rings.unbind(session);
            }
        }
        if let Membership::Closed(session) = membership {
            rings.unbind(*session);
        }
        let evicted = rings.fit(self.budget);
        if evicted > 0 {
            self.counters.evicted.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// After a restart from a snapshot of log entry `index` holding `sessions` (id and
    /// namespace): binds them, and marks every event up to the snapshot as lost, since the
    /// snapshot folded them in. Call before the replayed entries are recorded.
    pub fn restore<'a>(
        &self,
        index: u64,
        sessions: impl IntoIterator<Item = (SessionId, &'a str)>,
    ) {
        let mut rings = self.lock();
        let lost = Some(EventId::end_of(index));
        rings.lost = rings.lost.max(lost);
        for (session, ns) in sessions {
            rings.bind(session, ns);
            if let Some(ring) = rings.sessions.get_mut(&session) {
                ring.dropped = ring.dropped.max(lost);
            }
            if let Some(ring) = rings.namespaces.get_mut(ns) {
                ring.dropped = ring.dropped.max(lost);
            }
        }
    }

    /// Forgets a closed session (idempotent: [`record`](Self::record) already did, with the
    /// close's entry).
    pub fn forget(&self, session: SessionId) {
        self.lock().unbind(session);
    }

    /// Forgets every stream (a reset of a manual-clock server); readers following one see it
    /// end or start over.
    pub fn clear(&self) {
        let mut rings = self.lock();
        for ring in rings.sessions.values().chain(rings.namespaces.values()) {
            if let Some(signal) = &ring.signal {
                signal.notify_waiters();
            }
        }
        let old = std::mem::take(&mut *rings);
        // Readers keep following their rings: keep those (emptied) so they can detach.
        for (id, ring) in old.sessions {
            if ring.readers > 0 {
                rings.sessions.insert(id, Ring::follow_again(ring));
            }
        }
        for (ns, ring) in old.namespaces {
            if ring.readers > 0 {
                rings.namespaces.insert(ns, Ring::follow_again(ring));
            }
        }
    }

    /// The stream's events after `after` (at most about [`BATCH_BYTES`] of them).
    pub fn after(&self, stream: &Stream, after: EventId) -> Batch {
        self.read(stream, after, Kinds::Every)
    }

    /// The stream's events of `kinds` after `after` (at most about [`BATCH_BYTES`] of them);
    /// `next` is past every event read, skipped ones included.
    pub fn read(&self, stream: &Stream, after: EventId, kinds: Kinds) -> Batch {
        let rings = self.lock();
        let ended = rings.ended(stream);
        let Some(ring) = rings.ring(stream) else {
            let gap = rings.lost > Some(after);
            let next = if gap {
                rings.lost.unwrap_or(after)
            } else {
                after
            };
            return Batch {
                events: Vec::new(),
                next: next.to_string(),
                gap,
                ended,
                log: self.log(),
            };
        };
        let from = ring.events.partition_point(|h| h.id <= after);
        let mut events = Vec::new();
        let (mut bytes, mut read, mut last) = (0, 0, None);
        for held in ring.events.range(from..) {
            if !kinds.wants(&held.event) {
                (read, last) = (read + 1, Some(held.id));
                continue;
            }
            if !events.is_empty() && bytes + held.bytes > BATCH_BYTES {
                break;
            }
            bytes += held.bytes;
            (read, last) = (read + 1, Some(held.id));
            events.push(Stamped(Arc::clone(held)));
        }
        let complete = from + read == ring.events.len();
        let gap = ring.dropped > Some(after);
        let next = match last {
            Some(last) => last,
            None if gap => ring.dropped.unwrap_or(after),
            None => after,
        };
        Batch {
            events,
            next: next.to_string(),
            gap,
            ended: ended && complete,
            log: self.log(),
        }
    }

    /// Starts following `stream`: the reader waits on that stream's signal only.
    pub fn follow(self: &Arc<Self>, stream: Stream) -> Reader {
        let mut rings = self.lock();
        let lost = rings.lost;
        let ring = match &stream {
            Stream::Session(s) => rings
                .sessions
                .entry(*s)
                .or_insert_with(|| Ring::with_dropped(lost)),
            Stream::Namespace(ns) => {
                let ns = match rings.namespaces.get_key_value(ns.as_str()) {
                    Some((name, _)) => Arc::clone(name),
                    None => Arc::from(ns.as_str()),
                };
                rings
                    .namespaces
                    .entry(ns)
                    .or_insert_with(|| Ring::with_dropped(lost))
            }
        };
        ring.readers += 1;
        let signal = Arc::clone(ring.signal.get_or_insert_with(Default::default));
        drop(rings);
        Reader {
            hub: Arc::clone(self),
            stream,
            signal,
        }
    }

    fn unfollow(&self, stream: &Stream) {
        let mut rings = self.lock();
        if let Some(ring) = rings.ring_mut(stream) {
            ring.readers = ring.readers.saturating_sub(1);
            if ring.readers == 0 {
                ring.signal = None;
            }
        }
        match stream {
            Stream::Session(s) => rings.free_session(*s),
            Stream::Namespace(ns) => rings.free_namespace(ns),
        }
    }

    /// The stream's events of `kinds` after `after`, waiting up to `wait` for the first one.
    pub async fn wait_after(
        self: &Arc<Self>,
        stream: &Stream,
        after: EventId,
        wait: Duration,
        kinds: Kinds,
    ) -> Batch {
        self.follow(stream.clone())
            .wait_after(after, wait, kinds)
            .await
    }

    /// The hub's series of the text exposition (`/metrics`).
    pub fn render_metrics(&self, out: &mut String) {
        let (bytes, retained, rings, readers) = {
            let r = self.lock();
            let readers: usize = r
                .sessions
                .values()
                .chain(r.namespaces.values())
                .map(|ring| ring.readers)
                .sum();
            (
                r.bytes,
                r.order.len(),
                r.sessions.len() + r.namespaces.len(),
                readers,
            )
        };
        for (name, kind, help, n) in [
            (
                "klock_event_bytes",
                "gauge",
                "Estimated bytes of retained events (budget: --event-bytes).",
                bytes as u64,
            ),
            (
                "klock_event_budget_bytes",
                "gauge",
                "The byte budget of retained events.",
                self.budget as u64,
            ),
            (
                "klock_events_retained",
                "gauge",
                "Events retained for the streams.",
                retained as u64,
            ),
            (
                "klock_event_rings",
                "gauge",
                "Session and namespace event rings kept.",
                rings as u64,
            ),
            (
                "klock_event_readers",
                "gauge",
                "Event streams and long-polls following a ring now.",
                readers as u64,
            ),
            (
                "klock_events_evicted_total",
                "counter",
                "Events dropped to keep retained bytes within the budget.",
                self.counters.evicted.load(Ordering::Relaxed),
            ),
            (
                "klock_event_wakeups_total",
                "counter",
                "Times a waiting stream reader was woken by a publish to its stream.",
                self.counters.wakeups.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {n}"
            );
        }
    }
}

impl Ring {
    /// A ring emptied by a reset that its readers keep following.
    fn follow_again(ring: Ring) -> Ring {
        Ring {
            signal: ring.signal,
            readers: ring.readers,
            ..Ring::default()
        }
    }
}

/// A reader following one stream (SSE, a long-poll, a held acquire); stops following when
/// dropped.
pub struct Reader {
    hub: Arc<EventHub>,
    stream: Stream,
    signal: Arc<Notify>,
}

impl Reader {
    /// The stream's events of `kinds` after `after`, waiting up to `wait` for one (or a gap,
    /// or the end). Skipped events move the cursor without answering.
    pub async fn wait_after(&self, mut after: EventId, wait: Duration, kinds: Kinds) -> Batch {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before reading, so a publish between the read and the wait wakes it.
            let woken = self.signal.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let batch = self.hub.read(&self.stream, after, kinds);
            if !batch.events.is_empty() || batch.gap || batch.ended {
                return batch;
            }
            // Only skipped events (if any) came: read after them from now on.
            after = EventId::parse(&batch.next).unwrap_or(after);
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return self.hub.read(&self.stream, after, kinds);
            }
            self.hub.counters.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.hub.unfollow(&self.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::{LeaseId, TicketId};

    fn expired(session: u64, lease: u64) -> Event {
        Event::LeaseExpired {
            lease: LeaseId(lease),
            session: SessionId(session),
        }
    }

    fn opened(session: u64, ns: &str) -> Membership {
        Membership::Opened(SessionId(session), ns.to_owned())
    }

    fn released(session: u64, lease: u64) -> Event {
        Event::Released {
            session: SessionId(session),
            leases: vec![LeaseId(lease)],
        }
    }

    /// Without holder events a read skips ACQUIRED/RELEASED but moves past them, and a wait is
    /// not answered by them alone: it goes on waiting from after them.
    #[tokio::test]
    async fn a_reader_without_holder_events_skips_them_and_waits_past_them() {
        let hub = Arc::new(EventHub::new(DEFAULT_BUDGET));
        hub.record(1, &opened(1, "a"), &[]);
        hub.record(2, &Membership::Unchanged, &[released(1, 7)]);
        hub.record(3, &Membership::Unchanged, &[expired(1, 8), released(1, 9)]);
        let ns = Stream::Namespace("a".into());
        let every = hub.read(&ns, EventId::default(), Kinds::Every);
        assert_eq!(every.events.len(), 3);
        let batch = hub.read(&ns, EventId::default(), Kinds::NoHolderEvents);
        let names: Vec<&str> = batch.events.iter().map(|e| e.event().name()).collect();
        assert_eq!((names, batch.next.as_str()), (vec!["LEASE_EXPIRED"], "3.1"));
        // Only holder events after the cursor: nothing, but past them.
        hub.record(4, &Membership::Unchanged, &[released(1, 10)]);
        let batch = hub.read(&ns, EventId::parse("3.1").unwrap(), Kinds::NoHolderEvents);
        assert_eq!((batch.events.len(), batch.next.as_str()), (0, "4.0"));
        // A waiting reader: a holder event does not answer it, the next other event does.
        let reader = hub.follow(ns.clone());
        let at = EventId::parse("4.0").unwrap();
        let wait = reader.wait_after(at, Duration::from_secs(10), Kinds::NoHolderEvents);
        let publish = async {
            tokio::task::yield_now().await;
            hub.record(5, &Membership::Unchanged, &[released(1, 11)]);
            tokio::task::yield_now().await;
            hub.record(6, &Membership::Unchanged, &[expired(1, 12)]);
        };
        let (batch, ()) = tokio::join!(wait, publish);
        let ids: Vec<String> = batch.events.iter().map(|e| e.id().to_string()).collect();
        assert_eq!((ids, batch.next.as_str()), (vec!["6.0".to_owned()], "6.0"));
        // With every kind the same wait is answered by the holder event.
        let batch = reader
            .wait_after(at, Duration::from_secs(10), Kinds::Every)
            .await;
        assert_eq!(batch.events[0].event().name(), "RELEASED");
    }

    #[test]
    fn the_budget_drops_the_oldest_events_and_readers_behind_them_learn_of_the_gap() {
        let one = size_of(&expired(1, 1));
        let hub = EventHub::new(3 * one);
        hub.record(1, &opened(1, "a"), &[]);
        for index in 2..=6 {
            hub.record(index, &Membership::Unchanged, &[expired(1, index)]);
        }
        let batch = hub.after(&Stream::Session(SessionId(1)), EventId::default());
        let ids: Vec<u64> = batch.events.iter().map(|e| e.id().index).collect();
        assert_eq!(ids, [4, 5, 6]);
        assert!(batch.gap);
        // A reader already past the dropped events hears of no gap.
        let batch = hub.after(&Stream::Namespace("a".into()), EventId { index: 3, k: 0 });
        assert!(!batch.gap && batch.events.len() == 3);
    }

    #[test]
    fn a_restored_snapshot_binds_its_sessions_and_marks_what_it_folded_in_as_lost() {
        let hub = EventHub::default();
        hub.restore(10, [(SessionId(1), "a")]);
        let ns = Stream::Namespace("a".into());
        let batch = hub.after(&ns, EventId { index: 9, k: 0 });
        assert!(batch.gap && batch.events.is_empty());
        assert_eq!(
            batch.next, "10.4294967295",
            "the next read starts past the gap"
        );
        let next = EventId::parse(&batch.next).unwrap();
        assert!(!hub.after(&ns, next).gap);
        hub.record(11, &Membership::Unchanged, &[expired(1, 1)]);
        assert_eq!(
            hub.after(&ns, next).events.len(),
            1,
            "its events reach the watch"
        );
        // A session opened after the restart lost nothing.
        hub.record(12, &opened(2, "a"), &[]);
        assert!(
            !hub.after(&Stream::Session(SessionId(2)), EventId::default())
                .gap
        );
    }

    #[test]
    fn closed_sessions_and_empty_namespaces_free_their_rings() {
        let hub = Arc::new(EventHub::new(1));
        hub.record(1, &opened(1, "a"), &[]);
        let reader = hub.follow(Stream::Session(SessionId(1)));
        let closed = Event::SessionClosed {
            session: SessionId(1),
            reason: klock_core::CloseReason::Idle,
        };
        hub.record(2, &Membership::Unchanged, &[closed]);
        // The follower gets the last event and the end; then the ring goes.
        let batch = hub.after(&Stream::Session(SessionId(1)), EventId::default());
        assert!(batch.ended && batch.events.len() == 1);
        drop(reader);
        assert!(hub.lock().sessions.is_empty());
        // Namespace a keeps its ring until the budget drops its last event.
        hub.record(3, &opened(2, "b"), &[]);
        let died = Event::Died {
            ticket: TicketId(1),
            session: SessionId(2),
            retry_after_ms: 1,
            cycle: Vec::new(),
        };
        hub.record(4, &Membership::Unchanged, &[died]);
        let rings = hub.lock();
        assert!(!rings.namespaces.contains_key("a"), "a's ring was freed");
        assert!(rings.lost >= Some(EventId { index: 2, k: 0 }));
    }
}
