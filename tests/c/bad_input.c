/*
 * Bad input at the C boundary (run under valgrind by scripts/test-c.sh): NULL handles and
 * out-pointers, strings that are not UTF-8, buffers too small for a message, _free(NULL),
 * double close and use of a closed session, a bad configuration, a NUL escaped in a digest's
 * JSON, and calls from several threads. Each case must return its named code (or be a no-op),
 * crash nothing and leak nothing. Prints one line per failed check and `N passed, M failed`.
 * (The panic boundary is proven by the Rust unit tests of bindings/c/src/status.rs: the
 * library exports nothing that exists only to panic.)
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klock.h"

static int passed, failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                 \
        }                                                                                          \
    } while (0)

/* `call` returns `code`, and the per-thread status says the same. */
#define EXPECT(code, call)                                                                         \
    do {                                                                                           \
        klock_status got_ = (call);                                                                \
        if (got_ == (code) && klock_last_error_status() == (code)) {                               \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s:%d: %s: expected %s, got %s (last %s)\n", __FILE__, __LINE__, #call,   \
                   klock_status_name(code), klock_status_name(got_),                               \
                   klock_status_name(klock_last_error_status()));                                  \
        }                                                                                          \
    } while (0)

static const uint64_t NOW = 1000;

static klock_kernel *new_kernel(void) {
    klock_config config;
    klock_kernel *k = NULL;
    if (klock_config_default(&config) != KLOCK_OK || klock_kernel_new(&config, &k) != KLOCK_OK) {
        printf("FAIL: cannot create a kernel\n");
        exit(1);
    }
    return k;
}

static uint64_t active_sessions(klock_kernel *k) {
    klock_stats *s = NULL;
    uint64_t n = UINT64_MAX;
    if (klock_kernel_stats(k, &s) == KLOCK_OK) n = s->active_sessions;
    klock_stats_free(s);
    return n;
}

static void null_handles(void) {
    klock_session_info info;
    klock_config config;
    klock_verdict *verdict = (klock_verdict *)&info; /* non-NULL garbage: must be reset */
    klock_event *event = (klock_event *)&info;
    klock_digest *digest = (klock_digest *)&info;
    klock_heartbeat_results *hb = (klock_heartbeat_results *)&info;
    klock_reconcile_results *rc = (klock_reconcile_results *)&info;
    klock_resource_state *state = (klock_resource_state *)&info;
    klock_stats *stats = (klock_stats *)&info;
    klock_kernel *clone = (klock_kernel *)&info;
    char *json = (char *)&info;
    const char *intents[] = {"MUTATES FILE:/x"};
    uint64_t ids[] = {1};
    bool flag;
    uint64_t u;
    size_t n;

    EXPECT(KLOCK_NULL_POINTER, klock_kernel_config(NULL, &config));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_clone(NULL, &clone));
    CHECK(clone == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_next_deadline(NULL, &flag, &u));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_advance(NULL, NOW));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_poll_event(NULL, &event));
    CHECK(event == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_pending_events(NULL, &n));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_now(NULL, &u));
    EXPECT(KLOCK_NULL_POINTER, klock_session_open(NULL, "alice", NULL, NOW, &info));
    EXPECT(KLOCK_NULL_POINTER, klock_session_close(NULL, 1, NOW));
    EXPECT(KLOCK_NULL_POINTER, klock_session_suspend(NULL, 1, NOW));
    EXPECT(KLOCK_NULL_POINTER, klock_session_digest(NULL, 1, NOW, &digest));
    CHECK(digest == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_session_resume(NULL, NULL, NOW, &info));
    EXPECT(KLOCK_NULL_POINTER, klock_session_acquire(NULL, 1, intents, 1, NULL, NOW, &verdict));
    CHECK(verdict == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_lease_heartbeat(NULL, 1, ids, 1, NOW, &hb));
    CHECK(hb == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_lease_heartbeat_all(NULL, 1, NOW, &hb));
    EXPECT(KLOCK_NULL_POINTER, klock_lease_release(NULL, 1, 1, NOW, &flag));
    EXPECT(KLOCK_NULL_POINTER, klock_session_release_all(NULL, 1, NOW, &n));
    EXPECT(KLOCK_NULL_POINTER, klock_lease_reconcile(NULL, 1, ids, 1, NOW, &rc));
    CHECK(rc == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_ticket_cancel(NULL, 1, 1, NOW));
    EXPECT(KLOCK_NULL_POINTER, klock_resource_get_state(NULL, "FILE:/x", NULL, NOW, &state));
    CHECK(state == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_stats(NULL, &stats));
    CHECK(stats == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_snapshot_json(NULL, NOW, &json));
    CHECK(json == NULL);
    klock_kernel_free(NULL); /* no-op */
    passed++;
}

