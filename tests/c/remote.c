/*
 * The remote client of libklock (klock_remote_*) against a real `klock serve`, run by
 * scripts/test-c.sh under valgrind:
 *
 *   remote URL TOKEN UNREACHABLE_URL [TLS_URL CA_FILE]
 *
 * URL is a `klock serve --memory --tokens FILE` on a loopback port that accepts TOKEN (in the
 * namespaces "default" and "team-b"); UNREACHABLE_URL is a loopback port where nothing listens;
 * TLS_URL the same server's HTTPS twin, whose self-signed certificate is CA_FILE.
 * Checks, each printing "ok NAME" or "FAIL NAME: why" (exit 1 on any failure):
 * bad input (NULL pointers, bad UTF-8, a bad URL, no token, an unreachable server, bad intents,
 * a TTL of 0, a bad agent id, a namespace the token does not cover): a named status and a message starting with its name, out-pointers
 * NULL; klock_remote_connect_with()'s options (the defaults, a budget of 0 refused, an
 * unreachable server given up on within a 300 ms budget); two clients contending for one
 * resource (the second waits, and gets it with a higher fence once the first releases);
 * TIMEOUT and DIED told apart; a lease kept past its TTL by the client's renewals; namespaces;
 * release and close told to the lease handle; HTTPS trusted through the CA file only.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "klock.h"

static int failures = 0;
static const char *url, *token, *unreachable;

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static const char *last_message(void) {
    static char message[1024];
    klock_last_error_message(message, sizeof message, NULL);
    return message;
}

/* Checks that `got` is `want` and that the message of a failure starts with the stable name
 * `name` (NULL: do not check the message). */
static bool expect(const char *check, klock_status got, klock_status want, const char *name) {
    const char *message = last_message();
    if (got != want) {
        printf("FAIL %s: got %s, want %s (%s)\n", check, klock_status_name(got), klock_status_name(want), message);
        failures++;
        return false;
    }
    if (name && strncmp(message, name, strlen(name)) != 0) {
        printf("FAIL %s: the message does not start with %s: %s\n", check, name, message);
        failures++;
        return false;
    }
    printf("ok %s\n", check);
    return true;
}

/* Stops the program: a step everything after it needs did not happen. */
static void require(const char *check, klock_status got) {
    if (!expect(check, got, KLOCK_OK, NULL)) exit(1);
}

static klock_remote_client *connect_or_die(void) {
    klock_remote_client *client = NULL;
    require("connect", klock_remote_connect(url, token, NULL, &client));
    return client;
}

static klock_remote_session *open_or_die(klock_remote_client *client, const char *agent, const char *ns) {
    klock_remote_session *session = NULL;
    require("session_open", klock_remote_session_open(client, agent, ns, &session));
    return session;
}

static klock_remote_acquire_options options(uint64_t ttl_ms, bool has_timeout, uint64_t timeout_ms) {
    klock_remote_acquire_options o;
    klock_remote_acquire_options_default(&o);
    o.ttl_ms = ttl_ms;
    o.has_timeout_ms = has_timeout;
    o.timeout_ms = timeout_ms;
    return o;
}

static const char *X[] = {"MUTATES FILE:/x"};
static const char *Y[] = {"MUTATES FILE:/y"};

