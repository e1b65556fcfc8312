/*
 * klock.h: the C API of Klock, a coordination kernel for multi-agent systems.
 *
 * The normative behaviour is the project's SPEC.md; this header only translates it.
 *
 * Conventions (every function follows them unless its own comment says otherwise):
 *
 * - Results. Every fallible function returns a klock_status: KLOCK_OK (0) on success, otherwise
 *   a code grouped in blocks: 1xx bad input, 2xx unknown identifiers, 3xx state conflicts,
 *   4xx limits (numerically equal to the kernel's error codes), 5xx outcomes of the remote
 *   client (bad URL, unreachable, refused, died, timeout, lease lost), 9xx problems of the C
 *   boundary itself (NULL pointer, invalid UTF-8, buffer too small, invalid argument, panic).
 *   klock_status_name() gives the stable upper-case name of any code.
 * - Messages. A failing call stores a message saying what to fix in a per-thread slot; read it
 *   with klock_last_error_message() into your own buffer (truncated safely, required size
 *   reported). A successful call clears the slot.
 * - Strings are NUL-terminated UTF-8. A NULL where a string is required is
 *   KLOCK_NULL_POINTER, a string that is not UTF-8 is KLOCK_INVALID_UTF8. Input strings are
 *   only read during the call; the library never keeps your pointers. U+0000, which a C
 *   string cannot hold, is written as the two bytes 0xC0 0x80 (the "modified UTF-8" of JNI)
 *   in both directions, so any text the kernel can be given can be passed (and is answered as
 *   on every host) and nothing is cut short; no other overlong form is accepted.
 * - Ownership. Structs you pass in (klock_config, klock_acquire_options, klock_digest) stay
 *   yours. Results with variable-size data (klock_verdict, klock_event, klock_digest, ...) are
 *   allocated by the library, returned through an out-pointer, must be treated as read-only,
 *   and are freed with the matching klock_*_free(), which accepts NULL. On failure such an
 *   out-pointer is set to NULL (when the out-pointer itself is not NULL), so freeing it is always
 *   safe. Fixed-size results (klock_session_info, klock_config, ...) are written into structs
 *   you own.
 * - Errors detected by the C boundary (9xx) are reported before the kernel is reached: the call
 *   changes nothing, not even the settlement of time (the next call settles it, with the same
 *   result, because settlement is path-independent).
 * - Time. Every call that can change state takes `now` in milliseconds, on an epoch you choose;
 *   the kernel never reads a clock. After every call drain klock_kernel_poll_event(), and arm
 *   one timer for klock_kernel_next_deadline(); when it fires call klock_kernel_advance().
 * - Threads. A klock_kernel is internally locked: every function taking one may be called
 *   from any thread, concurrently, except klock_kernel_free(), which must not race with any
 *   other use of the same handle. Results are plain memory owned by the caller and may move
 *   between threads. Error messages are per thread.
 * - Panics. No function lets a Rust panic cross into C: a panic becomes KLOCK_PANIC, and the
 *   kernel it happened in is poisoned (every later call on it returns KLOCK_PANIC; free it).
 * - The remote client (klock_remote_*: a `klock serve` over HTTP) blocks the calling thread
 *   until the server's answer; it reads its own clock and runs one thread of its own, which
 *   renews held leases and follows the server's events. Its handles (client, session, lease)
 *   may be used from any thread and freed in any order; that thread ends when the last of
 *   them is freed. A failure's message starts with its stable name (the server's own for a
 *   refusal: `UNAUTHORIZED: ...`).
 * - Fencing. A lease alone is not mutual exclusion when its holder can pause (GC, swap, a
 *   stopped VM) past its expiry: the protected resource must remember the largest `fence` it
 *   has seen and reject writes carrying a smaller one.
 */

#ifndef KLOCK_H
#define KLOCK_H

/* Generated with cbindgen:0.29.4 */

/* Generated from bindings/c/src by the pinned cbindgen: do not edit. After changing the Rust sources, run `cargo test -p klock-c header` and copy target/klock-c/klock.h here. */

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/**
 * Bytes of a name held in a struct the caller owns: the kernel's longest agent id or
 * namespace (256 bytes) and a NUL.
 */
#define KLOCK_NAME_CAPACITY 257

/**
 * The result of every fallible function: 0 on success, otherwise a code grouped in blocks
 * (1xx bad input, 2xx unknown identifiers, 3xx state conflicts, 4xx limits, 5xx outcomes of
 * the remote client, 9xx problems of the C boundary). Codes below 500 equal the kernel's
 * error codes. Numeric values and names (klock_status_name()) never change once published.
 */
enum klock_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * Success.
     */
    KLOCK_OK = 0,
    /**
     * A resource is not `TYPE:/path` (bad TYPE, relative path, `..`, control character, too long).
     */
    KLOCK_INVALID_RESOURCE = 100,
    /**
     * A predicate is not one of the six names.
     */
    KLOCK_INVALID_PREDICATE = 101,
    /**
     * A manifest has 0 or more than 256 intents.
     */
    KLOCK_INVALID_MANIFEST = 102,
    /**
     * `ttl_ms` is 0.
     */
    KLOCK_INVALID_TTL = 103,
    /**
     * A digest does not match the kernel's record of its session.
     */
    KLOCK_INVALID_DIGEST = 104,
    /**
     * An agent id is empty, longer than 256 bytes, or has a control character.
     */
    KLOCK_INVALID_AGENT_ID = 105,
    /**
     * A namespace is empty, longer than 256 bytes, or has a control character.
     */
    KLOCK_INVALID_NAMESPACE = 106,
    /**
     * A configuration value cannot mean anything (a zero TTL, an unknown policy).
     */
    KLOCK_INVALID_CONFIG = 107,
    /**
     * No open session has this id (closed, closed for idleness, or never opened).
     */
    KLOCK_UNKNOWN_SESSION = 200,
    /**
     * No lease with this id is known to the session's namespace.
     */
    KLOCK_UNKNOWN_LEASE = 201,
    /**
     * The ticket is not waiting (resolved, withdrawn, or never issued).
     */
    KLOCK_UNKNOWN_TICKET = 202,
    /**
     * The lease or ticket belongs to another session.
     */
    KLOCK_NOT_OWNER = 300,
    /**
     * The lease has expired (heartbeat outcome).
     */
    KLOCK_LEASE_EXPIRED = 301,
    /**
     * The lease was released (heartbeat outcome).
     */
    KLOCK_LEASE_RELEASED = 302,
    /**
     * Under the `lanes` policy the session already holds or waits: ask for everything at once.
     */
    KLOCK_HOLD_AND_WAIT = 303,
    /**
     * The lease reached its lifetime cap and cannot be renewed (heartbeat outcome).
     */
    KLOCK_LIFETIME_EXCEEDED = 304,
    /**
     * A quota (`max_leases_per_session`) would be exceeded.
     */
    KLOCK_QUOTA_EXCEEDED = 400,
    /**
     * Remote client: the server URL is not `http://HOST:PORT` or `https://HOST:PORT`.
     */
    KLOCK_BAD_URL = 500,
    /**
     * Remote client: the server could not be reached in time (nothing listens, the
     * connection broke, no answer within the request's bound).
     */
    KLOCK_UNREACHABLE = 501,
    /**
     * Remote client: the server refused with an error that has no kernel status (e.g.
     * `UNAUTHORIZED`, `RATE_LIMITED`); the message starts with the server's stable name.
     */
    KLOCK_REFUSED = 502,
    /**
     * Remote client: Wait-Die refused the acquire while the session holds other leases:
     * release them, wait the reported `retry_after_ms`, ask again for everything at once.
     */
    KLOCK_DIED = 503,
    /**
     * Remote client: the acquire's timeout passed before the grant.
     */
    KLOCK_TIMEOUT = 504,
    /**
     * Remote client: a held lease was lost (expired, wounded, its session closed, or no
     * renewal reached the server in time); the message names the reason.
     */
    KLOCK_LEASE_LOST = 505,
    /**
     * A required pointer argument is NULL.
     */
    KLOCK_NULL_POINTER = 900,
    /**
     * A string argument is not valid UTF-8.
     */
    KLOCK_INVALID_UTF8 = 901,
    /**
     * The caller's buffer was too small: the text was truncated, the required size reported.
     */
    KLOCK_BUFFER_TOO_SMALL = 902,
    /**
     * An argument is out of its domain at the C level (e.g. malformed digest JSON).
     */
    KLOCK_INVALID_ARGUMENT = 903,
    /**
     * The library panicked (a bug): the call was abandoned and the kernel is poisoned.
     */
    KLOCK_PANIC = 999,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_status klock_status;