static void null_out_pointers(void) {
    klock_kernel *k = new_kernel();
    klock_session_info info;
    EXPECT(KLOCK_OK, klock_session_open(k, "alice", NULL, NOW, &info));
    const char *intents[] = {"MUTATES FILE:/x"};
    uint64_t ids[] = {1};
    bool flag;
    uint64_t u;

    EXPECT(KLOCK_NULL_POINTER, klock_config_default(NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_acquire_options_default(NULL));
    klock_config config;
    klock_config_default(&config);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_new(&config, NULL));
    klock_kernel *other = (klock_kernel *)&info;
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_new(NULL, &other));
    CHECK(other == NULL);
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_config(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_clone(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_next_deadline(k, NULL, &u));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_next_deadline(k, &flag, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_poll_event(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_pending_events(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_now(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_session_open(k, "bob", NULL, NOW, NULL));
    CHECK(active_sessions(k) == 1); /* nothing was opened */
    EXPECT(KLOCK_NULL_POINTER, klock_session_open(k, NULL, NULL, NOW, &info));
    EXPECT(KLOCK_NULL_POINTER, klock_session_digest(k, info.session_id, NOW, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_session_resume(k, NULL, NOW, &info));
    EXPECT(KLOCK_NULL_POINTER, klock_session_acquire(k, info.session_id, intents, 1, NULL, NOW, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_session_acquire(k, info.session_id, NULL, 2, NULL, NOW, NULL));
    klock_verdict *v = NULL;
    EXPECT(KLOCK_NULL_POINTER, klock_session_acquire(k, info.session_id, NULL, 2, NULL, NOW, &v));
    const char *with_null[] = {"MUTATES FILE:/x", NULL};
    EXPECT(KLOCK_NULL_POINTER, klock_session_acquire(k, info.session_id, with_null, 2, NULL, NOW, &v));
    CHECK(v == NULL);
    /* An empty manifest is the kernel's INVALID_MANIFEST, NULL or not. */
    EXPECT(KLOCK_INVALID_MANIFEST, klock_session_acquire(k, info.session_id, NULL, 0, NULL, NOW, &v));
    EXPECT(KLOCK_NULL_POINTER, klock_lease_heartbeat(k, info.session_id, ids, 1, NOW, NULL));
    klock_heartbeat_results *hb = NULL;
    EXPECT(KLOCK_NULL_POINTER, klock_lease_heartbeat(k, info.session_id, NULL, 1, NOW, &hb));
    EXPECT(KLOCK_NULL_POINTER, klock_lease_heartbeat_all(k, info.session_id, NOW, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_lease_reconcile(k, info.session_id, ids, 1, NOW, NULL));
    klock_reconcile_results *rc = NULL;
    EXPECT(KLOCK_NULL_POINTER, klock_lease_reconcile(k, info.session_id, NULL, 3, NOW, &rc));
    EXPECT(KLOCK_NULL_POINTER, klock_resource_get_state(k, "FILE:/x", NULL, NOW, NULL));
    klock_resource_state *state = NULL;
    EXPECT(KLOCK_NULL_POINTER, klock_resource_get_state(k, NULL, NULL, NOW, &state));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_stats(k, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_kernel_snapshot_json(k, NOW, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_digest_to_json(NULL, NULL));
    EXPECT(KLOCK_NULL_POINTER, klock_digest_from_json(NULL, NULL));
    /* Optional out-pointers may be NULL. */
    klock_verdict *granted = NULL;
    EXPECT(KLOCK_OK, klock_session_acquire(k, info.session_id, intents, 1, NULL, NOW, &granted));
    CHECK(granted && granted->kind == KLOCK_VERDICT_GRANTED && granted->leases_len == 1);
    if (granted) EXPECT(KLOCK_OK, klock_lease_release(k, info.session_id, granted->leases[0].lease_id, NOW, NULL));
    klock_verdict_free(granted);
    EXPECT(KLOCK_OK, klock_session_release_all(k, info.session_id, NOW, NULL));
    klock_kernel_free(k);
}

static void invalid_utf8(void) {
    klock_kernel *k = new_kernel();
    klock_session_info info;
    EXPECT(KLOCK_INVALID_UTF8, klock_session_open(k, "al\xffice", NULL, NOW, &info));
    EXPECT(KLOCK_INVALID_UTF8, klock_session_open(k, "alice", "ns\xc3", NOW, &info));
    /* U+0000 travels as 0xC0 0x80 and reaches the kernel, which refuses it by name; no other
       overlong form is UTF-8. */
    EXPECT(KLOCK_INVALID_AGENT_ID, klock_session_open(k, "nul\xc0\x80", NULL, NOW, &info));
    char msg[256];
    klock_last_error_message(msg, sizeof msg, NULL);
    CHECK(strstr(msg, "\"nul\\0\" contains the unprintable character U+0000") != NULL);
    EXPECT(KLOCK_INVALID_UTF8, klock_session_open(k, "a\xc0\xaf", NULL, NOW, &info));
    CHECK(active_sessions(k) == 0);
    EXPECT(KLOCK_OK, klock_session_open(k, "alice", NULL, NOW, &info));
    CHECK(strcmp(info.agent_id, "alice") == 0 && strcmp(info.namespace_name, "default") == 0);
    const char *bad[] = {"MUTATES FILE:/ok", "MUTATES FILE:/\xe2\x82"};
    klock_verdict *v = (klock_verdict *)&info;
    EXPECT(KLOCK_INVALID_UTF8, klock_session_acquire(k, info.session_id, bad, 2, NULL, NOW, &v));
    CHECK(v == NULL);
    klock_resource_state *state = NULL;
    EXPECT(KLOCK_INVALID_UTF8, klock_resource_get_state(k, "FILE:/\x80", NULL, NOW, &state));
    EXPECT(KLOCK_INVALID_UTF8, klock_resource_get_state(k, "FILE:/x", "\xfe", NOW, &state));
    CHECK(state == NULL);
    /* A valid multi-byte resource is fine and comes back unchanged. */
    const char *good[] = {"MUTATES FILE:/caf\xc3\xa9"};
    EXPECT(KLOCK_OK, klock_session_acquire(k, info.session_id, good, 1, NULL, NOW, &v));
    CHECK(v && v->leases_len == 1 && strcmp(v->leases[0].resource, "FILE:/caf\xc3\xa9") == 0);
    klock_verdict_free(v);

    klock_digest *d = NULL;
    EXPECT(KLOCK_OK, klock_session_digest(k, info.session_id, NOW, &d));
    if (d) {
        klock_digest copy = *d;
        copy.agent_id = "al\xffice";
        EXPECT(KLOCK_INVALID_UTF8, klock_session_resume(k, &copy, NOW, &info));
        copy = *d;
        copy.namespace_name = NULL;
        EXPECT(KLOCK_NULL_POINTER, klock_session_resume(k, &copy, NOW, &info));
        const char *pending[] = {"MUTATES FILE:/\xff"};
        copy = *d;
        copy.pending_intents = pending;
        copy.pending_intents_len = 1;
        EXPECT(KLOCK_INVALID_UTF8, klock_session_resume(k, &copy, NOW, &info));
        copy.pending_intents = NULL;
        EXPECT(KLOCK_NULL_POINTER, klock_session_resume(k, &copy, NOW, &info));
        copy = *d;
        copy.last_phase = NULL; /* allowed: recovery is informational */
        klock_session_info resumed;
        EXPECT(KLOCK_OK, klock_session_resume(k, &copy, NOW, &resumed));
        CHECK(resumed.session_id == info.session_id && resumed.epoch == 1 && resumed.priority == info.priority);

        /* JSON round trip, and bad JSON. */
        char *json = NULL;
        EXPECT(KLOCK_OK, klock_digest_to_json(d, &json));
        klock_digest *back = NULL;
        EXPECT(KLOCK_OK, klock_digest_from_json(json, &back));
        CHECK(back && back->session_id == d->session_id && strcmp(back->agent_id, d->agent_id) == 0 &&
              back->priority_timestamp == d->priority_timestamp && strcmp(back->last_phase, d->last_phase) == 0);
        klock_digest_free(back);
        klock_string_free(json);
        back = (klock_digest *)&info;
        EXPECT(KLOCK_INVALID_ARGUMENT, klock_digest_from_json("{\"version\": 1}", &back));
        CHECK(back == NULL);
        EXPECT(KLOCK_INVALID_UTF8, klock_digest_from_json("\"\xff\"", &back));
    }
    klock_digest_free(d);
    klock_kernel_free(k);
}

/* A NUL escaped in a digest's JSON is never cut short: "a\u0000b" used to become "a" and
 * resume agent a's session. Python and JavaScript reject that digest with INVALID_DIGEST (no
 * session's agent holds NUL); so does the C host, when parsing, since a C string cannot hold it.
 * Every other bad digest text is in tests/bad-digests.json (tests/c/bad_digests.c). */
static void digest_json_nul(void) {
    klock_kernel *k = new_kernel();
    klock_session_info info;
    EXPECT(KLOCK_OK, klock_session_open(k, "a", "default", NOW, &info));
    char json[512];
    const char *shape = "{\"version\": 1, \"identity\": {\"agent_id\": \"%s\", \"namespace\": \"%s\", "
                        "\"session_id\": %llu, \"priority_timestamp\": %llu, \"epoch\": 0}, "
                        "\"recovery\": {\"last_phase\": \"%s\", \"pending_intents\": [\"%s\"]}}";
#define DIGEST_JSON(agent, ns, phase, intent)                                                        \
    snprintf(json, sizeof json, shape, agent, ns, (unsigned long long)info.session_id,             \
             (unsigned long long)info.priority, phase, intent)
    klock_digest *d = NULL;
    klock_session_info resumed;
    DIGEST_JSON("a", "default", "IDLE", "MUTATES FILE:/x");
    EXPECT(KLOCK_OK, klock_digest_from_json(json, &d));
    EXPECT(KLOCK_OK, klock_session_resume(k, d, NOW + 1, &resumed));
    CHECK(resumed.epoch == 1);
    klock_digest_free(d);

    const char *nul_ids[][2] = {{"a\\u0000b", "default"}, {"a\\u0000", "default"}, {"a", "default\\u0000x"}};
    for (size_t i = 0; i < sizeof nul_ids / sizeof nul_ids[0]; i++) {
        DIGEST_JSON(nul_ids[i][0], nul_ids[i][1], "IDLE", "MUTATES FILE:/x");
        d = (klock_digest *)&info; /* garbage: must be reset */
        EXPECT(KLOCK_INVALID_DIGEST, klock_digest_from_json(json, &d));
        CHECK(d == NULL);
        char message[256];
        klock_last_error_message(message, sizeof message, NULL);
        CHECK(strstr(message, "NUL") != NULL);
    }
    /* Free text the kernel does not check: a C digest cannot hold it either, and says so. */
    DIGEST_JSON("a", "default", "ID\\u0000LE", "MUTATES FILE:/x");
    EXPECT(KLOCK_INVALID_ARGUMENT, klock_digest_from_json(json, &d));
    CHECK(d == NULL);
    DIGEST_JSON("a", "default", "IDLE", "MUTATES FILE:/x\\u0000y");
    EXPECT(KLOCK_INVALID_ARGUMENT, klock_digest_from_json(json, &d));
    CHECK(d == NULL);
#undef DIGEST_JSON
    /* Nothing above touched the session: still epoch 1 after the one good resume. */
    klock_digest *now_d = NULL;
    EXPECT(KLOCK_OK, klock_session_digest(k, info.session_id, NOW + 2, &now_d));
    CHECK(now_d && now_d->epoch == 1 && strcmp(now_d->agent_id, "a") == 0);
    klock_digest_free(now_d);
    klock_kernel_free(k);
}

static void messages_and_buffers(void) {
    klock_kernel *k = new_kernel();
    klock_session_info info;
    /* A message with multi-byte characters: the agent id is quoted in it. */
    EXPECT(KLOCK_INVALID_AGENT_ID, klock_session_open(k, "\xc3\xa9\xc3\xa9\xc3\xa9\x01", NULL, NOW, &info));
    size_t required = 0;
    CHECK(klock_last_error_message(NULL, 0, &required) == KLOCK_BUFFER_TOO_SMALL);
    CHECK(required > 10);
    char *full = malloc(required);
    size_t again = 0;
    CHECK(full && klock_last_error_message(full, required, &again) == KLOCK_OK);
    CHECK(again == required && full && strlen(full) == required - 1);
    CHECK(full && strstr(full, "agent_id") != NULL);
    /* Reading the message does not change it, even when the buffer is too small. */
    CHECK(klock_last_error_status() == KLOCK_INVALID_AGENT_ID);

    char small[8];
    memset(small, 'x', sizeof small);
    size_t req2 = 0;
    CHECK(klock_last_error_message(small, sizeof small, &req2) == KLOCK_BUFFER_TOO_SMALL);
    CHECK(req2 == required && strlen(small) == 7 && full && strncmp(small, full, 7) == 0);
    char one[1] = {'x'};
    CHECK(klock_last_error_message(one, 1, NULL) == KLOCK_BUFFER_TOO_SMALL && one[0] == 0);
    CHECK(klock_last_error_message(NULL, 5, NULL) == KLOCK_NULL_POINTER);

    /* Never cut inside a UTF-8 character: find a length that would split the first é. */
    const char *e = full ? strstr(full, "\xc3\xa9") : NULL;
    CHECK(e != NULL);
    if (e) {
        size_t split = (size_t)(e - full) + 1; /* bytes before the cut, if cut naively */
        char *cut = malloc(split + 1);
        CHECK(cut && klock_last_error_message(cut, split + 1, NULL) == KLOCK_BUFFER_TOO_SMALL);
        CHECK(cut && strlen(cut) == split - 1 && strncmp(cut, full, split - 1) == 0);
        free(cut);
    }
    free(full);

    /* A success clears the message. */
    EXPECT(KLOCK_OK, klock_session_open(k, "alice", NULL, NOW, &info));
    char buf[16];
    size_t req3 = 99;
    CHECK(klock_last_error_message(buf, sizeof buf, &req3) == KLOCK_OK && buf[0] == 0 && req3 == 1);

    /* Status names. */
    CHECK(strcmp(klock_status_name(KLOCK_OK), "OK") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_INVALID_RESOURCE), "INVALID_RESOURCE") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_QUOTA_EXCEEDED), "QUOTA_EXCEEDED") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_NULL_POINTER), "NULL_POINTER") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_INVALID_UTF8), "INVALID_UTF8") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_BUFFER_TOO_SMALL), "BUFFER_TOO_SMALL") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0);
    CHECK(strcmp(klock_status_name(KLOCK_PANIC), "PANIC") == 0);
    CHECK(strcmp(klock_status_name(12345), "UNKNOWN_STATUS") == 0);
    CHECK(strcmp(klock_predicate_name(KLOCK_PREDICATE_DEPENDS_ON), "DEPENDS_ON") == 0);
    CHECK(strcmp(klock_predicate_name(99), "UNKNOWN") == 0);
    CHECK(strcmp(klock_event_kind_name(KLOCK_EVENT_WOUNDED), "WOUNDED") == 0);
    CHECK(strcmp(klock_verdict_kind_name(KLOCK_VERDICT_DIE), "DIE") == 0);
    CHECK(strcmp(klock_lease_status_name(KLOCK_LEASE_STATUS_NOT_OWNER), "NOT_OWNER") == 0);
    CHECK(strcmp(klock_policy_name(KLOCK_POLICY_LANES), "lanes") == 0);
    CHECK(strcmp(klock_policy_name(KLOCK_POLICY_DETECT), "detect") == 0);
    CHECK(strcmp(klock_close_reason_name(KLOCK_CLOSE_REASON_IDLE), "IDLE") == 0);
    CHECK(strcmp(klock_close_reason_name(KLOCK_CLOSE_REASON_NONE), "UNKNOWN") == 0);
    CHECK(strlen(klock_version()) > 0);
    klock_kernel_free(k);
}