static uint64_t fence_of(const klock_remote_lease *lease) {
    klock_remote_grant grant;
    if (klock_remote_lease_grant(lease, &grant) != KLOCK_OK) return 0;
    return grant.fence;
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* klock_remote_connect_with(): its defaults, a budget of 0 refused, a short budget honoured. */
static void connect_options(void) {
    expect("connect_options_default: NULL", klock_remote_connect_options_default(NULL), KLOCK_NULL_POINTER, NULL);
    klock_remote_connect_options o;
    memset(&o, 0xff, sizeof o);
    require("connect_options_default", klock_remote_connect_options_default(&o));
    if (o.token != NULL || o.ca_path != NULL || o.reconnect_timeout_ms != 30000)
        printf("FAIL connect_options_default: token %p, ca_path %p, reconnect_timeout_ms %" PRIu64 "\n",
               (const void *)o.token, (const void *)o.ca_path, o.reconnect_timeout_ms),
            failures++;
    klock_remote_client *client = (klock_remote_client *)1;
    /* NULL options are the defaults: no token (KLOCK_TOKEN is not set here), so refused. */
    expect("connect_with: NULL options", klock_remote_connect_with(url, NULL, &client), KLOCK_REFUSED,
           "UNAUTHORIZED");
    if (client != NULL) printf("FAIL connect_with: a failure left *out_client set\n"), failures++;
    o.token = token;
    o.reconnect_timeout_ms = 0;
    expect("connect_with: a budget of 0", klock_remote_connect_with(url, &o, &client), KLOCK_INVALID_ARGUMENT,
           "INVALID_INPUT");
    expect("connect_with: NULL url", klock_remote_connect_with(NULL, &o, &client), KLOCK_NULL_POINTER, NULL);
    /* A short budget is every call's: an unreachable server fails within it, not within 30 s. */
    o.reconnect_timeout_ms = 300;
    long long started = now_ms();
    expect("connect_with: unreachable within a 300 ms budget", klock_remote_connect_with(unreachable, &o, &client),
           KLOCK_UNREACHABLE, "UNREACHABLE");
    long long took = now_ms() - started;
    if (took >= 10000) printf("FAIL connect_with: a 300 ms budget took %lld ms to give up\n", took), failures++;
    o.reconnect_timeout_ms = 5000;
    require("connect_with: a token and a 5000 ms budget", klock_remote_connect_with(url, &o, &client));
    klock_remote_session *session = open_or_die(client, "with-options", NULL);
    klock_remote_session_free(session);
    klock_remote_client_free(client);
}

static void bad_input(void) {
    klock_remote_client *client = (klock_remote_client *)1; /* must be overwritten with NULL */
    expect("connect: NULL url", klock_remote_connect(NULL, token, NULL, &client), KLOCK_NULL_POINTER, NULL);
    if (client != NULL) printf("FAIL connect: a failure left *out_client set\n"), failures++;
    expect("connect: NULL out_client", klock_remote_connect(url, token, NULL, NULL), KLOCK_NULL_POINTER, NULL);
    expect("connect: url not UTF-8", klock_remote_connect("http://\xff", token, NULL, &client), KLOCK_INVALID_UTF8,
           NULL);
    expect("connect: a bad URL", klock_remote_connect("ftp://127.0.0.1:1", token, NULL, &client), KLOCK_BAD_URL,
           "BAD_URL");
    expect("connect: unreachable", klock_remote_connect(unreachable, token, NULL, &client), KLOCK_UNREACHABLE,
           "UNREACHABLE");
    expect("connect: no token", klock_remote_connect(url, NULL, NULL, &client), KLOCK_REFUSED, "UNAUTHORIZED");
    expect("connect: a wrong token", klock_remote_connect(url, "wrong", NULL, &client), KLOCK_REFUSED,
           "UNAUTHORIZED");
    expect("connect: a CA file for an http:// server", klock_remote_connect(url, token, "/etc/hostname", &client),
           KLOCK_INVALID_ARGUMENT, "INVALID_INPUT");
    expect("connect: https:// with a CA file that is not there",
           klock_remote_connect("https://127.0.0.1:1", token, "/nonexistent/ca.pem", &client), KLOCK_INVALID_ARGUMENT,
           "INVALID_INPUT");
    if (client != NULL) printf("FAIL connect: a failure left *out_client set\n"), failures++;
    connect_options();

    client = connect_or_die();
    klock_remote_session *session = (klock_remote_session *)1;
    expect("session_open: NULL client", klock_remote_session_open(NULL, "a", NULL, &session), KLOCK_NULL_POINTER,
           NULL);
    if (session != NULL) printf("FAIL session_open: a failure left *out_session set\n"), failures++;
    expect("session_open: NULL agent", klock_remote_session_open(client, NULL, NULL, &session), KLOCK_NULL_POINTER,
           NULL);
    expect("session_open: an empty agent id", klock_remote_session_open(client, "", NULL, &session),
           KLOCK_INVALID_AGENT_ID, "INVALID_AGENT_ID");
    expect("session_open: a namespace the token does not cover",
           klock_remote_session_open(client, "a", "elsewhere", &session), KLOCK_REFUSED, "FORBIDDEN");
    expect("session_open: NULL out_session", klock_remote_session_open(client, "a", NULL, NULL), KLOCK_NULL_POINTER,
           NULL);
    session = open_or_die(client, "a", NULL);
    expect("session_id: NULL out", klock_remote_session_id(session, NULL), KLOCK_NULL_POINTER, NULL);
    expect("session_id: NULL session", klock_remote_session_id(NULL, &(uint64_t){0}), KLOCK_NULL_POINTER, NULL);

    klock_remote_lease *lease = (klock_remote_lease *)1;
    klock_remote_acquire_options o = options(5000, true, 1000);
    uint64_t retry = 7;
    expect("acquire: NULL session", klock_remote_acquire(NULL, X, 1, &o, &lease, &retry), KLOCK_NULL_POINTER, NULL);
    if (lease != NULL || retry != 0) printf("FAIL acquire: a failure left *out_lease or *out_retry_after_ms set\n"), failures++;
    expect("acquire: NULL intents with a length", klock_remote_acquire(session, NULL, 1, &o, &lease, NULL),
           KLOCK_NULL_POINTER, NULL);
    const char *null_intent[] = {"MUTATES FILE:/x", NULL};
    expect("acquire: a NULL intent", klock_remote_acquire(session, null_intent, 2, &o, &lease, NULL),
           KLOCK_NULL_POINTER, NULL);
    expect("acquire: no intent", klock_remote_acquire(session, NULL, 0, &o, &lease, NULL), KLOCK_INVALID_ARGUMENT,
           "INVALID_INPUT");
    const char *bad[] = {"MUTATES nowhere"};
    expect("acquire: an intent the kernel cannot read", klock_remote_acquire(session, bad, 1, &o, &lease, NULL),
           KLOCK_INVALID_ARGUMENT, "INVALID_INPUT");
    const char *not_utf8[] = {"MUTATES FILE:/\xff"};
    expect("acquire: an intent not UTF-8", klock_remote_acquire(session, not_utf8, 1, &o, &lease, NULL),
           KLOCK_INVALID_UTF8, NULL);
    klock_remote_acquire_options zero_ttl = options(0, true, 1000);
    expect("acquire: a TTL of 0", klock_remote_acquire(session, X, 1, &zero_ttl, &lease, NULL),
           KLOCK_INVALID_ARGUMENT, "INVALID_INPUT");
    expect("acquire: NULL out_lease", klock_remote_acquire(session, X, 1, &o, NULL, NULL), KLOCK_NULL_POINTER, NULL);
    if (lease != NULL) printf("FAIL acquire: a failure left *out_lease set\n"), failures++;
    expect("acquire_options_default: NULL", klock_remote_acquire_options_default(NULL), KLOCK_NULL_POINTER, NULL);
    klock_remote_acquire_options defaults;
    klock_remote_acquire_options_default(&defaults);
    if (defaults.ttl_ms != 60000 || defaults.has_timeout_ms)
        printf("FAIL default options: ttl %" PRIu64 ", has_timeout_ms %d\n", defaults.ttl_ms, defaults.has_timeout_ms),
            failures++;

    expect("lease_grant: NULL lease", klock_remote_lease_grant(NULL, &(klock_remote_grant){0}), KLOCK_NULL_POINTER,
           NULL);
    expect("lease_check: NULL lease", klock_remote_lease_check(NULL), KLOCK_NULL_POINTER, NULL);
    expect("lease_release: NULL lease", klock_remote_lease_release(NULL), KLOCK_NULL_POINTER, NULL);
    expect("session_close: NULL session", klock_remote_session_close(NULL), KLOCK_NULL_POINTER, NULL);
    klock_remote_lease_free(NULL);
    klock_remote_session_free(NULL);
    klock_remote_client_free(NULL);
    /* Freed in another order than made: each handle keeps what it needs. */
    klock_remote_client_free(client);
    klock_remote_session_free(session);
}

struct waiter {
    klock_remote_session *session;
    klock_status status;
    uint64_t fence;
    volatile bool done;
};

static void *wait_for_x(void *arg) {
    struct waiter *w = arg;
    klock_remote_acquire_options o = options(5000, true, 60000);
    klock_remote_lease *lease = NULL;
    w->status = klock_remote_acquire(w->session, X, 1, &o, &lease, NULL);
    w->fence = lease ? fence_of(lease) : 0;
    klock_remote_lease_free(lease);
    __atomic_store_n(&w->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Two clients, one resource: the second waits, and is granted with a higher fence once the
 * first releases. */
static void contention(void) {
    klock_remote_client *first = connect_or_die(), *second = connect_or_die();
    klock_remote_session *a = open_or_die(first, "first", NULL);
    klock_remote_session *b = open_or_die(second, "second", NULL);
    klock_remote_acquire_options o = options(5000, true, 10000);
    klock_remote_lease *held = NULL;
    require("first acquires X", klock_remote_acquire(a, X, 1, &o, &held, NULL));
    klock_remote_grant grant;
    require("lease_grant", klock_remote_lease_grant(held, &grant));
    if (grant.leases_len != 1 || strcmp(grant.leases[0].resource, "FILE:/x") != 0 ||
        grant.leases[0].fence != grant.fence || grant.leases[0].ttl_ms != 5000 ||
        grant.leases[0].expires_at <= grant.leases[0].acquired_at)
        printf("FAIL the grant: %zu leases, fence %" PRIu64 "\n", grant.leases_len, grant.fence), failures++;
    else
        printf("ok the grant: FILE:/x, fence %" PRIu64 ", expires %" PRIu64 " ms after its grant\n", grant.fence,
               grant.leases[0].expires_at - grant.leases[0].acquired_at);

    struct waiter w = {b, KLOCK_PANIC, 0, false};
    pthread_t thread;
    pthread_create(&thread, NULL, wait_for_x, &w);
    sleep_ms(1500);
    if (__atomic_load_n(&w.done, __ATOMIC_SEQ_CST))
        printf("FAIL the second client did not wait: %s\n", klock_status_name(w.status)), failures++;
    else
        printf("ok the second client waits while the first holds X\n");
    require("first releases X", klock_remote_lease_release(held));
    pthread_join(thread, NULL);
    if (expect("the second client is granted X after the release", w.status, KLOCK_OK, NULL) && w.fence <= grant.fence)
        printf("FAIL the second grant's fence %" PRIu64 " is not above %" PRIu64 "\n", w.fence, grant.fence), failures++;
    else
        printf("ok the second grant's fence %" PRIu64 " is above the first's %" PRIu64 "\n", w.fence, grant.fence);
    expect("lease_check after release", klock_remote_lease_check(held), KLOCK_LEASE_RELEASED, "LEASE_RELEASED");
    expect("lease_release twice", klock_remote_lease_release(held), KLOCK_LEASE_RELEASED, "LEASE_RELEASED");
    klock_remote_lease_free(held);
    klock_remote_session_free(a);
    klock_remote_session_free(b);
    klock_remote_client_free(first);
    klock_remote_client_free(second);
}

/* A conflict past the timeout is TIMEOUT; Wait-Die's refusal of a younger session holding
 * other leases is DIED, with the kernel's backoff. */
static void timeout_and_died(void) {
    klock_remote_client *client = connect_or_die();
    klock_remote_session *older = open_or_die(client, "older", NULL);
    klock_remote_session *younger = open_or_die(client, "younger", NULL);
    klock_remote_acquire_options o = options(5000, true, 300);
    klock_remote_lease *x = NULL, *y = NULL, *refused = NULL;
    require("older acquires X", klock_remote_acquire(older, X, 1, &o, &x, NULL));
    uint64_t retry = 99;
    expect("younger, holding nothing: TIMEOUT", klock_remote_acquire(younger, X, 1, &o, &refused, &retry),
           KLOCK_TIMEOUT, "TIMEOUT");
    if (refused != NULL || retry != 0) printf("FAIL TIMEOUT left a lease or a retry_after_ms\n"), failures++;
    klock_remote_acquire_options try_lock = options(5000, true, 0);
    expect("younger, try-lock: TIMEOUT", klock_remote_acquire(younger, X, 1, &try_lock, &refused, NULL),
           KLOCK_TIMEOUT, "TIMEOUT");
    require("younger acquires Y", klock_remote_acquire(younger, Y, 1, &o, &y, NULL));
    if (expect("younger, holding Y: DIED", klock_remote_acquire(younger, X, 1, &o, &refused, &retry), KLOCK_DIED,
               "DIED")) {
        if (retry == 0) printf("FAIL DIED without retry_after_ms\n"), failures++;
        else printf("ok DIED says retry after %" PRIu64 " ms\n", retry);
    }
    klock_remote_lease_free(y);
    klock_remote_lease_free(x);
    klock_remote_session_free(younger);
    klock_remote_session_free(older);
    klock_remote_client_free(client);
}

/* The client renews a held lease: it outlives its TTL several times over while this thread
 * sleeps, and nobody else can take it meanwhile. */
static void renewals(void) {
    klock_remote_client *client = connect_or_die();
    klock_remote_session *holder = open_or_die(client, "holder", NULL);
    klock_remote_session *other = open_or_die(client, "other", NULL);
    klock_remote_acquire_options short_ttl = options(1000, true, 1000);
    klock_remote_lease *held = NULL, *taken = NULL;
    require("holder acquires X with a 1000 ms TTL", klock_remote_acquire(holder, X, 1, &short_ttl, &held, NULL));
    sleep_ms(4000);
    expect("lease_check after 4 TTLs", klock_remote_lease_check(held), KLOCK_OK, NULL);
    klock_remote_acquire_options try_lock = options(5000, true, 0);
    expect("X is still held after 4 TTLs", klock_remote_acquire(other, X, 1, &try_lock, &taken, NULL), KLOCK_TIMEOUT,
           "TIMEOUT");
    /* Freeing the handle releases: the next try-lock is granted at once. */
    klock_remote_lease_free(held);
    expect("X is free once the lease handle is freed", klock_remote_acquire(other, X, 1, &try_lock, &taken, NULL),
           KLOCK_OK, NULL);
    klock_remote_lease_free(taken);
    klock_remote_session_free(other);
    klock_remote_session_free(holder);
    klock_remote_client_free(client);
}

/* One client, two namespaces: the same resource in another namespace is another resource. A
 * closed session's leases are told lost; closing twice is the server's UNKNOWN_SESSION. */
static void namespaces_and_close(void) {
    klock_remote_client *client = connect_or_die();
    klock_remote_session *here = open_or_die(client, "here", NULL);
    klock_remote_session *there = open_or_die(client, "there", "team-b");
    klock_remote_acquire_options try_lock = options(5000, true, 0);
    klock_remote_lease *a = NULL, *b = NULL;
    require("X in default", klock_remote_acquire(here, X, 1, &try_lock, &a, NULL));
    expect("X in team-b, while X in default is held", klock_remote_acquire(there, X, 1, &try_lock, &b, NULL), KLOCK_OK,
           NULL);
    uint64_t id_here = 0, id_there = 0;
    require("session_id", klock_remote_session_id(here, &id_here));
    require("session_id", klock_remote_session_id(there, &id_there));
    if (id_here == 0 || id_here == id_there) printf("FAIL session ids %" PRIu64 ", %" PRIu64 "\n", id_here, id_there), failures++;
    require("close the session in team-b", klock_remote_session_close(there));
    expect("its lease is told lost", klock_remote_lease_check(b), KLOCK_LEASE_LOST, "LEASE_LOST: SESSION_CLOSED");
    expect("close twice", klock_remote_session_close(there), KLOCK_UNKNOWN_SESSION, "UNKNOWN_SESSION");
    klock_remote_lease *again = NULL;
    expect("acquire on a closed session", klock_remote_acquire(there, X, 1, &try_lock, &again, NULL),
           KLOCK_INVALID_ARGUMENT, "INVALID_INPUT");
    klock_remote_lease_free(b);
    klock_remote_lease_free(a);
    klock_remote_session_free(there);
    klock_remote_session_free(here);
    klock_remote_client_free(client);
}

/* HTTPS: the server's certificate is trusted through ca_path, and only through it. */
static void tls(const char *tls_url, const char *ca_path) {
    klock_remote_client *client = NULL;
    expect("https:// without a CA file", klock_remote_connect(tls_url, token, NULL, &client), KLOCK_INVALID_ARGUMENT,
           "INVALID_INPUT");
    expect("https:// trusting another certificate", klock_remote_connect(tls_url, token, "/etc/hostname", &client),
           KLOCK_INVALID_ARGUMENT, "INVALID_INPUT");
    require("https:// with its CA file", klock_remote_connect(tls_url, token, ca_path, &client));
    klock_remote_session *session = open_or_die(client, "tls", NULL);
    klock_remote_acquire_options o = options(5000, true, 5000);
    klock_remote_lease *lease = NULL;
    expect("acquire over https://", klock_remote_acquire(session, X, 1, &o, &lease, NULL), KLOCK_OK, NULL);
    expect("release over https://", klock_remote_lease_release(lease), KLOCK_OK, NULL);
    klock_remote_lease_free(lease);
    klock_remote_session_free(session);
    klock_remote_client_free(client);
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: remote URL TOKEN UNREACHABLE_URL [TLS_URL CA_FILE]\n");
        return 2;
    }
    url = argv[1];
    token = argv[2];
    unreachable = argv[3];
    bad_input();
    contention();
    timeout_and_died();
    renewals();
    namespaces_and_close();
    if (argc == 6) tls(argv[4], argv[5]);
    printf("%s: %d failed\n", failures ? "FAIL" : "remote", failures);
    return failures ? 1 : 0;
}