#else
typedef uint32_t klock_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * The kind of an event (SPEC.md §9).
 */
enum klock_event_kind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * A waiting ticket was granted: `ticket`, `session`, `leases`.
     */
    KLOCK_EVENT_GRANTED = 1,
    /**
     * A waiting ticket timed out: `ticket`, `session`.
     */
    KLOCK_EVENT_WAIT_TIMEOUT = 2,
    /**
     * A waiting ticket was withdrawn (counts as a DIE): `ticket`, `session`, `retry_after_ms`,
     * and under `detect` the wait-for cycle it was the victim of, `cycle`.
     */
    KLOCK_EVENT_DIED = 3,
    /**
     * A lease expired: `lease`, `session`.
     */
    KLOCK_EVENT_LEASE_EXPIRED = 4,
    /**
     * An older session revoked this one's leases and tickets: `session`, `by`,
     * `lost_leases`, `lost_tickets`, `retry_after_ms` (counts as a DIE: back off that long).
     */
    KLOCK_EVENT_WOUNDED = 5,
    /**
     * The kernel closed a session on its own: `session`, `close_reason`.
     */
    KLOCK_EVENT_SESSION_CLOSED = 6,
    /**
     * An acquire was granted at once (its verdict was GRANTED): `session`, `leases` (the
     * verdict's).
     */
    KLOCK_EVENT_ACQUIRED = 7,
    /**
     * Leases ended by a release, release_all or explicit close: `session`, `released`
     * (lease ids, ascending).
     */
    KLOCK_EVENT_RELEASED = 8,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_event_kind klock_event_kind;
#else
typedef uint32_t klock_event_kind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * What an agent intends to do to a resource (SPEC.md §4).
 */
enum klock_predicate
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    KLOCK_PREDICATE_PROVIDES = 0,
    KLOCK_PREDICATE_CONSUMES = 1,
    KLOCK_PREDICATE_MUTATES = 2,
    KLOCK_PREDICATE_DELETES = 3,
    KLOCK_PREDICATE_DEPENDS_ON = 4,
    KLOCK_PREDICATE_RENAMES = 5,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_predicate klock_predicate;
#else
typedef uint32_t klock_predicate;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Why the kernel closed a session on its own.
 */
enum klock_close_reason
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * Not a SESSION_CLOSED event.
     */
    KLOCK_CLOSE_REASON_NONE = 0,
    /**
     * No lease, no ticket and no call for `session_idle_ms`.
     */
    KLOCK_CLOSE_REASON_IDLE = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_close_reason klock_close_reason;
#else
typedef uint32_t klock_close_reason;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * The immediate answer to an acquire (SPEC.md §6).
 */
enum klock_verdict_kind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * Every intent is a lease now.
     */
    KLOCK_VERDICT_GRANTED = 1,
    /**
     * Queued as `ticket`; a GRANTED, WAIT_TIMEOUT, DIED or WOUNDED event resolves it later.
     */
    KLOCK_VERDICT_WAIT = 2,
    /**
     * Nothing held or queued; retry after `retry_after_ms`.
     */
    KLOCK_VERDICT_DIE = 3,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_verdict_kind klock_verdict_kind;
#else
typedef uint32_t klock_verdict_kind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * The kernel's truth about one lease (reconcile, SPEC.md §7).
 */
enum klock_lease_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * Held by the asking session; `expires_at` and `fence` are set.
     */
    KLOCK_LEASE_STATUS_ACTIVE = 1,
    KLOCK_LEASE_STATUS_EXPIRED = 2,
    KLOCK_LEASE_STATUS_RELEASED = 3,
    /**
     * Another session's lease in the same namespace.
     */
    KLOCK_LEASE_STATUS_NOT_OWNER = 4,
    /**
     * Never issued, or another namespace's, or forgotten when its session closed.
     */
    KLOCK_LEASE_STATUS_UNKNOWN = 5,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum klock_lease_status klock_lease_status;
#else
typedef uint32_t klock_lease_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * A kernel: sessions, leases, queues and time. Opaque; create with klock_kernel_new(), free
 * with klock_kernel_free(). Internally locked: usable from several threads at once.
 */
typedef struct klock_kernel klock_kernel;

/**
 * A connection to `klock serve`. Opaque; create with klock_remote_connect(), free with
 * klock_remote_client_free(). Usable from several threads at once.
 */
typedef struct klock_remote_client klock_remote_client;

/**
 * The leases of one grant, renewed by the client while this handle lives. Opaque; create
 * with klock_remote_acquire(), free with klock_remote_lease_free().
 */
typedef struct klock_remote_lease klock_remote_lease;

/**
 * A session opened on the server. Opaque; create with klock_remote_session_open(), free with
 * klock_remote_session_free(). Usable from several threads at once.
 */
typedef struct klock_remote_session klock_remote_session;

/**
 * A deadlock-prevention policy (SPEC.md §6), one of the KLOCK_POLICY_* values.
 */
typedef uint32_t klock_policy;

/**
 * Kernel configuration (SPEC.md defaults from klock_config_default()). Owned by the caller;
 * klock_kernel_new() copies it.
 */
typedef struct klock_config {
    /**
     * One of KLOCK_POLICY_*.
     */
    klock_policy policy;
    /**
     * Seed of the jitter generator (splitmix64).
     */
    uint64_t seed;
    uint64_t default_ttl_ms;
    uint64_t max_ttl_ms;
    uint64_t default_wait_timeout_ms;
    uint64_t backoff_base_ms;
    uint64_t backoff_cap_ms;
    uint64_t grace_ms;
    /**
     * 0 = sessions are never closed for idleness.
     */
    uint64_t session_idle_ms;
    uint64_t max_leases_per_session;
    /**
     * 0 = unlimited.
     */
    uint64_t max_lease_lifetime_ms;
} klock_config;

/**
 * Options of one acquire (SPEC.md §6). Start from klock_acquire_options_default(); owned by
 * the caller and only read during the call.
 */