static void free_null(void) {
    klock_verdict_free(NULL);
    klock_event_free(NULL);
    klock_heartbeat_results_free(NULL);
    klock_reconcile_results_free(NULL);
    klock_resource_state_free(NULL);
    klock_digest_free(NULL);
    klock_stats_free(NULL);
    klock_string_free(NULL);
    klock_kernel_free(NULL);
    passed++;
}

static void closed_sessions(void) {
    klock_kernel *k = new_kernel();
    klock_session_info a, b;
    EXPECT(KLOCK_OK, klock_session_open(k, "alice", NULL, NOW, &a));
    EXPECT(KLOCK_OK, klock_session_open(k, "bob", NULL, NOW, &b));
    const char *x[] = {"MUTATES FILE:/x"};
    klock_verdict *v = NULL;
    EXPECT(KLOCK_OK, klock_session_acquire(k, b.session_id, x, 1, NULL, NOW, &v));
    uint64_t lease = v ? v->leases[0].lease_id : 0;
    klock_verdict_free(v);
    v = NULL;
    EXPECT(KLOCK_OK, klock_session_acquire(k, a.session_id, x, 1, NULL, NOW + 1, &v));
    CHECK(v && v->kind == KLOCK_VERDICT_WAIT && v->held_by_len == 1 && v->held_by[0].session_id == b.session_id);
    uint64_t ticket = v ? v->ticket : 0;
    klock_verdict_free(v);

    /* Bob's grant was ACQUIRED; closing bob releases its lease (RELEASED, its id) and grants
     * alice's ticket: events, not SESSION_CLOSED. */
    EXPECT(KLOCK_OK, klock_session_close(k, b.session_id, NOW + 2));
    klock_event *ev = NULL;
    EXPECT(KLOCK_OK, klock_kernel_poll_event(k, &ev));
    CHECK(ev && ev->kind == KLOCK_EVENT_ACQUIRED && ev->session == b.session_id && ev->leases_len == 1 &&
          ev->leases[0].lease_id == lease);
    klock_event_free(ev);
    ev = NULL;
    EXPECT(KLOCK_OK, klock_kernel_poll_event(k, &ev));
    CHECK(ev && ev->kind == KLOCK_EVENT_RELEASED && ev->session == b.session_id && ev->released_len == 1 &&
          ev->released[0] == lease);
    klock_event_free(ev);
    ev = NULL;
    EXPECT(KLOCK_OK, klock_kernel_poll_event(k, &ev));
    CHECK(ev && ev->kind == KLOCK_EVENT_GRANTED && ev->ticket == ticket && ev->session == a.session_id);
    klock_event_free(ev);
    EXPECT(KLOCK_OK, klock_kernel_poll_event(k, &ev));
    CHECK(ev == NULL);

    /* Double close, and every call on the closed session. */
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_session_close(k, b.session_id, NOW + 3));
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_session_suspend(k, b.session_id, NOW + 3));
    klock_digest *d = NULL;
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_session_digest(k, b.session_id, NOW + 3, &d));
    CHECK(d == NULL);
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_session_acquire(k, b.session_id, x, 1, NULL, NOW + 3, &v));
    klock_heartbeat_results *hb = NULL;
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_lease_heartbeat(k, b.session_id, &lease, 1, NOW + 3, &hb));
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_lease_heartbeat_all(k, b.session_id, NOW + 3, &hb));
    CHECK(hb == NULL);
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_lease_release(k, b.session_id, lease, NOW + 3, NULL));
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_session_release_all(k, b.session_id, NOW + 3, NULL));
    klock_reconcile_results *rc = NULL;
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_lease_reconcile(k, b.session_id, &lease, 1, NOW + 3, &rc));
    EXPECT(KLOCK_UNKNOWN_SESSION, klock_ticket_cancel(k, b.session_id, ticket, NOW + 3));

    /* The closed session's lease is unknown to the living one now. */
    EXPECT(KLOCK_OK, klock_lease_reconcile(k, a.session_id, &lease, 1, NOW + 3, &rc));
    CHECK(rc && rc->len == 1 && rc->items[0].status == KLOCK_LEASE_STATUS_UNKNOWN);
    klock_reconcile_results_free(rc);
    EXPECT(KLOCK_OK, klock_lease_heartbeat_all(k, a.session_id, NOW + 4, &hb));
    CHECK(hb && hb->len == 1 && hb->items[0].status == KLOCK_OK && hb->items[0].expires_at == NOW + 4 + 60000);
    klock_heartbeat_results_free(hb);
    klock_kernel_free(k);
}