typedef struct klock_acquire_options {
    /**
     * Whether `ttl_ms` is given; false = the kernel's `default_ttl_ms`.
     */
    bool has_ttl_ms;
    /**
     * Lease TTL; 0 is KLOCK_INVALID_TTL, above `max_ttl_ms` it is clamped.
     */
    uint64_t ttl_ms;
    /**
     * Whether a blocked request may wait (false = try-lock: blocked means DIE).
     */
    bool wait;
    /**
     * Whether `wait_timeout_ms` is given; false = the kernel's `default_wait_timeout_ms`.
     */
    bool has_wait_timeout_ms;
    /**
     * How long a WAIT may last before WAIT_TIMEOUT; 0 means `wait = false`.
     */
    uint64_t wait_timeout_ms;
} klock_acquire_options;

/**
 * A granted lease. Part of a result owned by the library (read-only).
 */
typedef struct klock_lease {
    uint64_t lease_id;
    uint64_t session_id;
    const char *agent_id;
    /**
     * Canonical `TYPE:/path`.
     */
    const char *resource;
    klock_predicate predicate;
    /**
     * Strictly increasing across every grant of the kernel: the protected resource must
     * reject writes carrying a fence smaller than the largest it has seen.
     */
    uint64_t fence;
    uint64_t acquired_at;
    /**
     * Effective expiry (suspension grace included).
     */
    uint64_t expires_at;
    uint64_t ttl_ms;
} klock_lease;

/**
 * Something that happened other than as the direct answer of a call. Owned by the library:
 * free with klock_event_free(). Which fields are set depends on `kind` (see
 * klock_event_kind); the others are 0 / NULL.
 */
typedef struct klock_event {
    klock_event_kind kind;
    /**
     * The session the event concerns (every kind).
     */
    uint64_t session;
    /**
     * GRANTED, WAIT_TIMEOUT, DIED.
     */
    uint64_t ticket;
    /**
     * GRANTED and ACQUIRED: the leases.
     */
    const struct klock_lease *leases;
    size_t leases_len;
    /**
     * DIED and WOUNDED (both count as a DIE): how long to back off before retrying
     * (SPEC.md §8; never compute it yourself).
     */
    uint64_t retry_after_ms;
    /**
     * LEASE_EXPIRED.
     */
    uint64_t lease;
    /**
     * WOUNDED: the older session that wounded this one.
     */
    uint64_t by;
    /**
     * WOUNDED: lease ids lost.
     */
    const uint64_t *lost_leases;
    size_t lost_leases_len;
    /**
     * WOUNDED: ticket ids lost.
     */
    const uint64_t *lost_tickets;
    size_t lost_tickets_len;
    /**
     * SESSION_CLOSED.
     */
    klock_close_reason close_reason;
    /**
     * DIED under the `detect` policy: the session ids of the wait-for cycle this ticket was the
     * victim of, this session first (SPEC.md §6.1); empty (NULL, 0) for any other reason.
     */
    const uint64_t *cycle;
    size_t cycle_len;
    /**
     * RELEASED: the ids of the leases released, ascending (after the older fields, so their
     * offsets never move).
     */
    const uint64_t *released;
    size_t released_len;
} klock_event;

/**
 * A session as opened or resumed. Written into a struct the caller owns.
 */
typedef struct klock_session_info {
    uint64_t session_id;
    /**
     * The agent id given at open (NUL-terminated).
     */
    char agent_id[KLOCK_NAME_CAPACITY];
    /**
     * The session's namespace (NUL-terminated).
     */
    char namespace_name[KLOCK_NAME_CAPACITY];
    /**
     * The priority of the session's current unit of work: smaller = older = higher priority.
     * Only the order is meaningful.
     */
    uint64_t priority;
    /**
     * 0 when opened; each resume sets it to the kernel's epoch + 1.
     */
    uint64_t epoch;
} klock_session_info;

/**
 * A session's recovery digest (KLIS-8 shape, SPEC.md §5).
 *
 * Returned by klock_session_digest() and klock_digest_from_json(): owned by the library, free
 * with klock_digest_free(). klock_session_resume() and klock_digest_to_json() also accept a
 * digest the caller filled in itself (e.g. after loading it from storage); such a digest stays
 * the caller's and must never be passed to klock_digest_free().
 */
typedef struct klock_digest {
    /**
     * Digest format version (currently 1).
     */
    uint32_t version;
    const char *agent_id;
    const char *namespace_name;
    uint64_t session_id;
    /**
     * The session's priority, as assigned by the kernel.
     */
    uint64_t priority_timestamp;
    uint64_t epoch;
    /**
     * IDLE, WAITING, HOLDING or SUSPENDED. May be NULL in a caller-built digest (read as "").
     */
    const char *last_phase;
    /**
     * The intents of the session's waiting tickets, as "PREDICATE TYPE:/path".
     */
    const char *const *pending_intents;
    size_t pending_intents_len;
} klock_digest;

/**
 * An intent (predicate and resource) of a blocking session.
 */
typedef struct klock_intent {
    klock_predicate predicate;
    const char *resource;
} klock_intent;

/**
 * A session that blocks a request, and its conflicting intents (held or queued ahead).
 */
typedef struct klock_blocker {
    uint64_t session_id;
    const char *agent_id;
    const struct klock_intent *intents;
    size_t intents_len;
} klock_blocker;

/**
 * The answer to klock_session_acquire(). Owned by the library: free with klock_verdict_free().
 * Which fields are set depends on `kind`; the others are 0 / NULL.
 */
typedef struct klock_verdict {
    klock_verdict_kind kind;
    /**
     * GRANTED: one lease per distinct intent, in order of first appearance.
     */
    const struct klock_lease *leases;
    size_t leases_len;
    /**
     * WAIT: the ticket that a later event resolves.
     */
    uint64_t ticket;
    /**
     * DIE: sleep at least this long before retrying.
     */
    uint64_t retry_after_ms;
    /**
     * WAIT and DIE: the blocking sessions at the time of the verdict.
     */
    const struct klock_blocker *held_by;
    size_t held_by_len;
    /**
     * DIE under the `detect` policy: the session ids of the wait-for cycle this request was
     * the victim of, this session first (SPEC.md §6.1); empty (NULL, 0) otherwise.
     */
    const uint64_t *cycle;
    size_t cycle_len;
} klock_verdict;

/**
 * The heartbeat outcome for one lease.
 */
typedef struct klock_heartbeat_result {
    uint64_t lease_id;
    /**
     * KLOCK_OK (renewed), or KLOCK_LEASE_EXPIRED, KLOCK_LEASE_RELEASED, KLOCK_NOT_OWNER,
     * KLOCK_UNKNOWN_LEASE, KLOCK_LIFETIME_EXCEEDED.
     */
    klock_status status;
    /**
     * KLOCK_OK: the new expiry; otherwise 0.
     */
    uint64_t expires_at;
} klock_heartbeat_result;

/**
 * The answer to a heartbeat: one result per lease asked about (in the order asked), or per
 * active lease for klock_lease_heartbeat_all() (in grant order). Owned by the library: free
 * with klock_heartbeat_results_free().
 */
typedef struct klock_heartbeat_results {
    const struct klock_heartbeat_result *items;
    size_t len;
} klock_heartbeat_results;

/**
 * The kernel's truth about one lease.
 */
typedef struct klock_lease_check {
    uint64_t lease_id;
    klock_lease_status status;
    /**
     * ACTIVE: the effective expiry; otherwise 0.
     */
    uint64_t expires_at;
    /**
     * ACTIVE: the lease's fence; otherwise 0.
     */
    uint64_t fence;
} klock_lease_check;

/**
 * The answer to a reconcile: one item per lease asked about, in the order asked. Owned by
 * the library: free with klock_reconcile_results_free().
 */
typedef struct klock_reconcile_results {
    const struct klock_lease_check *items;
    size_t len;
} klock_reconcile_results;

/**
 * A holder of a lease on a resource node.
 */
typedef struct klock_holder {
    uint64_t session_id;
    const char *agent_id;
    uint64_t lease_id;
    const char *resource;
    klock_predicate predicate;
    uint64_t fence;
    uint64_t expires_at;
} klock_holder;

/**
 * A queued intent on a resource node.
 */
typedef struct klock_waiter {
    uint64_t session_id;
    const char *agent_id;
    uint64_t ticket;
    klock_predicate predicate;
    /**
     * 0-based position in this node's queue.
     */
    size_t position;
    /**
     * When the wait times out.
     */
    uint64_t deadline;
} klock_waiter;

/**
 * Who holds and who waits on one resource node (SPEC.md §10). Owned by the library: free
 * with klock_resource_state_free().
 */
typedef struct klock_resource_state {
    /**
     * The normalised resource.
     */
    const char *resource;
    const char *namespace_name;
    /**
     * Holders of this exact node, by lease id.
     */
    const struct klock_holder *holders;
    size_t holders_len;
    /**
     * Queued intents on this node, in queue order.
     */
    const struct klock_waiter *waiting;
    size_t waiting_len;
    /**
     * Holders on ancestors and descendants that overlap this node, by lease id.
     */
    const struct klock_holder *covering;
    size_t covering_len;
} klock_resource_state;

/**
 * Exact counts of every outcome since the kernel was created.
 */
typedef struct klock_counters {
    uint64_t sessions_opened;
    /**
     * GRANTED verdicts plus GRANTED events.
     */
    uint64_t granted;
    /**
     * WAIT verdicts.
     */
    uint64_t waited;
    /**
     * DIE verdicts plus DIED events.
     */
    uint64_t died;
    uint64_t timed_out;
    uint64_t expired;
    /**
     * WOUNDED events.
     */
    uint64_t wounded;
    uint64_t released;
    uint64_t cancelled;
    uint64_t idle_closed;
    /**
     * Waiters withdrawn because the waiting order was about to break (always 0 by design).
     */
    uint64_t defensive_repairs;
} klock_counters;

/**
 * A resource and how often requests for it were blocked (WAIT or DIE).
 */
typedef struct klock_contention {
    const char *namespace_name;
    const char *resource;
    uint64_t blocked;
} klock_contention;

/**
 * An agent whose leases expired or whose waits timed out ("ghost agents").
 */
typedef struct klock_ghost_agent {
    const char *agent_id;
    uint64_t expired_leases;
    uint64_t wait_timeouts;
} klock_ghost_agent;

/**
 * Observability counters (SPEC.md §10). Owned by the library: free with klock_stats_free().
 */
typedef struct klock_stats {
    struct klock_counters counters;
    uint64_t active_sessions;
    uint64_t active_leases;
    uint64_t waiting_tickets;
    /**
     * Most blocked first (bounded table).
     */
    const struct klock_contention *top_contended;
    size_t top_contended_len;
    /**
     * Most expiries + timeouts first (bounded table).
     */
    const struct klock_ghost_agent *ghost_agents;
    size_t ghost_agents_len;
} klock_stats;

/**
 * How klock_remote_connect_with() connects. Start from
 * klock_remote_connect_options_default(); owned by the caller and only read during the call.
 */
typedef struct klock_remote_connect_options {
    /**
     * The bearer token to show (NUL-terminated); NULL = `$KLOCK_TOKEN` if set, else none.
     */
    const char *token;
    /**
     * The PEM certificates to trust for `https://` (the client carries no system trust
     * store); NULL = `$KLOCK_CA` if set.
     */
    const char *ca_path;
    /**
     * Every call's budget (at least 1; default 30 000): how long a call tries an unreachable
     * server, pauses included, before it fails with KLOCK_UNREACHABLE. A wait the server
     * holds has that long more. Held leases are lost at their local deadline meanwhile.
     */
    uint64_t reconnect_timeout_ms;
} klock_remote_connect_options;

/**
 * How klock_remote_acquire() asks. Start from klock_remote_acquire_options_default(); owned
 * by the caller and only read during the call.
 */
typedef struct klock_remote_acquire_options {
    /**
     * The TTL of each lease (at least 1): how long the server keeps it after the last renewal
     * reached it. The client renews it every third of it.
     */
    uint64_t ttl_ms;
    /**
     * Whether `timeout_ms` is given; false = no client-side limit: wait until granted.
     */
    bool has_timeout_ms;
    /**
     * The budget of the whole acquisition, waits and Wait-Die backoffs included; 0 is a
     * try-lock. Past it: KLOCK_TIMEOUT.
     */
    uint64_t timeout_ms;
} klock_remote_acquire_options;

/**
 * The grant behind a klock_remote_lease, written into a struct the caller owns. The pointers
 * are the lease handle's: valid until klock_remote_lease_free(), read-only.
 */
typedef struct klock_remote_grant {
    /**
     * The largest fence of the grant: strictly larger than every earlier grant's of these
     * resources; a store must refuse writes carrying a smaller one.
     */
    uint64_t fence;
    /**
     * One lease per intent, in the server's order. Their times (`acquired_at`,
     * `expires_at`) are the server's clock as of the grant; renewals move the expiry on.
     */
    const struct klock_lease *leases;
    size_t leases_len;
} klock_remote_grant;

/**
 * Older requesters wait, younger ones die (the default).
 */
#define KLOCK_POLICY_WAIT_DIE 0

/**
 * Older requesters revoke ("wound") younger blockers; younger requesters wait.
 */
#define KLOCK_POLICY_WOUND_WAIT 1

/**
 * One all-or-nothing FIFO lane per request; a session holds or waits, never both.
 */
#define KLOCK_POLICY_LANES 2

/**
 * Everyone waits; only a cycle of waiters is broken, by its youngest unit of work (SPEC.md
 * §6.1).
 */
#define KLOCK_POLICY_DETECT 3

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Writes the SPEC.md defaults into `*out_config` (policy wait_die, seed 0, TTL 60 000 ms capped at
 * 300 000 ms, wait timeout 30 000 ms, backoff 100 ms up to 10 000 ms, grace 15 000 ms, idle
 * close after 300 000 ms, 1 024 leases per session, no lifetime cap).
 *
 * Errors: KLOCK_NULL_POINTER. Ownership: `*out_config` is the caller's. Thread-safety: any
 * thread.
 *
 * # Safety
 * `out_config` must be NULL or point to a writable klock_config.
 */
klock_status klock_config_default(struct klock_config *out_config);

/**
 * Writes the default acquire options into `*out_options`: the kernel's default TTL, `wait = true`,
 * the kernel's default wait timeout. Passing NULL options to klock_session_acquire() means
 * the same.
 *
 * Errors: KLOCK_NULL_POINTER. Ownership: `*out_options` is the caller's. Thread-safety: any
 * thread.
 *
 * # Safety
 * `out_options` must be NULL or point to a writable klock_acquire_options.
 */
klock_status klock_acquire_options_default(struct klock_acquire_options *out_options);

/**
 * Sets the numeric field called `name` of `*config` (the snake_case name of a klock_config
 * field other than `policy`, e.g. "default_ttl_ms") to `value`: for configurations read from
 * text. The names are the kernel's own list.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_CONFIG (no numeric field is
 * called `name`; the message lists them). On failure `*config` is unchanged. Thread-safety:
 * any thread.
 *
 * # Safety
 * `config` must be NULL or point to a writable klock_config; `name` NULL or NUL-terminated.
 */