static void bad_config(void) {
    klock_config config;
    klock_config_default(&config);
    klock_kernel *k = (klock_kernel *)&config;
    config.policy = 7;
    EXPECT(KLOCK_INVALID_CONFIG, klock_kernel_new(&config, &k));
    CHECK(k == NULL);
    klock_config_default(&config);
    config.max_ttl_ms = 0;
    EXPECT(KLOCK_INVALID_CONFIG, klock_kernel_new(&config, &k));
    CHECK(k == NULL);
    klock_config_default(&config);
    config.policy = KLOCK_POLICY_WOUND_WAIT;
    config.seed = 42;
    EXPECT(KLOCK_OK, klock_kernel_new(&config, &k));
    klock_config back;
    EXPECT(KLOCK_OK, klock_kernel_config(k, &back));
    CHECK(back.policy == KLOCK_POLICY_WOUND_WAIT && back.seed == 42 && back.max_ttl_ms == 300000);
    klock_kernel_free(k);

    /* Configuration by name: the kernel's names; anything else is an error that changes nothing. */
    klock_config_default(&config);
    EXPECT(KLOCK_OK, klock_config_set_number(&config, "grace_ms", 7));
    EXPECT(KLOCK_OK, klock_config_set_policy(&config, "lanes"));
    CHECK(config.grace_ms == 7 && config.policy == KLOCK_POLICY_LANES);
    EXPECT(KLOCK_INVALID_CONFIG, klock_config_set_number(&config, "grace", 8));
    char msg[512];
    klock_last_error_message(msg, sizeof msg, NULL);
    CHECK(strstr(msg, "unknown config field \"grace\"") != NULL && strstr(msg, "grace_ms") != NULL);
    EXPECT(KLOCK_INVALID_CONFIG, klock_config_set_number(&config, "policy", 1));
    EXPECT(KLOCK_INVALID_CONFIG, klock_config_set_policy(&config, "LANES"));
    CHECK(config.grace_ms == 7 && config.policy == KLOCK_POLICY_LANES);
    EXPECT(KLOCK_NULL_POINTER, klock_config_set_number(NULL, "grace_ms", 1));
    EXPECT(KLOCK_NULL_POINTER, klock_config_set_number(&config, NULL, 1));
    EXPECT(KLOCK_NULL_POINTER, klock_config_set_policy(&config, NULL));
    EXPECT(KLOCK_INVALID_UTF8, klock_config_set_policy(&config, "lan\xff" "es"));
}