klock_status klock_config_set_number(struct klock_config *config, const char *name, uint64_t value);

/**
 * Sets `config->policy` from its configuration name ("wait_die", "wound_wait", "lanes" or
 * "detect").
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_CONFIG (another name). On
 * failure `*config` is unchanged. Thread-safety: any thread.
 *
 * # Safety
 * `config` must be NULL or point to a writable klock_config; `name` NULL or NUL-terminated.
 */
klock_status klock_config_set_policy(struct klock_config *config, const char *name);

/**
 * Creates a kernel with `config` (copied) and stores its handle in `*out_kernel`.
 *
 * Errors: KLOCK_NULL_POINTER (`config` or `out_kernel`), KLOCK_INVALID_CONFIG (an unknown
 * policy, a zero `default_ttl_ms` or `max_ttl_ms`). On failure `*out_kernel` is NULL.
 *
 * Ownership: the handle is the caller's; free it with klock_kernel_free(). Thread-safety:
 * any thread.
 *
 * # Safety
 * `config` must be NULL or point to a klock_config; `out_kernel` NULL or writable.
 */
klock_status klock_kernel_new(const struct klock_config *config, struct klock_kernel **out_kernel);

/**
 * Frees a kernel and everything it holds. NULL is a no-op.
 *
 * Thread-safety: must not race with any other call on the same handle; afterwards the handle
 * must not be used (freeing twice is undefined behaviour, as with free()).
 *
 * # Safety
 * `kernel` must be NULL or a live handle from klock_kernel_new().
 */
void klock_kernel_free(struct klock_kernel *kernel);

/**
 * Creates an independent kernel in the same state as `kernel` (same configuration, sessions,
 * leases, queues, clock, counters, jitter state and queued events), e.g. to explore "what if"
 * from a state without touching it.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_kernel` is NULL on failure.
 * Ownership: the new handle is the caller's; free it with klock_kernel_free(). Thread-safety:
 * any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_kernel` NULL or writable.
 */
klock_status klock_kernel_clone(const struct klock_kernel *kernel,
                                struct klock_kernel **out_kernel);

/**
 * Copies the kernel's configuration into `*out_config`.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_config` NULL or writable.
 */
klock_status klock_kernel_config(const struct klock_kernel *kernel,
                                 struct klock_config *out_config);

/**
 * The earliest pending deadline (a lease expiry, a wait timeout, an idle close): arm one timer
 * for it and call klock_kernel_advance() when it fires. A pure query (no `now`); the deadline
 * may already be past if no call has settled it yet, in which case call advance at once.
 *
 * `*out_has_deadline` is false when nothing is pending (then `*out_deadline` is 0).
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; the out-pointers NULL or writable.
 */
klock_status klock_kernel_next_deadline(const struct klock_kernel *kernel,
                                        bool *out_has_deadline,
                                        uint64_t *out_deadline);

/**
 * Settles everything due at or before `now` (expiries, wait timeouts, the grants they
 * unblock, idle closes) and queues the resulting events. Calling early is harmless.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle.
 */
klock_status klock_kernel_advance(struct klock_kernel *kernel, uint64_t now);

/**
 * Takes the oldest queued event: `*out_event` is the event, or NULL when there is none.
 * Drain after every call until it gives NULL.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_event` is NULL on failure.
 * Ownership: the event is the caller's; free it with klock_event_free(). Thread-safety: any
 * thread (each event is handed to exactly one caller).
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_event` NULL or writable.
 */
klock_status klock_kernel_poll_event(struct klock_kernel *kernel, struct klock_event **out_event);

/**
 * How many events wait to be polled.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_count` NULL or writable.
 */
klock_status klock_kernel_pending_events(const struct klock_kernel *kernel, size_t *out_count);

/**
 * The largest `now` the kernel has seen (time never goes back inside the kernel).
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_now` NULL or writable.
 */
klock_status klock_kernel_now(const struct klock_kernel *kernel, uint64_t *out_now);

/**
 * Opens a session for `agent_id` in `namespace_name` (NULL = "default"). The kernel assigns
 * the id and the priority (older = smaller = higher priority; kept for life).
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`, `agent_id`, `out_session`), KLOCK_INVALID_UTF8,
 * KLOCK_INVALID_AGENT_ID / KLOCK_INVALID_NAMESPACE (not 1..=256 bytes of printable UTF-8),
 * KLOCK_PANIC (poisoned). Ownership: `*out_session` is the caller's. Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; strings NULL or NUL-terminated; `out_session` NULL
 * or writable.
 */
klock_status klock_session_open(struct klock_kernel *kernel,
                                const char *agent_id,
                                const char *namespace_name,
                                uint64_t now,
                                struct klock_session_info *out_session);

/**
 * Closes a session: releases every lease and cancels every wait (the grants this unblocks
 * are queued as events; no SESSION_CLOSED event is emitted for an explicit close). Closing
 * again answers KLOCK_UNKNOWN_SESSION.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned). Thread-safety:
 * any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle.
 */
klock_status klock_session_close(struct klock_kernel *kernel, uint64_t session_id, uint64_t now);

/**
 * Marks a session as restarting: its leases are kept past a missed heartbeat for the
 * configured `grace_ms` (within their lifetime cap) until it resumes or heartbeats.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned). Thread-safety:
 * any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle.
 */
klock_status klock_session_suspend(struct klock_kernel *kernel, uint64_t session_id, uint64_t now);

/**
 * The session's recovery digest, to be saved by the agent and handed to
 * klock_session_resume() after a restart.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_digest` is
 * NULL on failure. Ownership: the digest is the caller's; free it with klock_digest_free().
 * Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_digest` NULL or writable.
 */
klock_status klock_session_digest(struct klock_kernel *kernel,
                                  uint64_t session_id,
                                  uint64_t now,
                                  struct klock_digest **out_digest);

/**
 * Re-attaches a restarted agent to its session: same priority, epoch + 1, suspension ended,
 * every lease renewed as a heartbeat would. `digest` is read only (it may be one the caller
 * built itself, e.g. from klock_digest_from_json() or its own storage).
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`, `digest`, its `agent_id` or `namespace_name`,
 * `out_session`), KLOCK_INVALID_UTF8, KLOCK_UNKNOWN_SESSION (closed or unknown session),
 * KLOCK_INVALID_DIGEST (version, agent, namespace or priority differ from the kernel's record,
 * or the epoch is newer), KLOCK_PANIC (poisoned). Ownership: `*out_session` is the caller's.
 * Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `digest` NULL or a valid klock_digest;
 * `out_session` NULL or writable.
 */
klock_status klock_session_resume(struct klock_kernel *kernel,
                                  const struct klock_digest *digest,
                                  uint64_t now,
                                  struct klock_session_info *out_session);

/**
 * Serialises a digest as JSON text (the KLIS-8 shape: version, identity, recovery), for
 * storage.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8; `*out_json` is NULL on failure.
 * Ownership: `digest` stays the caller's; the text is the caller's, free it with
 * klock_string_free(). Thread-safety: any thread.
 *
 * # Safety
 * `digest` must be NULL or a valid klock_digest; `out_json` NULL or writable.
 */
klock_status klock_digest_to_json(const struct klock_digest *digest, char **out_json);