/* Several threads on one kernel: the handle is internally locked; messages are per thread. */
typedef struct {
    klock_kernel *kernel;
    int index;
    int errors;
} Worker;

static void *work(void *arg) {
    Worker *w = arg;
    char agent[32], resource[64];
    snprintf(agent, sizeof agent, "agent-%d", w->index);
    for (int i = 0; i < 100; i++) {
        klock_session_info s;
        if (klock_session_open(w->kernel, agent, NULL, NOW, &s) != KLOCK_OK) w->errors++;
        snprintf(resource, sizeof resource, "MUTATES FILE:/t%d/f%d", w->index, i);
        const char *intents[] = {resource};
        klock_verdict *v = NULL;
        if (klock_session_acquire(w->kernel, s.session_id, intents, 1, NULL, NOW, &v) != KLOCK_OK ||
            v->kind != KLOCK_VERDICT_GRANTED)
            w->errors++;
        klock_verdict_free(v);
        /* This thread's error message is its own. */
        if (klock_session_open(w->kernel, "", NULL, NOW, &s) != KLOCK_INVALID_AGENT_ID ||
            klock_last_error_status() != KLOCK_INVALID_AGENT_ID)
            w->errors++;
        if (klock_session_close(w->kernel, s.session_id, NOW) != KLOCK_OK) w->errors++;
    }
    return NULL;
}

static void threads(void) {
    klock_kernel *k = new_kernel();
    Worker workers[4];
    pthread_t ids[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (Worker){k, i, 0};
        CHECK(pthread_create(&ids[i], NULL, work, &workers[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(ids[i], NULL);
        CHECK(workers[i].errors == 0);
    }
    klock_stats *s = NULL;
    EXPECT(KLOCK_OK, klock_kernel_stats(k, &s));
    CHECK(s && s->counters.sessions_opened == 400 && s->counters.granted == 400 && s->active_sessions == 0);
    klock_stats_free(s);
    klock_kernel_free(k);
}

int main(void) {
    null_handles();
    null_out_pointers();
    invalid_utf8();
    digest_json_nul();
    messages_and_buffers();
    free_null();
    closed_sessions();
    bad_config();
    threads();
    printf("bad_input: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