/**
 * Parses a digest from JSON text made by klock_digest_to_json(), strictly: exactly the keys
 * that function writes, integers without fraction or exponent, no trailing text.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_ARGUMENT (not a digest's
 * JSON: syntax, a missing or unknown key, a wrong type, a number out of range; the message
 * says where), KLOCK_INVALID_DIGEST (an agent_id or namespace holding NUL, which no session
 * has and a C string cannot hold: never cut short); `*out_digest` is NULL on failure.
 * Ownership: the digest is the caller's; free it with klock_digest_free(). Thread-safety: any
 * thread.
 *
 * # Safety
 * `json` must be NULL or NUL-terminated; `out_digest` NULL or writable.
 */
klock_status klock_digest_from_json(const char *json, struct klock_digest **out_digest);

/**
 * Asks for every intent at once (all-or-nothing). Each intent is "PREDICATE TYPE:/path"
 * (predicate case-insensitive), e.g. "MUTATES FILE:/src/a.ts". `options` NULL = defaults.
 *
 * The verdict is GRANTED (leases), WAIT (a ticket a later event resolves; drain events and
 * drive klock_kernel_advance()) or DIE (retry after `retry_after_ms`, keeping the session).
 *
 * Errors, in this order: KLOCK_NULL_POINTER (`kernel`, `out_verdict`, `intents` with a
 * non-zero length, an intent), KLOCK_INVALID_UTF8, then the kernel's KLOCK_UNKNOWN_SESSION,
 * KLOCK_INVALID_MANIFEST (0 or more than 256 intents), KLOCK_INVALID_PREDICATE,
 * KLOCK_INVALID_RESOURCE, KLOCK_INVALID_TTL, KLOCK_HOLD_AND_WAIT, KLOCK_QUOTA_EXCEEDED, and
 * KLOCK_PANIC (poisoned). A failed acquire changes nothing; `*out_verdict` is NULL.
 *
 * Ownership: `intents` and `options` stay the caller's; the verdict is the caller's, free it
 * with klock_verdict_free(). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `intents` NULL or `intents_len` pointers, each NULL
 * or NUL-terminated; `options` NULL or valid; `out_verdict` NULL or writable.
 */
klock_status klock_session_acquire(struct klock_kernel *kernel,
                                   uint64_t session_id,
                                   const char *const *intents,
                                   size_t intents_len,
                                   const struct klock_acquire_options *options,
                                   uint64_t now,
                                   struct klock_verdict **out_verdict);

/**
 * Renews the given leases of the session for their TTL from `now`, each answered separately
 * (KLOCK_OK with the new expiry, or KLOCK_LEASE_EXPIRED, KLOCK_LEASE_RELEASED,
 * KLOCK_NOT_OWNER, KLOCK_UNKNOWN_LEASE, KLOCK_LIFETIME_EXCEEDED). An ended lease is never
 * resurrected.
 *
 * Errors (of the call): KLOCK_NULL_POINTER (`kernel`, `out_results`, `lease_ids` with a
 * non-zero length), KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_results` is NULL on
 * failure. Ownership: `lease_ids` stays the caller's; the results are the caller's, free them
 * with klock_heartbeat_results_free(). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `lease_ids` NULL or `lease_ids_len` values;
 * `out_results` NULL or writable.
 */
klock_status klock_lease_heartbeat(struct klock_kernel *kernel,
                                   uint64_t session_id,
                                   const uint64_t *lease_ids,
                                   size_t lease_ids_len,
                                   uint64_t now,
                                   struct klock_heartbeat_results **out_results);

/**
 * Renews every active lease of the session (results in grant order); otherwise as
 * klock_lease_heartbeat().
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_results` NULL or writable.
 */
klock_status klock_lease_heartbeat_all(struct klock_kernel *kernel,
                                       uint64_t session_id,
                                       uint64_t now,
                                       struct klock_heartbeat_results **out_results);

/**
 * Releases one lease of the session. Idempotent: `*out_released` (may be NULL) is true if this
 * call released it, false if it had already ended (released, expired, wounded). Waiters this
 * unblocks are granted and queued as events.
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`), KLOCK_UNKNOWN_SESSION, KLOCK_NOT_OWNER (another
 * session's lease, checked first), KLOCK_UNKNOWN_LEASE, KLOCK_PANIC (poisoned).
 * Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_released` NULL or writable.
 */
klock_status klock_lease_release(struct klock_kernel *kernel,
                                 uint64_t session_id,
                                 uint64_t lease_id,
                                 uint64_t now,
                                 bool *out_released);

/**
 * Releases every active lease of the session (its waits are kept); `*out_count` (may be
 * NULL) receives how many.
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`), KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned).
 * Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_count` NULL or writable.
 */
klock_status klock_session_release_all(struct klock_kernel *kernel,
                                       uint64_t session_id,
                                       uint64_t now,
                                       size_t *out_count);

/**
 * The kernel's truth about each lease, from the session's point of view: ACTIVE (with
 * `expires_at` and `fence`), EXPIRED, RELEASED, NOT_OWNER or UNKNOWN, in the order asked.
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`, `out_results`, `lease_ids` with a non-zero length),
 * KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_results` is NULL on failure.
 * Ownership: the results are the caller's; free them with klock_reconcile_results_free().
 * Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `lease_ids` NULL or `lease_ids_len` values;
 * `out_results` NULL or writable.
 */
klock_status klock_lease_reconcile(struct klock_kernel *kernel,
                                   uint64_t session_id,
                                   const uint64_t *lease_ids,
                                   size_t lease_ids_len,
                                   uint64_t now,
                                   struct klock_reconcile_results **out_results);

/**
 * Withdraws a waiting ticket of the session (cancel_wait).
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_NOT_OWNER (another session's
 * ticket, checked first), KLOCK_UNKNOWN_TICKET (not waiting any more, or never issued),
 * KLOCK_PANIC (poisoned). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle.
 */
klock_status klock_ticket_cancel(struct klock_kernel *kernel,
                                 uint64_t session_id,
                                 uint64_t ticket,
                                 uint64_t now);

/**
 * Holders and queue of one resource node in `namespace_name` (NULL = "default"), and the
 * holders covering it from its ancestors and descendants.
 *
 * Errors: KLOCK_NULL_POINTER (`kernel`, `resource`, `out_state`), KLOCK_INVALID_UTF8,
 * KLOCK_INVALID_RESOURCE, KLOCK_INVALID_NAMESPACE, KLOCK_PANIC (poisoned); `*out_state` is
 * NULL on failure. Ownership: the state is the caller's; free it with
 * klock_resource_state_free(). Thread-safety: any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; strings NULL or NUL-terminated; `out_state` NULL or
 * writable.
 */
klock_status klock_resource_get_state(struct klock_kernel *kernel,
                                      const char *resource,
                                      const char *namespace_name,
                                      uint64_t now,
                                      struct klock_resource_state **out_state);

/**
 * Outcome counters, live totals, top contended resources and ghost agents, as of the last
 * call (a pure query: no `now`).
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_stats` is NULL on failure.
 * Ownership: the stats are the caller's; free them with klock_stats_free(). Thread-safety:
 * any thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_stats` NULL or writable.
 */
klock_status klock_kernel_stats(const struct klock_kernel *kernel, struct klock_stats **out_stats);

/**
 * The whole state after settling `now` (sessions, leases, tickets, stats, next deadline), as
 * one JSON object for dashboards. Settling may queue events: drain them afterwards.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_json` is NULL on failure.
 * Ownership: the text is the caller's; free it with klock_string_free(). Thread-safety: any
 * thread.
 *
 * # Safety
 * `kernel` must be NULL or a live handle; `out_json` NULL or writable.
 */
klock_status klock_kernel_snapshot_json(struct klock_kernel *kernel, uint64_t now, char **out_json);

/**
 * The canonical name of a predicate ("PROVIDES", ..., "RENAMES"), or "UNKNOWN" for a number
 * that is not one. Static: never free it. Thread-safety: any thread.
 */
const char *klock_predicate_name(uint32_t predicate);

/**
 * The name of a verdict kind ("GRANTED", "WAIT", "DIE"), or "UNKNOWN". Static: never free it.
 * Thread-safety: any thread.
 */
const char *klock_verdict_kind_name(uint32_t kind);

/**
 * The name of an event kind ("GRANTED", "WAIT_TIMEOUT", "DIED", "LEASE_EXPIRED", "WOUNDED",
 * "SESSION_CLOSED"), or "UNKNOWN". Static: never free it. Thread-safety: any thread.
 */
const char *klock_event_kind_name(uint32_t kind);

/**
 * The name of a reconcile status ("ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN"),
 * or "UNKNOWN" for a number that is not one. Static: never free it. Thread-safety: any thread.
 */
const char *klock_lease_status_name(uint32_t status);

/**
 * The name of the reason in a SESSION_CLOSED event ("IDLE"), or "UNKNOWN" for a number that
 * is not a reason (KLOCK_CLOSE_REASON_NONE included). Static: never free it. Thread-safety:
 * any thread.
 */
const char *klock_close_reason_name(uint32_t reason);

/**
 * The configuration name of a policy ("wait_die", "wound_wait", "lanes", "detect"), or
 * "unknown".
 * Static: never free it. Thread-safety: any thread.
 */
const char *klock_policy_name(uint32_t policy);

/**
 * Writes the default options into `*out_options`: no token or CA file given (the
 * environment's, if set) and a 30 000 ms budget. klock_remote_connect() uses them with its
 * token and CA file.
 *
 * Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
 *
 * # Safety
 * `out_options` must be NULL or point to a writable klock_remote_connect_options.
 */
klock_status klock_remote_connect_options_default(struct klock_remote_connect_options *out_options);

/**
 * Connects to the `klock serve` at `url` (`http://HOST:PORT`, or `https://HOST:PORT` with
 * `ca_path`) showing the bearer `token`, and stores the client in `*out_client`: what
 * klock_remote_connect_with() does with the default options and this token and CA file.
 *
 * `token`: NULL = `$KLOCK_TOKEN` if set, else none. `ca_path`: the PEM certificates to trust
 * for `https://` (the client carries no system trust store); NULL = `$KLOCK_CA` if set.
 *
 * Errors, ownership and thread-safety: as klock_remote_connect_with().
 *
 * # Safety
 * `url`, `token` and `ca_path` must be NULL or NUL-terminated; `out_client` NULL or writable.
 */
klock_status klock_remote_connect(const char *url,
                                  const char *token,
                                  const char *ca_path,
                                  struct klock_remote_client **out_client);

/**
 * Connects to the `klock serve` at `url` (`http://HOST:PORT`, or `https://HOST:PORT` with
 * the options' `ca_path`) as `options` say, and stores the client in `*out_client`. One
 * authenticated read is made, so an unreachable server or a refused token fails here, not
 * at the first acquire. The client starts one thread of its own (its runtime), which renews
 * leases and reads the server's events.
 *
 * `options`: NULL = klock_remote_connect_options_default().
 *
 * Errors: KLOCK_NULL_POINTER (`url`, `out_client`), KLOCK_INVALID_UTF8, KLOCK_BAD_URL (a URL
 * that is not `http(s)://HOST:PORT`), KLOCK_INVALID_ARGUMENT (a `reconnect_timeout_ms` of 0,
 * a CA file that cannot be used), KLOCK_UNREACHABLE (within the budget), KLOCK_REFUSED
 * (`UNAUTHORIZED`: a missing or wrong token). On failure `*out_client` is NULL and no thread
 * is left running.
 *
 * Ownership: the handle is the caller's; free it with klock_remote_client_free().
 * Thread-safety: any thread.
 *
 * # Safety
 * `url` must be NULL or NUL-terminated; `options` NULL or readable, its strings NULL or
 * NUL-terminated; `out_client` NULL or writable.
 */
klock_status klock_remote_connect_with(const char *url,
                                       const struct klock_remote_connect_options *options,
                                       struct klock_remote_client **out_client);

/**
 * Frees a client. Its sessions and leases stay usable (they share its connections and
 * runtime); the runtime's thread ends when the last of them is freed.
 *
 * NULL is a no-op. Thread-safety: must not race with another use of the same handle.
 *
 * # Safety
 * `client` must be NULL or a handle from klock_remote_connect() not freed yet.
 */
void klock_remote_client_free(struct klock_remote_client *client);

/**
 * Opens a session for `agent_id` in `namespace` (NULL = "default") and stores it in
 * `*out_session`. Sessions are the unit of priority (Wait-Die: an older session waits, a
 * younger one dies).
 *
 * Errors: KLOCK_NULL_POINTER (`client`, `agent_id`, `out_session`), KLOCK_INVALID_UTF8,
 * KLOCK_INVALID_AGENT_ID and KLOCK_INVALID_NAMESPACE (the server's refusal),
 * KLOCK_UNREACHABLE, KLOCK_REFUSED. On failure `*out_session` is NULL.
 *
 * Ownership: the handle is the caller's; free it with klock_remote_session_free().
 * Thread-safety: any thread.
 *
 * # Safety
 * `client` must be NULL or a live client; `agent_id` and `namespace_name` NULL or
 * NUL-terminated; `out_session` NULL or writable.
 */
klock_status klock_remote_session_open(const struct klock_remote_client *client,
                                       const char *agent_id,
                                       const char *namespace_name,
                                       struct klock_remote_session **out_session);

/**
 * Writes the session's id on the server into `*out_id`.
 *
 * Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
 *
 * # Safety
 * `session` must be NULL or a live session; `out_id` NULL or writable.
 */
klock_status klock_remote_session_id(const struct klock_remote_session *session, uint64_t *out_id);

/**
 * Closes the session on the server: every lease released, every wait withdrawn. Its lease
 * handles then report KLOCK_LEASE_LOST (`SESSION_CLOSED`) and release nothing when freed.
 * The handle must still be freed with klock_remote_session_free().
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_UNREACHABLE, KLOCK_UNKNOWN_SESSION (closed already, or
 * closed by the server for idleness). Thread-safety: any thread.
 *
 * # Safety
 * `session` must be NULL or a live session.
 */
klock_status klock_remote_session_close(const struct klock_remote_session *session);

/**
 * Frees a session handle. When no lease of it is held any more and it was not closed, it is
 * closed on the server first (blocking, bounded by the request's time limit; a server that
 * cannot be reached lets its leases end at their TTL).
 *
 * NULL is a no-op. Thread-safety: must not race with another use of the same handle.
 *
 * # Safety
 * `session` must be NULL or a handle from klock_remote_session_open() not freed yet.
 */
void klock_remote_session_free(struct klock_remote_session *session);

/**
 * Writes the default options into `*out_options`: a 60 000 ms TTL and no timeout (wait until
 * granted). NULL options to klock_remote_acquire() mean the same.
 *
 * Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
 *
 * # Safety
 * `out_options` must be NULL or point to a writable klock_remote_acquire_options.
 */
klock_status klock_remote_acquire_options_default(struct klock_remote_acquire_options *out_options);

/**
 * Acquires every intent (`"PREDICATE TYPE:/path"`, like `"MUTATES FILE:/src/app.rs"`) at
 * once, blocking until granted or refused, and stores the grant in `*out_lease`. While
 * waiting the client follows the server's events and the kernel's backoff; once granted it
 * renews the leases in the background until they are released or the handle is freed.
 *
 * `options`: NULL = klock_remote_acquire_options_default(). `out_retry_after_ms` (may be
 * NULL) receives, on KLOCK_DIED, how long to wait before asking again (the kernel's backoff:
 * never compute it yourself), and 0 otherwise.
 *
 * Errors: KLOCK_NULL_POINTER (`session`, `intents` with a length, an intent, `out_lease`),
 * KLOCK_INVALID_UTF8, KLOCK_INVALID_ARGUMENT (no intent, one the kernel cannot read, a TTL of
 * 0, a closed session), KLOCK_DIED (Wait-Die refused it while this session holds other
 * leases: free or release them, wait `*out_retry_after_ms`, ask again for everything),
 * KLOCK_TIMEOUT (the timeout passed first; the message names the holders), the server's
 * refusal (its kernel status, or KLOCK_REFUSED), KLOCK_UNREACHABLE. On failure `*out_lease`
 * is NULL.
 *
 * Ownership: the handle is the caller's; free it with klock_remote_lease_free().
 * Thread-safety: any thread; concurrent acquires on one session are allowed.
 *
 * # Safety
 * `session` must be NULL or a live session; `intents` NULL or `intents_len` pointers, each
 * NULL or NUL-terminated; `options` NULL or readable; `out_lease` NULL or writable;
 * `out_retry_after_ms` NULL or writable.
 */
klock_status klock_remote_acquire(const struct klock_remote_session *session,
                                  const char *const *intents,
                                  size_t intents_len,
                                  const struct klock_remote_acquire_options *options,
                                  struct klock_remote_lease **out_lease,
                                  uint64_t *out_retry_after_ms);

/**
 * Writes the grant (its fence and leases) into `*out_grant`; its pointers belong to the lease
 * handle and stay valid until klock_remote_lease_free(), released or not.
 *
 * Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
 *
 * # Safety
 * `lease` must be NULL or a live lease; `out_grant` NULL or writable.
 */
klock_status klock_remote_lease_grant(const struct klock_remote_lease *lease,
                                      struct klock_remote_grant *out_grant);

/**
 * Whether the leases are still held: KLOCK_OK while they are and no loss was reported;
 * KLOCK_LEASE_LOST once (some of) them were lost (the message names the reason:
 * `LEASE_EXPIRED`, also when no renewal was answered before the lease's local deadline,
 * `WOUNDED`, `SESSION_CLOSED`, `LEASE_RELEASED`, ...): stop acting on them; KLOCK_LEASE_RELEASED
 * after klock_remote_lease_release(). Asks the server nothing: the client's background
 * renewals and event stream decide.
 *
 * Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
 *
 * # Safety
 * `lease` must be NULL or a live lease.
 */
klock_status klock_remote_lease_check(const struct klock_remote_lease *lease);

/**
 * Releases the leases now (blocking) and stops renewing them. The handle stays readable
 * (klock_remote_lease_grant()) and must still be freed.
 *
 * Errors: KLOCK_NULL_POINTER, KLOCK_LEASE_RELEASED (released already), KLOCK_UNREACHABLE,
 * the server's refusal (KLOCK_UNKNOWN_SESSION: the session is gone, its leases with it).
 * Whatever the outcome, the handle no longer holds the leases.
 * Thread-safety: any thread.
 *
 * # Safety
 * `lease` must be NULL or a live lease.
 */
klock_status klock_remote_lease_release(const struct klock_remote_lease *lease);

/**
 * Frees a lease handle; leases still held are released first (blocking, bounded by the
 * request's time limit; a server that cannot be reached lets them end at their TTL).
 *
 * NULL is a no-op. Thread-safety: must not race with another use of the same handle.
 *
 * # Safety
 * `lease` must be NULL or a handle from klock_remote_acquire() not freed yet.
 */
void klock_remote_lease_free(struct klock_remote_lease *lease);

/**
 * The stable upper-case name of a status code ("OK", "INVALID_RESOURCE", ..., "PANIC"), or
 * "UNKNOWN_STATUS" for a number that is not a status.
 *
 * Ownership: the returned string is static; never free it. Thread-safety: any thread.
 * Does not touch the per-thread error message.
 */
const char *klock_status_name(uint32_t status);

/**
 * The status of the last call on this thread that set one: the failing call's status, or
 * KLOCK_OK after a success.
 *
 * Thread-safety: per thread. Does not change the stored message.
 */
klock_status klock_last_error_status(void);

/**
 * Copies the message of the last failed call on this thread ("" after a success) into
 * `buffer` of `buffer_len` bytes, always NUL-terminated when `buffer_len > 0`. A message
 * that does not fit is truncated at a UTF-8 character boundary.
 *
 * `required` (may be NULL) receives the size needed for the whole message, NUL included.
 * Returns KLOCK_OK when it fit, KLOCK_BUFFER_TOO_SMALL when truncated (`buffer` may be NULL
 * with `buffer_len` 0 to ask for the size only), KLOCK_NULL_POINTER when `buffer` is NULL
 * but `buffer_len` is not 0.
 *
 * Ownership: `buffer` is the caller's. Thread-safety: per thread. Reading the message does
 * not change it (not even on KLOCK_BUFFER_TOO_SMALL).
 *
 * # Safety
 * `buffer` must be NULL or point to `buffer_len` writable bytes; `required` must be NULL or
 * point to a writable `size_t`.
 */
klock_status klock_last_error_message(char *buffer, size_t buffer_len, size_t *required);

/**
 * The version of the library, e.g. "0.1.0".
 *
 * Ownership: static; never free it. Thread-safety: any thread.
 */
const char *klock_version(void);

/**
 * Frees a verdict from klock_session_acquire() and everything it points to.
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_verdict_free(struct klock_verdict *value);

/**
 * Frees an event from klock_kernel_poll_event() and everything it points to.
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_event_free(struct klock_event *value);

/**
 * Frees heartbeat results from klock_lease_heartbeat() or klock_lease_heartbeat_all().
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_heartbeat_results_free(struct klock_heartbeat_results *value);

/**
 * Frees reconcile results from klock_lease_reconcile().
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_reconcile_results_free(struct klock_reconcile_results *value);

/**
 * Frees a resource state from klock_resource_get_state().
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_resource_state_free(struct klock_resource_state *value);

/**
 * Frees a digest from klock_session_digest() or klock_digest_from_json(); never pass a
 * digest the caller built itself.
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_digest_free(struct klock_digest *value);

/**
 * Frees statistics from klock_kernel_stats().
 *
 * NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
 *
 * # Safety
 * `value` must be NULL or a result returned by this library and not freed yet.
 */
void klock_stats_free(struct klock_stats *value);

/**
 * Frees a string returned by this library (klock_kernel_snapshot_json(),
 * klock_digest_to_json()).
 *
 * NULL is a no-op. Thread-safety: any thread.
 *
 * # Safety
 * The pointer must be NULL or a string returned by this library and not freed yet.
 */
void klock_string_free(char *text);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* KLOCK_H */
