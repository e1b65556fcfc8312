/*
 * The C conformance runner: runs Klock's conformance vectors (shared/conformance/FORMAT.md)
 * through the C API (include/klock.h).
 *
 *   target/klock-c/conformance PATH...     (vector files, or directories of *.json vectors)
 *
 * Output contract (the same as every runner's): one line per vector, `ok <file>: <name>` or
 * `FAIL <file>: <name>: step k: <what differed>` (steps count from 1), then
 * `N passed, M failed`. The exit status is non-zero on any failure or when no vector ran.
 *
 * Semantics follow the Rust runner (conformance/src/): every key the format does not define,
 * at every level, fails the vector; names with a closed set of values (errors, verdicts, events,
 * statuses, predicates, policies) are checked; an alias is bound once (binding it again to the
 * same value is a no-op, to another value a failure); an alias never bound stands for an id
 * the kernel never issues (counting down from UINT64_MAX, one per alias); a step without
 * `expect` must succeed and emit no event; when an error is expected, a clone of the kernel
 * taken before the call and advanced to the same `now` must emit the same events, and its
 * snapshot must equal the kernel's after the failed call.
 *
 * Two details of C: JSON numbers are parsed exactly as u64 (cJSON keeps doubles, so number
 * tokens that a double might not hold are carried as marked strings and parsed here), and a
 * NUL inside a JSON string (which no C string can carry) is passed as U+0001, another control
 * character every validation rejects the same way.
 */
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "klock.h"

/* ------------------------------------------------------------------------------------------ */
/* Failure messages                                                                           */
/* ------------------------------------------------------------------------------------------ */

static char g_why[32768];

/* Records why the current vector fails; returns -1 so callers can `return fail(...)`. */
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_why, sizeof g_why, fmt, ap);
    va_end(ap);
    return -1;
}

/* Replaces the recorded failure with `text` (truncated to fit). */
static void set_why(const char *text) {
    size_t n = strlen(text);
    if (n >= sizeof g_why) n = sizeof g_why - 1;
    memmove(g_why, text, n);
    g_why[n] = 0;
}

/* Prepends context to the recorded failure. */
static int wrap(const char *fmt, ...) {
    char head[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    size_t h = strlen(head), old = strlen(g_why);
    char *joined = malloc(h + old + 1);
    if (!joined) return -1;
    memcpy(joined, head, h);
    memcpy(joined + h, g_why, old + 1);
    set_why(joined);
    free(joined);
    return -1;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != 0) return -1;                                                                   \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(3);
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        exit(3);
    }
    return q;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

/* A growable text buffer. */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static void buf_putn(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_puts(Buf *b, const char *s) { buf_putn(b, s, strlen(s)); }

static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_putn(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Rotating scratch strings for labels inside one message. */
static char *scratch(void) {
    static char slots[32][512];
    static unsigned next;
    char *s = slots[next++ % 32];
    s[0] = 0;
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Strict JSON on top of cJSON                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Number tokens a double might not hold exactly (and anything that is not a plain integer)
 * are rewritten as strings starting with this mark, then parsed exactly by as_u64(). */
#define NUM_MARK "\001num:"
#define NUM_MARK_LEN 5

static bool is_marked(const cJSON *v) {
    return cJSON_IsString(v) && strncmp(v->valuestring, NUM_MARK, NUM_MARK_LEN) == 0;
}

static bool is_str(const cJSON *v) { return cJSON_IsString(v) && !is_marked(v); }


/* Rewrites the vector text before cJSON parses it (see the top of the file). */
static char *preprocess(const char *src) {
    Buf out = {0};
    size_t n = strlen(src), i = 0;
    bool in_string = false;
    while (i < n) {
        char c = src[i];
        if (in_string) {
            if (c == '\\') {
                if (i + 5 < n && src[i + 1] == 'u' && strncmp(src + i + 2, "0000", 4) == 0) {
                    buf_puts(&out, "\\u0001");
                    i += 6;
                    continue;
                }
                buf_putn(&out, src + i, i + 1 < n ? 2 : 1);
                i += 2;
                continue;
            }
            if (c == '"') in_string = false;
            buf_putn(&out, &c, 1);
            i++;
            continue;
        }
        if (c == '"') {
            in_string = true;
            buf_putn(&out, &c, 1);
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            bool plain = true;
            while (j < n && strchr("0123456789+-.eE", src[j]) && src[j]) {
                if (src[j] < '0' || src[j] > '9') plain = false;
                j++;
            }
            size_t len = j - i;
            if (len > 15 || (len > 1 && src[i] == '0')) plain = false;
            if (plain) {
                buf_putn(&out, src + i, len);
            } else {
                buf_puts(&out, "\"\\u0001num:");
                buf_putn(&out, src + i, len);
                buf_puts(&out, "\"");
            }
            i = j;
            continue;
        }
        buf_putn(&out, &c, 1);
        i++;
    }
    if (!out.p) buf_puts(&out, "");
    return out.p;
}

/* A non-negative integer, exactly. */
static bool as_u64(const cJSON *v, uint64_t *out) {
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d < 0 || d > 999999999999999.0 || d != (double)(uint64_t)d) return false;
        *out = (uint64_t)d;
        return true;
    }
    if (is_marked(v)) {
        const char *t = v->valuestring + NUM_MARK_LEN;
        if (!*t || (t[0] == '0' && t[1])) return false;
        for (const char *c = t; *c; c++)
            if (*c < '0' || *c > '9') return false;
        errno = 0;
        char *end;
        unsigned long long x = strtoull(t, &end, 10);
        if (errno == ERANGE || *end) return false;
        *out = (uint64_t)x;
        return true;
    }
    return false;
}

/* A short rendering of a JSON value for messages. */
static const char *show(const cJSON *v) {
    char *s = scratch();
    if (!v) {
        snprintf(s, 512, "(nothing)");
    } else if (is_marked(v)) {
        snprintf(s, 512, "%s", v->valuestring + NUM_MARK_LEN);
    } else if (cJSON_IsNumber(v)) {
        snprintf(s, 512, "%.17g", v->valuedouble);
    } else {
        char *text = cJSON_PrintUnformatted(v);
        if (text) {
            if (strlen(text) > 80) {
                memcpy(text + 77, "...", 4);
            }
            snprintf(s, 512, "%s", text);
            cJSON_free(text);
        }
    }
    return s;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static bool listed(const char *key, const char *const *allowed) {
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0) return true;
    return false;
}

/* `v` must be an object holding only `allowed` keys (NULL-terminated), none twice. */
static int check_object(const cJSON *v, const char *ctx, const char *const *allowed) {
    if (!cJSON_IsObject(v)) return fail("%s must be an object, got %s", ctx, show(v));
    for (const cJSON *c = v->child; c; c = c->next) {
        if (!c->string) return fail("%s: a member has no key", ctx);
        if (!listed(c->string, allowed)) {
            Buf list = {0};
            for (const char *const *a = allowed; *a; a++) {
                if (a != allowed) buf_puts(&list, ", ");
                buf_puts(&list, *a);
            }
            fail("%s: unknown key `%s` (allowed here: %s)", ctx, c->string, list.p ? list.p : "none");
            free(list.p);
            return -1;
        }
        for (const cJSON *d = c->next; d; d = d->next)
            if (d->string && strcmp(d->string, c->string) == 0)
                return fail("%s: duplicate key `%s`", ctx, c->string);
    }
    return 0;
}

static int opt_u64(const cJSON *obj, const char *key, const char *ctx, bool *present, uint64_t *out) {
    const cJSON *v = get(obj, key);
    *present = v != NULL;
    if (v && !as_u64(v, out))
        return fail("%s: `%s` must be a non-negative integer, got %s", ctx, key, show(v));
    return 0;
}

static int req_u64(const cJSON *obj, const char *key, const char *ctx, uint64_t *out) {
    bool present;
    TRY(opt_u64(obj, key, ctx, &present, out));
    if (!present) return fail("%s: missing required key `%s`", ctx, key);
    return 0;
}

/* An optional string: *out is NULL when absent. */
static int opt_str(const cJSON *obj, const char *key, const char *ctx, const char **out) {
    const cJSON *v = get(obj, key);
    *out = NULL;
    if (!v) return 0;
    if (!is_str(v)) return fail("%s: `%s` must be a string, got %s", ctx, key, show(v));
    *out = v->valuestring;
    return 0;
}

static int req_str(const cJSON *obj, const char *key, const char *ctx, const char **out) {
    TRY(opt_str(obj, key, ctx, out));
    if (!*out) return fail("%s: missing required key `%s`", ctx, key);
    return 0;
}

/* An optional boolean: *out is -1 when absent, else 0 or 1. */
static int opt_bool(const cJSON *obj, const char *key, const char *ctx, int *out) {
    const cJSON *v = get(obj, key);
    *out = -1;
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return fail("%s: `%s` must be true or false, got %s", ctx, key, show(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

static bool is_str_list(const cJSON *v) {
    if (!cJSON_IsArray(v)) return false;
    for (const cJSON *c = v->child; c; c = c->next)
        if (!is_str(c)) return false;
    return true;
}

/* An optional list of strings: *out is NULL when absent. */
static int opt_str_list(const cJSON *obj, const char *key, const char *ctx, const cJSON **out) {
    const cJSON *v = get(obj, key);
    *out = NULL;
    if (!v) return 0;
    if (!is_str_list(v)) return fail("%s: `%s` must be a list of strings, got %s", ctx, key, show(v));
    *out = v;
    return 0;
}

static int opt_array(const cJSON *obj, const char *key, const char *ctx, const cJSON **out) {
    const cJSON *v = get(obj, key);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsArray(v)) return fail("%s: `%s` must be a list, got %s", ctx, key, show(v));
    *out = v;
    return 0;
}

static int opt_object(const cJSON *obj, const char *key, const char *ctx, const cJSON **out) {
    const cJSON *v = get(obj, key);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return fail("%s: `%s` must be an object, got %s", ctx, key, show(v));
    *out = v;
    return 0;
}

/* An optional [lo, hi] inclusive range with lo <= hi. */
static int opt_range(const cJSON *obj, const char *key, const char *ctx, bool *present, uint64_t *lo,
                     uint64_t *hi) {
    const cJSON *v = get(obj, key);
    *present = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !as_u64(v->child, lo) ||
        !as_u64(v->child->next, hi) || *lo > *hi)
        return fail("%s: `%s` must be [lo, hi] with integers lo <= hi, got %s", ctx, key, show(v));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* The kernel's error codes, found by name (every status below 900 that has a name). */
static int error_code(const char *name, uint32_t *out) {
    for (uint32_t code = 1; code < 900; code++) {
        const char *n = klock_status_name(code);
        if (strcmp(n, "UNKNOWN_STATUS") != 0 && strcmp(n, name) == 0) {
            *out = code;
            return 0;
        }
    }
    return -1;
}

static const char *known_errors(void) {
    static char list[2048];
    if (!list[0]) {
        Buf b = {0};
        for (uint32_t code = 1; code < 900; code++) {
            const char *n = klock_status_name(code);
            if (strcmp(n, "UNKNOWN_STATUS") == 0) continue;
            if (b.len) buf_puts(&b, ", ");
            buf_puts(&b, n);
        }
        snprintf(list, sizeof list, "%s", b.p ? b.p : "");
        free(b.p);
    }
    return list;
}

static int error_name(const char *ctx, const char *name, uint32_t *out) {
    if (error_code(name, out) != 0)
        return fail("%s: unknown error name \"%s\" (known: %s)", ctx, name, known_errors());
    return 0;
}

/* Exact (upper-case) predicate name → klock_predicate. */
static int predicate_code(const char *ctx, const char *name, uint32_t *out) {
    for (uint32_t p = 0; p < 6; p++) {
        if (strcmp(klock_predicate_name(p), name) == 0) {
            *out = p;
            return 0;
        }
    }
    return fail("%s: `predicate` must be one of PROVIDES, CONSUMES, MUTATES, DELETES, DEPENDS_ON, "
                "RENAMES, got \"%s\"",
                ctx, name);
}

static bool one_of(const char *value, const char *const *allowed) { return listed(value, allowed); }

static const char *const VERDICTS[] = {"GRANTED", "WAIT", "DIE", NULL};
static const char *const STATUSES[] = {"ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN", NULL};
static const char *const HEARTBEAT_ERRORS[] = {"LEASE_EXPIRED", "LEASE_RELEASED", "NOT_OWNER",
                                               "UNKNOWN_LEASE", "LIFETIME_EXCEEDED", NULL};

/* ------------------------------------------------------------------------------------------ */
/* Aliases                                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum kind { K_SESSION = 1, K_LEASE, K_TICKET, K_DIGEST };

static const char *kind_name(int kind) {
    switch (kind) {
    case K_SESSION: return "session";
    case K_LEASE: return "lease";
    case K_TICKET: return "ticket";
    default: return "digest";
    }
}

typedef struct {
    char *name;
    int kind;
    uint64_t id;    /* session, lease, ticket */
    uint64_t fence; /* lease */
    klock_digest *digest; /* digest (owned) */
    char *digest_json;    /* digest, for comparisons */
} Alias;

typedef struct {
    char *name;
    uint64_t id;
} Literal;

typedef struct {
    Alias *bound;
    size_t n, cap;
    Literal *unbound;
    size_t un, ucap;
} Aliases;

static void aliases_free(Aliases *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->bound[i].name);
        klock_digest_free(a->bound[i].digest);
        klock_string_free(a->bound[i].digest_json);
    }
    for (size_t i = 0; i < a->un; i++) free(a->unbound[i].name);
    free(a->bound);
    free(a->unbound);
    memset(a, 0, sizeof *a);
}

static Alias *find_alias(Aliases *a, const char *name) {
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->bound[i].name, name) == 0) return &a->bound[i];
    return NULL;
}

static const char *describe_alias(const Alias *b) {
    char *s = scratch();
    if (b->kind == K_DIGEST)
        snprintf(s, 512, "of session #%" PRIu64, b->digest->session_id);
    else
        snprintf(s, 512, "#%" PRIu64, b->id);
    return s;
}

/* Binds `name`; `digest` (owned on success or failure) only for K_DIGEST. */
static int bind(Aliases *a, const char *name, int kind, uint64_t id, uint64_t fence, klock_digest *digest) {
    Alias fresh = {0};
    fresh.kind = kind;
    fresh.id = id;
    fresh.fence = fence;
    fresh.digest = digest;
    if (digest && klock_digest_to_json(digest, &fresh.digest_json) != KLOCK_OK) {
        klock_digest_free(digest);
        return fail("cannot serialise a digest: %s", klock_status_name(klock_last_error_status()));
    }
    Alias *old = find_alias(a, name);
    if (old) {
        bool same = old->kind == kind &&
                    (kind == K_DIGEST ? strcmp(old->digest_json, fresh.digest_json) == 0
                                      : old->id == id && (kind != K_LEASE || old->fence == fence));
        int rc = 0;
        if (!same)
            rc = fail("alias \"%s\" is already bound to %s %s, cannot rebind it to %s %s (aliases are "
                      "bound once; use same_as)",
                      name, kind_name(old->kind), describe_alias(old), kind_name(kind), describe_alias(&fresh));
        klock_digest_free(fresh.digest);
        klock_string_free(fresh.digest_json);
        return rc;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->bound = xrealloc(a->bound, a->cap * sizeof *a->bound);
    }
    fresh.name = xstrdup(name);
    a->bound[a->n++] = fresh;
    return 0;
}

/* The never-issued id standing for an unbound alias. */
static uint64_t literal(Aliases *a, const char *name) {
    for (size_t i = 0; i < a->un; i++)
        if (strcmp(a->unbound[i].name, name) == 0) return a->unbound[i].id;
    if (a->un == a->ucap) {
        a->ucap = a->ucap ? a->ucap * 2 : 16;
        a->unbound = xrealloc(a->unbound, a->ucap * sizeof *a->unbound);
    }
    uint64_t id = UINT64_MAX - (uint64_t)a->un;
    a->unbound[a->un].name = xstrdup(name);
    a->unbound[a->un].id = id;
    a->un++;
    return id;
}

static int resolve(Aliases *a, const char *name, int kind, uint64_t *out) {
    Alias *b = find_alias(a, name);
    if (!b) {
        *out = literal(a, name);
        return 0;
    }
    if (b->kind != kind)
        return fail("alias \"%s\" is bound to a %s, not a %s", name, kind_name(b->kind), kind_name(kind));
    *out = b->id;
    return 0;
}

static int bound_lease(Aliases *a, const char *name, uint64_t *id, uint64_t *fence) {
    Alias *b = find_alias(a, name);
    if (!b) return fail("alias \"%s\" is not bound to a lease yet", name);
    if (b->kind != K_LEASE) return fail("alias \"%s\" is bound to a %s, not a lease", name, kind_name(b->kind));
    *id = b->id;
    *fence = b->fence;
    return 0;
}

/* `A(#1)` for an id bound to alias A, `X(unbound)` for an unbound alias's id, `#7` otherwise. */
static const char *label(const Aliases *a, int kind, uint64_t id) {
    char *s = scratch();
    for (size_t i = 0; i < a->n; i++) {
        if (a->bound[i].kind == kind && a->bound[i].id == id) {
            snprintf(s, 512, "%s(#%" PRIu64 ")", a->bound[i].name, id);
            return s;
        }
    }
    for (size_t i = 0; i < a->un; i++) {
        if (a->unbound[i].id == id) {
            snprintf(s, 512, "%s(unbound)", a->unbound[i].name);
            return s;
        }
    }
    snprintf(s, 512, "#%" PRIu64, id);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Describing answers                                                                         */
/* ------------------------------------------------------------------------------------------ */

static void describe_lease(Buf *b, const klock_lease *l, const Aliases *a) {
    buf_printf(b, "%s %s %s fence=%" PRIu64 " exp=%" PRIu64 " ttl=%" PRIu64, label(a, K_LEASE, l->lease_id),
               klock_predicate_name(l->predicate), l->resource, l->fence, l->expires_at, l->ttl_ms);
}

static void describe_leases(Buf *b, const klock_lease *l, size_t n, const Aliases *a) {
    buf_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i) buf_puts(b, "; ");
        describe_lease(b, &l[i], a);
    }
    buf_puts(b, "]");
}

static void describe_event(Buf *b, const klock_event *e, const Aliases *a) {
    const char *s = label(a, K_SESSION, e->session);
    switch (e->kind) {
    case KLOCK_EVENT_GRANTED:
        buf_printf(b, "GRANTED{ticket=%s session=%s leases=", label(a, K_TICKET, e->ticket), s);
        describe_leases(b, e->leases, e->leases_len, a);
        buf_puts(b, "}");
        break;
    case KLOCK_EVENT_WAIT_TIMEOUT:
        buf_printf(b, "WAIT_TIMEOUT{ticket=%s session=%s}", label(a, K_TICKET, e->ticket), s);
        break;
    case KLOCK_EVENT_DIED:
        buf_printf(b, "DIED{ticket=%s session=%s retry_after_ms=%" PRIu64 "}", label(a, K_TICKET, e->ticket), s,
                   e->retry_after_ms);
        break;
    case KLOCK_EVENT_LEASE_EXPIRED:
        buf_printf(b, "LEASE_EXPIRED{lease=%s session=%s}", label(a, K_LEASE, e->lease), s);
        break;
    case KLOCK_EVENT_WOUNDED:
        buf_printf(b, "WOUNDED{session=%s by=%s lost_leases=[", s, label(a, K_SESSION, e->by));
        for (size_t i = 0; i < e->lost_leases_len; i++)
            buf_printf(b, "%s%s", i ? ", " : "", label(a, K_LEASE, e->lost_leases[i]));
        buf_puts(b, "] lost_tickets=[");
        for (size_t i = 0; i < e->lost_tickets_len; i++)
            buf_printf(b, "%s%s", i ? ", " : "", label(a, K_TICKET, e->lost_tickets[i]));
        buf_printf(b, "] retry_after_ms=%" PRIu64 "}", e->retry_after_ms);
        break;
    case KLOCK_EVENT_SESSION_CLOSED:
        buf_printf(b, "SESSION_CLOSED{session=%s reason=%s}", s,
                   e->close_reason == KLOCK_CLOSE_REASON_IDLE ? "IDLE" : "?");
        break;
    default: buf_printf(b, "?%u", (unsigned)e->kind);
    }
}

typedef struct {
    klock_event **items;
    size_t len, cap;
} Events;

static void events_free(Events *ev) {
    for (size_t i = 0; i < ev->len; i++) klock_event_free(ev->items[i]);
    free(ev->items);
    memset(ev, 0, sizeof *ev);
}

/* Drains every queued event. */
static int drain(klock_kernel *k, Events *ev) {
    for (;;) {
        klock_event *e = NULL;
        if (klock_kernel_poll_event(k, &e) != KLOCK_OK) return fail("klock_kernel_poll_event failed");
        if (!e) return 0;
        if (ev->len == ev->cap) {
            ev->cap = ev->cap ? ev->cap * 2 : 8;
            ev->items = xrealloc(ev->items, ev->cap * sizeof *ev->items);
        }
        ev->items[ev->len++] = e;
    }
}

/* `[EVENT{...}, ...]` in a scratch-independent heap string (free it). */
static char *describe_events(const Events *ev, const Aliases *a) {
    Buf b = {0};
    buf_puts(&b, "[");
    for (size_t i = 0; i < ev->len; i++) {
        if (i) buf_puts(&b, ", ");
        describe_event(&b, ev->items[i], a);
    }
    buf_puts(&b, "]");
    return b.p;
}

static bool same_text(const char *x, const char *y) {
    if (!x || !y) return x == y;
    return strcmp(x, y) == 0;
}

static bool lease_equal(const klock_lease *x, const klock_lease *y) {
    return x->lease_id == y->lease_id && x->session_id == y->session_id && same_text(x->agent_id, y->agent_id) &&
           same_text(x->resource, y->resource) && x->predicate == y->predicate && x->fence == y->fence &&
           x->acquired_at == y->acquired_at && x->expires_at == y->expires_at && x->ttl_ms == y->ttl_ms;
}

static bool ids_equal(const uint64_t *x, size_t xn, const uint64_t *y, size_t yn) {
    if (xn != yn) return false;
    for (size_t i = 0; i < xn; i++)
        if (x[i] != y[i]) return false;
    return true;
}

static bool event_equal(const klock_event *x, const klock_event *y) {
    if (x->kind != y->kind || x->session != y->session || x->ticket != y->ticket ||
        x->retry_after_ms != y->retry_after_ms || x->lease != y->lease || x->by != y->by ||
        x->close_reason != y->close_reason || x->leases_len != y->leases_len)
        return false;
    for (size_t i = 0; i < x->leases_len; i++)
        if (!lease_equal(&x->leases[i], &y->leases[i])) return false;
    return ids_equal(x->lost_leases, x->lost_leases_len, y->lost_leases, y->lost_leases_len) &&
           ids_equal(x->lost_tickets, x->lost_tickets_len, y->lost_tickets, y->lost_tickets_len);
}

/* ------------------------------------------------------------------------------------------ */
/* Vector structure: validation (before the call)                                             */
/* ------------------------------------------------------------------------------------------ */

static const char *const FILE_KEYS[] = {"name", "spec", "config", "steps", NULL};
static const char *const CONFIG_KEYS[] = {"policy",         "seed",
                                          "default_ttl_ms", "max_ttl_ms",
                                          "default_wait_timeout_ms", "backoff_base_ms",
                                          "backoff_cap_ms", "grace_ms",
                                          "session_idle_ms", "max_leases_per_session",
                                          "max_lease_lifetime_ms", NULL};
static const char *const LEASE_KEYS[] = {"as", "resource", "predicate", "expires_at", "ttl_ms", "fence_gt",
                                         "same_as", NULL};
static const char *const HOLDER_KEYS[] = {"session", "predicate", "resource", NULL};
static const char *const WAITER_KEYS[] = {"session", "ticket", NULL};
static const char *const TAMPER_KEYS[] = {"agent_id", "namespace", "session_id", "priority_timestamp", "epoch",
                                          NULL};
static const char *const OUTCOME_KEYS[] = {"status", "expires_at", NULL};
static const char *const EVENT_KEYS[] = {"event", "ticket", "session", "lease", "by", "leases",
                                         "retry_after_ms", "lost_leases", "lost_tickets", NULL};

typedef struct {
    const char *kind;
    const char *const keys[7];
} EventKind;

static const EventKind EVENT_KINDS[] = {
    {"GRANTED", {"event", "ticket", "session", "leases", NULL}},
    {"WAIT_TIMEOUT", {"event", "ticket", "session", NULL}},
    {"DIED", {"event", "ticket", "session", "retry_after_ms", NULL}},
    {"LEASE_EXPIRED", {"event", "lease", "session", NULL}},
    {"WOUNDED", {"event", "session", "by", "lost_leases", "lost_tickets", "retry_after_ms", NULL}},
    {"SESSION_CLOSED", {"event", "session", NULL}},
};

typedef struct {
    const char *name;
    const char *const fields[8];  /* step keys besides now, do, expect */
    const char *const expect[8];  /* expect keys besides error, events */
} Action;

static const Action ACTIONS[] = {
    {"open", {"agent", "namespace", "as", NULL}, {"priority_lt", NULL}},
    {"close", {"session", NULL}, {NULL}},
    {"suspend", {"session", NULL}, {NULL}},
    {"digest", {"session", "as", NULL}, {NULL}},
    {"resume", {"digest", "tamper", NULL}, {"epoch", NULL}},
    {"acquire",
     {"session", "intents", "ttl_ms", "wait", "wait_timeout_ms", NULL},
     {"verdict", "leases", "ticket", "held_by", "retry_after_ms", NULL}},
    {"heartbeat", {"session", "leases", NULL}, {"results", NULL}},
    {"release", {"session", "lease", NULL}, {"released", NULL}},
    {"release_all", {"session", NULL}, {NULL}},
    {"reconcile", {"session", "leases", NULL}, {"status", NULL}},
    {"cancel_wait", {"session", "ticket", NULL}, {NULL}},
    {"advance", {NULL}, {NULL}},
    {"resource_state", {"resource", "namespace", NULL}, {"holders", "waiting", "covering", NULL}},
    {"next_deadline", {NULL}, {"deadline", NULL}},
};

static const Action *find_action(const char *name) {
    for (size_t i = 0; i < sizeof ACTIONS / sizeof ACTIONS[0]; i++)
        if (strcmp(ACTIONS[i].name, name) == 0) return &ACTIONS[i];
    return NULL;
}

/* Checks an object against the union of (NULL-terminated) key lists. */
static int check_keys2(const cJSON *v, const char *ctx, const char *const *a, const char *const *b,
                       const char *const *c) {
    const char *all[32];
    size_t n = 0;
    const char *const *lists[3] = {a, b, c};
    for (int l = 0; l < 3; l++)
        for (const char *const *k = lists[l]; k && *k && n < 31; k++) all[n++] = *k;
    all[n] = NULL;
    return check_object(v, ctx, all);
}

static int validate_leases(const cJSON *items, const char *ctx) {
    int i = 0;
    for (const cJSON *item = items->child; item; item = item->next, i++) {
        char c[512];
        snprintf(c, sizeof c, "%s[%d]", ctx, i);
        TRY(check_object(item, c, LEASE_KEYS));
        const char *s;
        uint64_t u;
        bool present;
        uint32_t p;
        TRY(opt_str(item, "as", c, &s));
        TRY(opt_str(item, "resource", c, &s));
        TRY(opt_str(item, "predicate", c, &s));
        if (s) TRY(predicate_code(c, s, &p));
        TRY(opt_u64(item, "expires_at", c, &present, &u));
        TRY(opt_u64(item, "ttl_ms", c, &present, &u));
        TRY(opt_str(item, "fence_gt", c, &s));
        TRY(opt_str(item, "same_as", c, &s));
    }
    return 0;
}

static int validate_holders(const cJSON *items, const char *ctx) {
    int i = 0;
    for (const cJSON *item = items->child; item; item = item->next, i++) {
        char c[512];
        snprintf(c, sizeof c, "%s[%d]", ctx, i);
        TRY(check_object(item, c, HOLDER_KEYS));
        const char *s;
        uint32_t p;
        TRY(opt_str(item, "session", c, &s));
        TRY(opt_str(item, "resource", c, &s));
        TRY(opt_str(item, "predicate", c, &s));
        if (s) TRY(predicate_code(c, s, &p));
    }
    return 0;
}

static int validate_event(const cJSON *v, const char *ctx_in) {
    const cJSON *kind = get(v, "event");
    const char *const *allowed = EVENT_KEYS;
    char ctx[600];
    snprintf(ctx, sizeof ctx, "%.500s", ctx_in);
    if (cJSON_IsObject(v) && kind) {
        if (!is_str(kind)) return fail("%s: `event` must be a string, got %s", ctx, show(kind));
        allowed = NULL;
        for (size_t i = 0; i < sizeof EVENT_KINDS / sizeof EVENT_KINDS[0]; i++)
            if (strcmp(EVENT_KINDS[i].kind, kind->valuestring) == 0) allowed = EVENT_KINDS[i].keys;
        if (!allowed)
            return fail("%s: unknown event \"%s\" (known: GRANTED, WAIT_TIMEOUT, DIED, LEASE_EXPIRED, WOUNDED, "
                        "SESSION_CLOSED)",
                        ctx, kind->valuestring);
        snprintf(ctx, sizeof ctx, "%.500s (%.60s)", ctx_in, kind->valuestring);
    }
    TRY(check_object(v, ctx, allowed));
    const char *s;
    const cJSON *list;
    bool present;
    uint64_t lo, hi;
    TRY(opt_str(v, "ticket", ctx, &s));
    TRY(opt_str(v, "session", ctx, &s));
    TRY(opt_str(v, "lease", ctx, &s));
    TRY(opt_str(v, "by", ctx, &s));
    TRY(opt_array(v, "leases", ctx, &list));
    if (list) {
        char c[700];
        snprintf(c, sizeof c, "%.600s: leases", ctx);
        TRY(validate_leases(list, c));
    }
    TRY(opt_range(v, "retry_after_ms", ctx, &present, &lo, &hi));
    TRY(opt_str_list(v, "lost_leases", ctx, &list));
    TRY(opt_str_list(v, "lost_tickets", ctx, &list));
    return 0;
}

/* Heartbeat outcome name: "OK" or one of HEARTBEAT_ERRORS. */
static int outcome_name(const char *ctx, const char *name) {
    if (strcmp(name, "OK") == 0) return 0;
    uint32_t code;
    TRY(error_name(ctx, name, &code));
    if (!one_of(name, HEARTBEAT_ERRORS))
        return fail("%s: a heartbeat outcome is OK, LEASE_EXPIRED, LEASE_RELEASED, NOT_OWNER, UNKNOWN_LEASE or "
                    "LIFETIME_EXCEEDED, got \"%s\"",
                    ctx, name);
    return 0;
}

static int validate_expect(const cJSON *e, const Action *action) {
    char ctx[256];
    snprintf(ctx, sizeof ctx, "expect of %s", action->name);
    static const char *const common[] = {"error", "events", NULL};
    TRY(check_keys2(e, ctx, common, action->expect, NULL));
    const char *s;
    uint32_t code;
    TRY(opt_str(e, "error", ctx, &s));
    if (s) {
        TRY(error_name(ctx, s, &code));
        for (const cJSON *c = e->child; c; c = c->next)
            if (strcmp(c->string, "error") != 0 && strcmp(c->string, "events") != 0)
                return fail("%s: `error` cannot be combined with `%s` (a failed call returns nothing else)", ctx,
                            c->string);
    }
    const char *verdict;
    TRY(opt_str(e, "verdict", ctx, &verdict));
    if (verdict && !one_of(verdict, VERDICTS))
        return fail("%s: `verdict` must be one of GRANTED, WAIT, DIE, got \"%s\"", ctx, verdict);
    const cJSON *list;
    char c[512];
    TRY(opt_array(e, "leases", ctx, &list));
    if (list) {
        snprintf(c, sizeof c, "%s: leases", ctx);
        TRY(validate_leases(list, c));
    }
    TRY(opt_str(e, "ticket", ctx, &s));
    TRY(opt_str_list(e, "held_by", ctx, &list));
    bool present;
    uint64_t lo, hi, u;
    TRY(opt_range(e, "retry_after_ms", ctx, &present, &lo, &hi));
    const cJSON *map;
    TRY(opt_object(e, "results", ctx, &map));
    for (const cJSON *r = map ? map->child : NULL; r; r = r->next) {
        snprintf(c, sizeof c, "%s: results[\"%s\"]", ctx, r->string);
        if (is_str(r)) {
            TRY(outcome_name(c, r->valuestring));
        } else {
            TRY(check_object(r, c, OUTCOME_KEYS));
            TRY(opt_str(r, "status", c, &s));
            if (s) TRY(outcome_name(c, s));
            TRY(opt_u64(r, "expires_at", c, &present, &u));
            if (present && s && strcmp(s, "OK") != 0) return fail("%s: `expires_at` only goes with status OK", c);
        }
    }
    for (const cJSON *r = map ? map->child : NULL; r; r = r->next)
        for (const cJSON *d = r->next; d; d = d->next)
            if (strcmp(r->string, d->string) == 0) return fail("%s: results: duplicate key `%s`", ctx, r->string);
    int released;
    TRY(opt_bool(e, "released", ctx, &released));
    TRY(opt_object(e, "status", ctx, &map));
    for (const cJSON *r = map ? map->child : NULL; r; r = r->next) {
        snprintf(c, sizeof c, "%s: status[\"%s\"]", ctx, r->string);
        if (is_str(r)) {
            if (!one_of(r->valuestring, STATUSES))
                return fail("%s: `status` must be one of ACTIVE, EXPIRED, RELEASED, NOT_OWNER, UNKNOWN, got \"%s\"",
                            c, r->valuestring);
        } else {
            TRY(check_object(r, c, OUTCOME_KEYS));
            TRY(opt_str(r, "status", c, &s));
            if (s && !one_of(s, STATUSES))
                return fail("%s: `status` must be one of ACTIVE, EXPIRED, RELEASED, NOT_OWNER, UNKNOWN, got \"%s\"",
                            c, s);
            TRY(opt_u64(r, "expires_at", c, &present, &u));
            if (present && s && strcmp(s, "ACTIVE") != 0)
                return fail("%s: `expires_at` only goes with status ACTIVE", c);
        }
    }
    for (const cJSON *r = map ? map->child : NULL; r; r = r->next)
        for (const cJSON *d = r->next; d; d = d->next)
            if (strcmp(r->string, d->string) == 0) return fail("%s: status: duplicate key `%s`", ctx, r->string);
    TRY(opt_array(e, "holders", ctx, &list));
    if (list) {
        snprintf(c, sizeof c, "%s: holders", ctx);
        TRY(validate_holders(list, c));
    }
    TRY(opt_array(e, "covering", ctx, &list));
    if (list) {
        snprintf(c, sizeof c, "%s: covering", ctx);
        TRY(validate_holders(list, c));
    }
    TRY(opt_array(e, "waiting", ctx, &list));
    int i = 0;
    for (const cJSON *w = list ? list->child : NULL; w; w = w->next, i++) {
        snprintf(c, sizeof c, "%s: waiting[%d]", ctx, i);
        TRY(check_object(w, c, WAITER_KEYS));
        TRY(opt_str(w, "session", c, &s));
        TRY(opt_str(w, "ticket", c, &s));
    }
    const cJSON *deadline = get(e, "deadline");
    if (deadline && !cJSON_IsNull(deadline) && !as_u64(deadline, &u))
        return fail("%s: `deadline` must be a non-negative integer or null, got %s", ctx, show(deadline));
    TRY(opt_str(e, "priority_lt", ctx, &s));
    TRY(opt_u64(e, "epoch", ctx, &present, &u));
    TRY(opt_array(e, "events", ctx, &list));
    i = 0;
    for (const cJSON *ev = list ? list->child : NULL; ev; ev = ev->next, i++) {
        snprintf(c, sizeof c, "%s: events[%d]", ctx, i);
        TRY(validate_event(ev, c));
    }
    if (verdict && strcmp(action->name, "acquire") == 0) {
        const char *wrong = NULL;
        if (strcmp(verdict, "GRANTED") == 0)
            wrong = get(e, "ticket") ? "ticket" : get(e, "held_by") ? "held_by" : get(e, "retry_after_ms") ? "retry_after_ms" : NULL;
        else if (strcmp(verdict, "WAIT") == 0)
            wrong = get(e, "leases") ? "leases" : get(e, "retry_after_ms") ? "retry_after_ms" : NULL;
        else
            wrong = get(e, "leases") ? "leases" : get(e, "ticket") ? "ticket" : NULL;
        if (wrong) return fail("%s: `%s` cannot go with verdict %s", ctx, wrong, verdict);
    }
    return 0;
}

/* Validates a whole step: its keys for its `do`, their types, and its expect. */
static int validate_step(const cJSON *step, const Action **out_action) {
    const cJSON *d = get(step, "do");
    if (!cJSON_IsObject(step)) return fail("step must be an object, got %s", show(step));
    if (!d) return fail("step: missing required key `do`");
    if (!is_str(d)) return fail("step: `do` must be a string, got %s", show(d));
    const Action *action = find_action(d->valuestring);
    if (!action)
        return fail("unknown `do` \"%s\" (known: open, close, suspend, digest, resume, acquire, heartbeat, release, "
                    "release_all, reconcile, cancel_wait, advance, resource_state, next_deadline)",
                    d->valuestring);
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s step", action->name);
    static const char *const base[] = {"now", "do", "expect", NULL};
    TRY(check_keys2(step, ctx, base, action->fields, NULL));
    uint64_t u;
    bool present;
    const char *s;
    const cJSON *list;
    int b;
    TRY(req_u64(step, "now", ctx, &u));
    for (const char *const *f = action->fields; *f; f++) {
        const char *key = *f;
        if (strcmp(key, "intents") == 0 || (strcmp(key, "leases") == 0 && strcmp(action->name, "reconcile") == 0)) {
            if (!get(step, key)) return fail("%s: missing required key `%s`", ctx, key);
            TRY(opt_str_list(step, key, ctx, &list));
        } else if (strcmp(key, "leases") == 0) { /* heartbeat */
            const cJSON *v = get(step, key);
            if (!v) return fail("%s: missing required key `leases`", ctx);
            if (!(is_str(v) && strcmp(v->valuestring, "all") == 0) && !is_str_list(v))
                return fail("%s: `leases` must be \"all\" or a list of aliases", ctx);
        } else if (strcmp(key, "ttl_ms") == 0 || strcmp(key, "wait_timeout_ms") == 0) {
            TRY(opt_u64(step, key, ctx, &present, &u));
        } else if (strcmp(key, "wait") == 0) {
            TRY(opt_bool(step, key, ctx, &b));
        } else if (strcmp(key, "tamper") == 0) {
            const cJSON *t = get(step, key);
            if (t) {
                TRY(check_object(t, "tamper", TAMPER_KEYS));
                TRY(opt_str(t, "agent_id", "tamper", &s));
                TRY(opt_str(t, "namespace", "tamper", &s));
                const cJSON *sid = get(t, "session_id");
                if (sid && !is_str(sid) && !as_u64(sid, &u))
                    return fail("tamper: `session_id` must be a session alias or a number, got %s", show(sid));
                TRY(opt_u64(t, "priority_timestamp", "tamper", &present, &u));
                TRY(opt_u64(t, "epoch", "tamper", &present, &u));
            }
        } else if (strcmp(key, "as") == 0 || strcmp(key, "namespace") == 0) {
            TRY(opt_str(step, key, ctx, &s));
        } else { /* agent, session, digest, lease, ticket, resource: required strings */
            TRY(req_str(step, key, ctx, &s));
        }
    }
    const cJSON *e = get(step, "expect");
    if (e) TRY(validate_expect(e, action));
    *out_action = action;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Checking answers                                                                           */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    uint64_t session, priority;
} Priority;

typedef struct {
    klock_kernel *kernel;
    Aliases aliases;
    Priority *priorities;
    size_t np, capp;
} Runner;

static bool priority_of(const Runner *r, uint64_t session, uint64_t *out) {
    for (size_t i = 0; i < r->np; i++)
        if (r->priorities[i].session == session) {
            *out = r->priorities[i].priority;
            return true;
        }
    return false;
}

static void set_priority(Runner *r, uint64_t session, uint64_t priority) {
    for (size_t i = 0; i < r->np; i++)
        if (r->priorities[i].session == session) {
            r->priorities[i].priority = priority;
            return;
        }
    if (r->np == r->capp) {
        r->capp = r->capp ? r->capp * 2 : 16;
        r->priorities = xrealloc(r->priorities, r->capp * sizeof *r->priorities);
    }
    r->priorities[r->np].session = session;
    r->priorities[r->np].priority = priority;
    r->np++;
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Matches lease objects against leases in order, binding `as`. */
static int match_leases(const char *what, const cJSON *expected, const klock_lease *got, size_t n, Aliases *a) {
    size_t want = (size_t)cJSON_GetArraySize(expected);
    if (want != n) {
        Buf b = {0};
        describe_leases(&b, got, n, a);
        fail("%s: expected %zu leases, got %zu: %s", what, want, n, b.p);
        free(b.p);
        return -1;
    }
    size_t i = 0;
    for (const cJSON *e = expected->child; e; e = e->next, i++) {
        const klock_lease *g = &got[i];
        const cJSON *v;
        if ((v = get(e, "resource")) && strcmp(v->valuestring, g->resource) != 0)
            return fail("%s[%zu].resource: expected \"%s\", got \"%s\"", what, i, v->valuestring, g->resource);
        if ((v = get(e, "predicate")) && strcmp(v->valuestring, klock_predicate_name(g->predicate)) != 0)
            return fail("%s[%zu].predicate: expected %s, got %s", what, i, v->valuestring,
                        klock_predicate_name(g->predicate));
        uint64_t u;
        if ((v = get(e, "expires_at")) && as_u64(v, &u) && u != g->expires_at)
            return fail("%s[%zu].expires_at: expected %" PRIu64 ", got %" PRIu64, what, i, u, g->expires_at);
        if ((v = get(e, "ttl_ms")) && as_u64(v, &u) && u != g->ttl_ms)
            return fail("%s[%zu].ttl_ms: expected %" PRIu64 ", got %" PRIu64, what, i, u, g->ttl_ms);
        uint64_t id, fence;
        if ((v = get(e, "fence_gt"))) {
            if (bound_lease(a, v->valuestring, &id, &fence) != 0) return wrap("%s[%zu].fence_gt: ", what, i);
            if (g->fence <= fence)
                return fail("%s[%zu].fence_gt: expected a fence greater than %s's %" PRIu64 ", got %" PRIu64, what,
                            i, v->valuestring, fence, g->fence);
        }
        if ((v = get(e, "same_as"))) {
            if (bound_lease(a, v->valuestring, &id, &fence) != 0) return wrap("%s[%zu].same_as: ", what, i);
            if (g->lease_id != id)
                return fail("%s[%zu].same_as: expected lease %s, got %s", what, i, label(a, K_LEASE, id),
                            label(a, K_LEASE, g->lease_id));
        }
        if ((v = get(e, "as")) && bind(a, v->valuestring, K_LEASE, g->lease_id, g->fence, NULL) != 0)
            return wrap("%s[%zu].as: ", what, i);
    }
    return 0;
}

/* Compares a set of session aliases with the sessions that came back. */
static int session_set(const char *what, const cJSON *expected, const uint64_t *got, size_t n, Aliases *a) {
    size_t wn = (size_t)cJSON_GetArraySize(expected);
    uint64_t *want = xmalloc(wn * sizeof *want), *have = xmalloc(n * sizeof *have);
    size_t i = 0;
    int rc = 0;
    for (const cJSON *e = expected->child; e; e = e->next) {
        if (resolve(a, e->valuestring, K_SESSION, &want[i++]) != 0) {
            rc = -1;
            goto out;
        }
    }
    qsort(want, wn, sizeof *want, cmp_u64);
    for (i = 1; i < wn; i++)
        if (want[i] == want[i - 1]) {
            rc = fail("%s: the expected set %s names a session twice", what, show(expected));
            goto out;
        }
    memcpy(have, got, n * sizeof *have);
    qsort(have, n, sizeof *have, cmp_u64);
    if (!ids_equal(want, wn, have, n)) {
        Buf b = {0};
        buf_puts(&b, "{");
        for (i = 0; i < wn; i++) buf_printf(&b, "%s%s", i ? ", " : "", label(a, K_SESSION, want[i]));
        buf_puts(&b, "}, got {");
        for (i = 0; i < n; i++) buf_printf(&b, "%s%s", i ? ", " : "", label(a, K_SESSION, have[i]));
        buf_puts(&b, "}");
        rc = fail("%s: expected %s", what, b.p);
        free(b.p);
    }
out:
    free(want);
    free(have);
    return rc;
}

/* Compares a set of lease or ticket aliases with the ids that came back. */
static int id_set(const char *what, const cJSON *expected, int kind, const uint64_t *got, size_t n, Aliases *a) {
    size_t wn = (size_t)cJSON_GetArraySize(expected);
    uint64_t *want = xmalloc(wn * sizeof *want), *have = xmalloc(n * sizeof *have);
    size_t i = 0;
    int rc = 0;
    for (const cJSON *e = expected->child; e; e = e->next) {
        if (resolve(a, e->valuestring, kind, &want[i++]) != 0) {
            rc = -1;
            goto out;
        }
    }
    qsort(want, wn, sizeof *want, cmp_u64);
    memcpy(have, got, n * sizeof *have);
    qsort(have, n, sizeof *have, cmp_u64);
    if (!ids_equal(want, wn, have, n)) {
        Buf b = {0};
        buf_puts(&b, "{");
        for (i = 0; i < wn; i++) buf_printf(&b, "%s%s", i ? ", " : "", label(a, kind, want[i]));
        buf_puts(&b, "}, got {");
        for (i = 0; i < n; i++) buf_printf(&b, "%s%s", i ? ", " : "", label(a, kind, have[i]));
        buf_puts(&b, "}");
        rc = fail("%s: expected %s", what, b.p);
        free(b.p);
    }
out:
    free(want);
    free(have);
    return rc;
}

static void describe_verdict(Buf *b, const klock_verdict *v, const Aliases *a) {
    switch (v->kind) {
    case KLOCK_VERDICT_GRANTED:
        buf_puts(b, "GRANTED ");
        describe_leases(b, v->leases, v->leases_len, a);
        return;
    case KLOCK_VERDICT_WAIT: buf_printf(b, "WAIT ticket=%s held_by={", label(a, K_TICKET, v->ticket)); break;
    default: buf_printf(b, "DIE retry_after_ms=%" PRIu64 " held_by={", v->retry_after_ms); break;
    }
    for (size_t i = 0; i < v->held_by_len; i++)
        buf_printf(b, "%s%s", i ? ", " : "", label(a, K_SESSION, v->held_by[i].session_id));
    buf_puts(b, "}");
}

static int forbid(const cJSON *expect, const char *key, const klock_verdict *v, const Aliases *a) {
    if (!get(expect, key)) return 0;
    Buf b = {0};
    describe_verdict(&b, v, a);
    fail("`%s` is expected, but the answer is %s", key, b.p);
    free(b.p);
    return -1;
}

static int check_verdict(const cJSON *expect, const klock_verdict *v, Aliases *a) {
    const char *name = klock_verdict_kind_name(v->kind);
    const cJSON *want = get(expect, "verdict");
    if (want && strcmp(want->valuestring, name) != 0) {
        Buf b = {0};
        describe_verdict(&b, v, a);
        fail("verdict: expected %s, got %s", want->valuestring, b.p);
        free(b.p);
        return -1;
    }
    const cJSON *x;
    switch (v->kind) {
    case KLOCK_VERDICT_GRANTED:
        TRY(forbid(expect, "ticket", v, a));
        TRY(forbid(expect, "held_by", v, a));
        TRY(forbid(expect, "retry_after_ms", v, a));
        if ((x = get(expect, "leases"))) TRY(match_leases("leases", x, v->leases, v->leases_len, a));
        break;
    case KLOCK_VERDICT_WAIT:
        TRY(forbid(expect, "leases", v, a));
        TRY(forbid(expect, "retry_after_ms", v, a));
        if ((x = get(expect, "ticket"))) TRY(bind(a, x->valuestring, K_TICKET, v->ticket, 0, NULL));
        break;
    default:
        TRY(forbid(expect, "leases", v, a));
        TRY(forbid(expect, "ticket", v, a));
        if ((x = get(expect, "retry_after_ms"))) {
            uint64_t lo = 0, hi = 0;
            as_u64(x->child, &lo);
            as_u64(x->child->next, &hi);
            if (v->retry_after_ms < lo || v->retry_after_ms > hi)
                return fail("retry_after_ms: expected in [%" PRIu64 ", %" PRIu64 "], got %" PRIu64, lo, hi,
                            v->retry_after_ms);
        }
    }
    if ((x = get(expect, "held_by")) && v->kind != KLOCK_VERDICT_GRANTED) {
        uint64_t *ids = xmalloc(v->held_by_len * sizeof *ids);
        for (size_t i = 0; i < v->held_by_len; i++) ids[i] = v->held_by[i].session_id;
        int rc = session_set("held_by", x, ids, v->held_by_len, a);
        free(ids);
        TRY(rc);
    }
    return 0;
}

static bool asked_for(const uint64_t *ids, size_t n, bool all, uint64_t id) {
    if (all) return true;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static int check_heartbeat(const cJSON *expect, const klock_heartbeat_results *res, const uint64_t *asked,
                           size_t asked_n, bool all, Aliases *a) {
    const cJSON *map = get(expect, "results");
    if (!map) return 0;
    for (const cJSON *r = map->child; r; r = r->next) {
        const char *alias = r->string;
        uint64_t id;
        TRY(resolve(a, alias, K_LEASE, &id));
        if (!asked_for(asked, asked_n, all, id))
            return fail("results names \"%s\", which the heartbeat did not ask about", alias);
        const char *want_status = is_str(r) ? r->valuestring : get(r, "status") ? get(r, "status")->valuestring : NULL;
        const cJSON *at_v = is_str(r) ? NULL : get(r, "expires_at");
        uint64_t at = 0;
        if (at_v) as_u64(at_v, &at);
        size_t found = 0;
        for (size_t i = 0; i < res->len; i++) {
            const klock_heartbeat_result *h = &res->items[i];
            if (h->lease_id != id) continue;
            found++;
            const char *got = h->status == KLOCK_OK ? "OK" : klock_status_name(h->status);
            if (want_status && strcmp(want_status, got) != 0)
                return fail("results[%s]: expected \"%s\", got \"%s\"", alias, want_status, got);
            if (at_v) {
                if (h->status != KLOCK_OK)
                    return fail("results[%s]: expected OK with expires_at %" PRIu64 ", got %s", alias, at, got);
                if (h->expires_at != at)
                    return fail("results[%s].expires_at: expected %" PRIu64 ", got %" PRIu64, alias, at,
                                h->expires_at);
            }
        }
        if (!found) {
            Buf b = {0};
            for (size_t i = 0; i < res->len; i++)
                buf_printf(&b, "%s%s: %s", i ? ", " : "", label(a, K_LEASE, res->items[i].lease_id),
                           klock_status_name(res->items[i].status));
            fail("results: no outcome for %s (got %s)", alias, b.p ? b.p : "");
            free(b.p);
            return -1;
        }
    }
    return 0;
}

static int check_reconcile(const cJSON *expect, const klock_reconcile_results *res, const uint64_t *asked,
                           size_t asked_n, Aliases *a) {
    const cJSON *map = get(expect, "status");
    if (!map) return 0;
    for (const cJSON *r = map->child; r; r = r->next) {
        const char *alias = r->string;
        uint64_t id;
        TRY(resolve(a, alias, K_LEASE, &id));
        if (!asked_for(asked, asked_n, false, id))
            return fail("status names \"%s\", which the reconcile did not ask about", alias);
        const klock_lease_check *got = NULL;
        for (size_t i = 0; i < res->len && !got; i++)
            if (res->items[i].lease_id == id) got = &res->items[i];
        if (!got) return fail("status: no answer for %s", alias);
        const char *name = klock_lease_status_name(got->status);
        const char *want = is_str(r) ? r->valuestring : get(r, "status") ? get(r, "status")->valuestring : NULL;
        if (want && strcmp(want, name) != 0) return fail("status[%s]: expected \"%s\", got \"%s\"", alias, want, name);
        const cJSON *at_v = is_str(r) ? NULL : get(r, "expires_at");
        if (at_v) {
            uint64_t at = 0;
            as_u64(at_v, &at);
            if (got->status != KLOCK_LEASE_STATUS_ACTIVE)
                return fail("status[%s]: expected ACTIVE with expires_at %" PRIu64 ", got %s", alias, at, name);
            if (got->expires_at != at)
                return fail("status[%s].expires_at: expected %" PRIu64 ", got %" PRIu64, alias, at, got->expires_at);
        }
    }
    return 0;
}

static int holder_matches(const cJSON *e, const klock_holder *h, Aliases *a, bool *out) {
    const cJSON *v;
    *out = false;
    if ((v = get(e, "session"))) {
        uint64_t id;
        TRY(resolve(a, v->valuestring, K_SESSION, &id));
        if (id != h->session_id) return 0;
    }
    if ((v = get(e, "predicate")) && strcmp(v->valuestring, klock_predicate_name(h->predicate)) != 0) return 0;
    if ((v = get(e, "resource")) && strcmp(v->valuestring, h->resource) != 0) return 0;
    *out = true;
    return 0;
}

static bool augment(size_t row, const bool *fits, size_t cols, bool *seen, long *owner) {
    for (size_t col = 0; col < cols; col++) {
        if (fits[row * cols + col] && !seen[col]) {
            seen[col] = true;
            if (owner[col] < 0 || augment((size_t)owner[col], fits, cols, seen, owner)) {
                owner[col] = (long)row;
                return true;
            }
        }
    }
    return false;
}

/* Order-free: every pattern must match a distinct holder, and the counts must be equal. */
static int check_holders(const char *what, const cJSON *expected, const klock_holder *got, size_t n, Aliases *a) {
    size_t rows = (size_t)cJSON_GetArraySize(expected);
    Buf shown = {0};
    for (size_t j = 0; j < n; j++)
        buf_printf(&shown, "%s%s %s %s", j ? ", " : "", label(a, K_SESSION, got[j].session_id),
                   klock_predicate_name(got[j].predicate), got[j].resource);
    int rc = 0;
    if (rows != n) {
        rc = fail("%s: expected %zu entries, got %zu [%s]", what, rows, n, shown.p ? shown.p : "");
        free(shown.p);
        return rc;
    }
    bool *fits = xmalloc(rows * n * sizeof *fits + 1);
    size_t i = 0;
    for (const cJSON *e = expected->child; e && rc == 0; e = e->next, i++)
        for (size_t j = 0; j < n && rc == 0; j++) rc = holder_matches(e, &got[j], a, &fits[i * n + j]);
    if (rc == 0) {
        long *owner = xmalloc(n * sizeof *owner + 1);
        bool *seen = xmalloc(n * sizeof *seen + 1);
        for (size_t j = 0; j < n; j++) owner[j] = -1;
        bool ok = true;
        for (size_t r = 0; r < rows && ok; r++) {
            memset(seen, 0, n * sizeof *seen);
            ok = augment(r, fits, n, seen, owner);
        }
        if (!ok) rc = fail("%s: expected %s, got [%s]", what, show(expected), shown.p ? shown.p : "");
        free(owner);
        free(seen);
    }
    free(fits);
    free(shown.p);
    return rc;
}

static int check_resource(const cJSON *expect, const klock_resource_state *s, Aliases *a) {
    const cJSON *x;
    if ((x = get(expect, "holders"))) TRY(check_holders("holders", x, s->holders, s->holders_len, a));
    if ((x = get(expect, "covering"))) TRY(check_holders("covering", x, s->covering, s->covering_len, a));
    if ((x = get(expect, "waiting"))) {
        size_t want = (size_t)cJSON_GetArraySize(x);
        Buf q = {0};
        for (size_t i = 0; i < s->waiting_len; i++)
            buf_printf(&q, "%s%s %s", i ? ", " : "", label(a, K_SESSION, s->waiting[i].session_id),
                       label(a, K_TICKET, s->waiting[i].ticket));
        int rc = 0;
        if (want != s->waiting_len) {
            rc = fail("waiting: expected %zu entries, got %zu [%s]", want, s->waiting_len, q.p ? q.p : "");
        } else {
            size_t i = 0;
            for (const cJSON *e = x->child; e && rc == 0; e = e->next, i++) {
                const cJSON *v;
                uint64_t id;
                if ((v = get(e, "session"))) {
                    rc = resolve(a, v->valuestring, K_SESSION, &id);
                    if (rc == 0 && id != s->waiting[i].session_id)
                        rc = fail("waiting[%zu].session: expected %s, got %s (queue: [%s])", i, v->valuestring,
                                  label(a, K_SESSION, s->waiting[i].session_id), q.p);
                }
                if (rc == 0 && (v = get(e, "ticket"))) {
                    rc = resolve(a, v->valuestring, K_TICKET, &id);
                    if (rc == 0 && id != s->waiting[i].ticket)
                        rc = fail("waiting[%zu].ticket: expected %s, got %s (queue: [%s])", i, v->valuestring,
                                  label(a, K_TICKET, s->waiting[i].ticket), q.p);
                }
            }
        }
        free(q.p);
        TRY(rc);
    }
    return 0;
}

static int absent(const char *key, const klock_event *g) {
    return fail("`%s` is expected, but a %s event has none", key, klock_event_kind_name(g->kind));
}

static int check_event(const cJSON *e, const klock_event *g, Aliases *a) {
    const cJSON *v;
    uint64_t id;
    const char *name = klock_event_kind_name(g->kind);
    unsigned kind = (unsigned)g->kind;
    bool has_ticket = kind == KLOCK_EVENT_GRANTED || kind == KLOCK_EVENT_WAIT_TIMEOUT || kind == KLOCK_EVENT_DIED;
    if ((v = get(e, "event")) && strcmp(v->valuestring, name) != 0)
        return fail("event: expected \"%s\", got \"%s\"", v->valuestring, name);
    if ((v = get(e, "session"))) {
        TRY(resolve(a, v->valuestring, K_SESSION, &id));
        if (id != g->session)
            return fail("session: expected %s, got %s", v->valuestring, label(a, K_SESSION, g->session));
    }
    if ((v = get(e, "ticket"))) {
        if (!has_ticket) return absent("ticket", g);
        TRY(resolve(a, v->valuestring, K_TICKET, &id));
        if (id != g->ticket) return fail("ticket: expected %s, got %s", v->valuestring, label(a, K_TICKET, g->ticket));
    }
    if ((v = get(e, "lease"))) {
        if (kind != KLOCK_EVENT_LEASE_EXPIRED) return absent("lease", g);
        TRY(resolve(a, v->valuestring, K_LEASE, &id));
        if (id != g->lease) return fail("lease: expected %s, got %s", v->valuestring, label(a, K_LEASE, g->lease));
    }
    if ((v = get(e, "by"))) {
        if (kind != KLOCK_EVENT_WOUNDED) return absent("by", g);
        TRY(resolve(a, v->valuestring, K_SESSION, &id));
        if (id != g->by) return fail("by: expected %s, got %s", v->valuestring, label(a, K_SESSION, g->by));
    }
    if ((v = get(e, "leases"))) {
        if (kind != KLOCK_EVENT_GRANTED) return absent("leases", g);
        TRY(match_leases("leases", v, g->leases, g->leases_len, a));
    }
    if ((v = get(e, "retry_after_ms"))) {
        if (kind != KLOCK_EVENT_DIED && kind != KLOCK_EVENT_WOUNDED) return absent("retry_after_ms", g);
        uint64_t lo = 0, hi = 0;
        as_u64(v->child, &lo);
        as_u64(v->child->next, &hi);
        if (g->retry_after_ms < lo || g->retry_after_ms > hi)
            return fail("retry_after_ms: expected in [%" PRIu64 ", %" PRIu64 "], got %" PRIu64, lo, hi,
                        g->retry_after_ms);
    }
    if ((v = get(e, "lost_leases"))) {
        if (kind != KLOCK_EVENT_WOUNDED) return absent("lost_leases", g);
        TRY(id_set("lost_leases", v, K_LEASE, g->lost_leases, g->lost_leases_len, a));
    }
    if ((v = get(e, "lost_tickets"))) {
        if (kind != KLOCK_EVENT_WOUNDED) return absent("lost_tickets", g);
        TRY(id_set("lost_tickets", v, K_TICKET, g->lost_tickets, g->lost_tickets_len, a));
    }
    return 0;
}

/* Every drained event against expect.events, in order, nothing missing or extra. */
static int check_events(const cJSON *expected, const Events *got, Aliases *a) {
    size_t want = expected ? (size_t)cJSON_GetArraySize(expected) : 0;
    if (want != got->len) {
        char *all = describe_events(got, a);
        fail("events: expected %zu, got %zu: %s", want, got->len, all);
        free(all);
        return -1;
    }
    size_t i = 0;
    for (const cJSON *e = expected ? expected->child : NULL; e; e = e->next, i++) {
        if (check_event(e, got->items[i], a) != 0) {
            char *all = describe_events(got, a);
            Buf tail = {0};
            buf_printf(&tail, "events[%zu]: ", i);
            buf_puts(&tail, g_why);
            buf_puts(&tail, " (all events: ");
            buf_puts(&tail, all);
            buf_puts(&tail, ")");
            set_why(tail.p);
            free(tail.p);
            free(all);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Running a step                                                                             */
/* ------------------------------------------------------------------------------------------ */

static const char *last_message(void) {
    static char msg[4096];
    klock_last_error_message(msg, sizeof msg, NULL);
    return msg;
}

/* The session's priority as the kernel sees it at `now`, read from a clone's snapshot so the
 * real kernel settles nothing outside the step; false when the session is not open. */
static bool current_priority(const klock_kernel *k, uint64_t session, uint64_t now, uint64_t *out) {
    klock_kernel *clone = NULL;
    char *json = NULL;
    bool found = false;
    if (klock_kernel_clone(k, &clone) == KLOCK_OK && klock_kernel_snapshot_json(clone, now, &json) == KLOCK_OK) {
        char *pre = preprocess(json); /* exact u64s, as in the vectors */
        cJSON *root = cJSON_Parse(pre);
        const cJSON *sessions = cJSON_GetObjectItemCaseSensitive(root, "sessions");
        const cJSON *s;
        cJSON_ArrayForEach(s, sessions) {
            uint64_t id = 0;
            if (as_u64(cJSON_GetObjectItemCaseSensitive(s, "session_id"), &id) && id == session) {
                found = as_u64(cJSON_GetObjectItemCaseSensitive(s, "priority"), out);
                break;
            }
        }
        cJSON_Delete(root);
        free(pre);
    }
    klock_string_free(json);
    klock_kernel_free(clone);
    return found;
}

/* The outputs of one call, freed by outputs_free. */
typedef struct {
    klock_session_info session;
    klock_digest *digest;
    klock_verdict *verdict;
    klock_heartbeat_results *heartbeat;
    bool released;
    size_t released_count;
    klock_reconcile_results *reconcile;
    klock_resource_state *resource;
    bool has_deadline;
    uint64_t deadline;
    /* the request, for `results` / `status` keys */
    uint64_t *asked;
    size_t asked_n;
    bool asked_all;
    const char **intents;
    /* resume: the session's priority in the kernel just before the call */
    bool has_priority_before;
    uint64_t priority_before;
} Outputs;

static void outputs_free(Outputs *o) {
    klock_digest_free(o->digest);
    klock_verdict_free(o->verdict);
    klock_heartbeat_results_free(o->heartbeat);
    klock_reconcile_results_free(o->reconcile);
    klock_resource_state_free(o->resource);
    free(o->asked);
    free(o->intents);
    memset(o, 0, sizeof *o);
}

static int alias_list(Aliases *a, const cJSON *list, int kind, uint64_t **out, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(list);
    *out = xmalloc(*n * sizeof **out);
    size_t i = 0;
    for (const cJSON *c = list->child; c; c = c->next) TRY(resolve(a, c->valuestring, kind, &(*out)[i++]));
    return 0;
}

/* Makes the one call the step names. Returns the status (KLOCK_OK or the error); -1 (as a
 * negative int) when the step cannot even be set up (an alias problem). */
static int call(Runner *r, const Action *action, const cJSON *step, uint64_t now, Outputs *o, klock_status *status) {
    Aliases *a = &r->aliases;
    klock_kernel *k = r->kernel;
    const char *name = action->name;
    const cJSON *v;
    uint64_t session = 0, id = 0;
    if ((v = get(step, "session"))) TRY(resolve(a, v->valuestring, K_SESSION, &session));
    if (strcmp(name, "open") == 0) {
        const char *ns = (v = get(step, "namespace")) ? v->valuestring : "default";
        *status = klock_session_open(k, get(step, "agent")->valuestring, ns, now, &o->session);
    } else if (strcmp(name, "close") == 0) {
        *status = klock_session_close(k, session, now);
    } else if (strcmp(name, "suspend") == 0) {
        *status = klock_session_suspend(k, session, now);
    } else if (strcmp(name, "digest") == 0) {
        *status = klock_session_digest(k, session, now, &o->digest);
    } else if (strcmp(name, "resume") == 0) {
        const char *dname = get(step, "digest")->valuestring;
        Alias *d = find_alias(a, dname);
        if (!d) return fail("digest alias \"%s\" was never bound (bind it with a digest step's `as`)", dname);
        if (d->kind != K_DIGEST) return fail("alias \"%s\" is bound to a %s, not a digest", dname, kind_name(d->kind));
        /* A caller-built copy: the runner's own strings may replace the library's. */
        klock_digest copy = *d->digest;
        const cJSON *t = get(step, "tamper");
        if (t) {
            if ((v = get(t, "agent_id"))) copy.agent_id = v->valuestring;
            if ((v = get(t, "namespace"))) copy.namespace_name = v->valuestring;
            if ((v = get(t, "session_id"))) {
                if (is_str(v))
                    TRY(resolve(a, v->valuestring, K_SESSION, &copy.session_id));
                else
                    as_u64(v, &copy.session_id);
            }
            if ((v = get(t, "priority_timestamp"))) as_u64(v, &copy.priority_timestamp);
            if ((v = get(t, "epoch"))) as_u64(v, &copy.epoch);
        }
        o->has_priority_before = current_priority(k, copy.session_id, now, &o->priority_before);
        *status = klock_session_resume(k, &copy, now, &o->session);
    } else if (strcmp(name, "acquire") == 0) {
        const cJSON *list = get(step, "intents");
        size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
        o->intents = xmalloc(n * sizeof *o->intents);
        for (const cJSON *c = list->child; c; c = c->next) o->intents[i++] = c->valuestring;
        klock_acquire_options opts;
        klock_acquire_options_default(&opts);
        if ((v = get(step, "ttl_ms"))) {
            opts.has_ttl_ms = true;
            as_u64(v, &opts.ttl_ms);
        }
        if ((v = get(step, "wait"))) opts.wait = cJSON_IsTrue(v);
        if ((v = get(step, "wait_timeout_ms"))) {
            opts.has_wait_timeout_ms = true;
            as_u64(v, &opts.wait_timeout_ms);
        }
        *status = klock_session_acquire(k, session, n ? o->intents : NULL, n, &opts, now, &o->verdict);
    } else if (strcmp(name, "heartbeat") == 0) {
        v = get(step, "leases");
        if (is_str(v)) {
            o->asked_all = true;
            *status = klock_lease_heartbeat_all(k, session, now, &o->heartbeat);
        } else {
            TRY(alias_list(a, v, K_LEASE, &o->asked, &o->asked_n));
            *status = klock_lease_heartbeat(k, session, o->asked, o->asked_n, now, &o->heartbeat);
        }
    } else if (strcmp(name, "release") == 0) {
        TRY(resolve(a, get(step, "lease")->valuestring, K_LEASE, &id));
        *status = klock_lease_release(k, session, id, now, &o->released);
    } else if (strcmp(name, "release_all") == 0) {
        *status = klock_session_release_all(k, session, now, &o->released_count);
    } else if (strcmp(name, "reconcile") == 0) {
        TRY(alias_list(a, get(step, "leases"), K_LEASE, &o->asked, &o->asked_n));
        *status = klock_lease_reconcile(k, session, o->asked, o->asked_n, now, &o->reconcile);
    } else if (strcmp(name, "cancel_wait") == 0) {
        TRY(resolve(a, get(step, "ticket")->valuestring, K_TICKET, &id));
        *status = klock_ticket_cancel(k, session, id, now);
    } else if (strcmp(name, "advance") == 0) {
        *status = klock_kernel_advance(k, now);
    } else if (strcmp(name, "resource_state") == 0) {
        const char *ns = (v = get(step, "namespace")) ? v->valuestring : "default";
        *status = klock_resource_get_state(k, get(step, "resource")->valuestring, ns, now, &o->resource);
    } else { /* next_deadline: a pure query, its `now` is ignored */
        *status = klock_kernel_next_deadline(k, &o->has_deadline, &o->deadline);
    }
    return 0;
}

/* Binds the `as` of open and digest, and remembers session priorities. */
static int bind_output(Runner *r, const Action *action, const cJSON *step, Outputs *o) {
    const cJSON *as = get(step, "as");
    if (strcmp(action->name, "open") == 0) {
        if (as) TRY(bind(&r->aliases, as->valuestring, K_SESSION, o->session.session_id, 0, NULL));
        set_priority(r, o->session.session_id, o->session.priority);
    } else if (strcmp(action->name, "resume") == 0) {
        /* A resume never changes the session's priority (SPEC.md §5), which since rev 4 may
         * differ from the one it opened with: compare with the kernel's own view just before. */
        if (o->has_priority_before && o->priority_before != o->session.priority)
            return fail("resume changed the session's priority from %" PRIu64 " to %" PRIu64, o->priority_before,
                        o->session.priority);
        set_priority(r, o->session.session_id, o->session.priority);
    } else if (strcmp(action->name, "digest") == 0 && as) {
        klock_digest *d = o->digest;
        o->digest = NULL; /* owned by the alias table now */
        TRY(bind(&r->aliases, as->valuestring, K_DIGEST, 0, 0, d));
    }
    return 0;
}

static int check_output(Runner *r, const Action *action, const cJSON *expect, Outputs *o) {
    Aliases *a = &r->aliases;
    const char *name = action->name;
    const cJSON *v;
    if (!expect) return 0;
    if (strcmp(name, "open") == 0 || strcmp(name, "resume") == 0) {
        uint64_t u;
        if ((v = get(expect, "epoch")) && as_u64(v, &u) && u != o->session.epoch)
            return fail("epoch: expected %" PRIu64 ", got %" PRIu64, u, o->session.epoch);
        if ((v = get(expect, "priority_lt"))) {
            uint64_t other, theirs;
            TRY(resolve(a, v->valuestring, K_SESSION, &other));
            if (!priority_of(r, other, &theirs))
                return fail("priority_lt: alias \"%s\" names no session opened in this vector", v->valuestring);
            if (o->session.priority >= theirs)
                return fail("priority_lt: the new session's priority %" PRIu64 " is not smaller than %s's %" PRIu64,
                            o->session.priority, v->valuestring, theirs);
        }
    } else if (strcmp(name, "acquire") == 0) {
        TRY(check_verdict(expect, o->verdict, a));
    } else if (strcmp(name, "heartbeat") == 0) {
        TRY(check_heartbeat(expect, o->heartbeat, o->asked, o->asked_n, o->asked_all, a));
    } else if (strcmp(name, "release") == 0) {
        if ((v = get(expect, "released")) && cJSON_IsTrue(v) != o->released)
            return fail("released: expected %s, got %s", cJSON_IsTrue(v) ? "true" : "false",
                        o->released ? "true" : "false");
    } else if (strcmp(name, "reconcile") == 0) {
        TRY(check_reconcile(expect, o->reconcile, o->asked, o->asked_n, a));
    } else if (strcmp(name, "resource_state") == 0) {
        TRY(check_resource(expect, o->resource, a));
    } else if (strcmp(name, "next_deadline") == 0) {
        if ((v = get(expect, "deadline"))) {
            uint64_t want = 0;
            bool want_some = !cJSON_IsNull(v) && as_u64(v, &want);
            if (want_some != o->has_deadline || (want_some && want != o->deadline)) {
                char *w = scratch(), *g = scratch();
                if (want_some) snprintf(w, 512, "Some(%" PRIu64 ")", want); else snprintf(w, 512, "None");
                if (o->has_deadline) snprintf(g, 512, "Some(%" PRIu64 ")", o->deadline); else snprintf(g, 512, "None");
                return fail("deadline: expected %s, got %s", w, g);
            }
        }
    }
    return 0;
}

static void describe_success(Buf *b, const Action *action, const Outputs *o, const Aliases *a) {
    if (strcmp(action->name, "acquire") == 0 && o->verdict)
        describe_verdict(b, o->verdict, a);
    else if (strcmp(action->name, "open") == 0 || strcmp(action->name, "resume") == 0)
        buf_printf(b, "session %s epoch %" PRIu64, label(a, K_SESSION, o->session.session_id), o->session.epoch);
    else if (strcmp(action->name, "release") == 0)
        buf_printf(b, "released=%s", o->released ? "true" : "false");
    else
        buf_printf(b, "%s succeeded", action->name);
}

/* A failed call may only have settled time: same events and state as a plain advance. */
static int check_unchanged(Runner *r, uint64_t now, const Events *settled, const Events *events,
                           const char *before, const char *code) {
    bool same = settled->len == events->len;
    for (size_t i = 0; same && i < events->len; i++) same = event_equal(settled->items[i], events->items[i]);
    if (!same) {
        char *x = describe_events(events, &r->aliases), *y = describe_events(settled, &r->aliases);
        fail("the failed call (%s) emitted %s but settling time alone emits %s", code, x, y);
        free(x);
        free(y);
        return -1;
    }
    char *after = NULL;
    if (klock_kernel_snapshot_json(r->kernel, now, &after) != KLOCK_OK)
        return fail("klock_kernel_snapshot_json failed: %s", last_message());
    size_t extra = 0;
    klock_kernel_pending_events(r->kernel, &extra);
    int rc = 0;
    if (extra != 0)
        rc = fail("taking a snapshot after the failed call emitted %zu events", extra);
    else if (strcmp(before, after) != 0) {
        size_t i = 0;
        while (before[i] && before[i] == after[i]) i++;
        size_t from = i > 60 ? i - 60 : 0;
        rc = fail("the failed call (%s) changed the state beyond settling time: snapshots differ at byte %zu: "
                  "expected ...%.160s, got ...%.160s",
                  code, i, before + from, after + from);
    }
    klock_string_free(after);
    return rc;
}

static int run_step(Runner *r, const cJSON *step) {
    const Action *action = NULL;
    TRY(validate_step(step, &action));
    uint64_t now = 0;
    as_u64(get(step, "now"), &now);
    const cJSON *expect = get(step, "expect");
    const cJSON *want_error = expect ? get(expect, "error") : NULL;
    uint32_t want_code = 0;
    if (want_error) error_code(want_error->valuestring, &want_code);

    Events settled = {0}, events = {0};
    char *before = NULL;
    Outputs o = {0};
    int rc = 0;
    if (want_error) {
        klock_kernel *clone = NULL;
        if (klock_kernel_clone(r->kernel, &clone) != KLOCK_OK) return fail("klock_kernel_clone failed: %s", last_message());
        klock_kernel_advance(clone, now);
        rc = drain(clone, &settled);
        if (rc == 0 && klock_kernel_snapshot_json(clone, now, &before) != KLOCK_OK)
            rc = fail("klock_kernel_snapshot_json failed: %s", last_message());
        klock_kernel_free(clone);
        if (rc) goto out;
    }
    klock_status status = KLOCK_OK;
    rc = call(r, action, step, now, &o, &status);
    char message[4096];
    snprintf(message, sizeof message, "%s", last_message());
    if (rc == 0) rc = drain(r->kernel, &events);
    if (rc) goto out;
    if (!want_error && status == KLOCK_OK) {
        rc = bind_output(r, action, step, &o);
        if (rc == 0) rc = check_output(r, action, expect, &o);
    } else if (!want_error) {
        char *ev = events.len ? describe_events(&events, &r->aliases) : NULL;
        rc = fail("expected success, got error %s: %s%s%s%s", klock_status_name(status), message,
                  ev ? " (events: " : "", ev ? ev : "", ev ? ")" : "");
        free(ev);
    } else if (status == KLOCK_OK) {
        Buf b = {0};
        describe_success(&b, action, &o, &r->aliases);
        rc = fail("expected error %s, got success: %s", want_error->valuestring, b.p);
        free(b.p);
    } else if (status != want_code) {
        rc = fail("error: expected %s, got %s: %s", want_error->valuestring, klock_status_name(status), message);
    } else {
        rc = check_unchanged(r, now, &settled, &events, before, want_error->valuestring);
    }
    if (rc == 0) rc = check_events(expect ? get(expect, "events") : NULL, &events, &r->aliases);
out:
    outputs_free(&o);
    events_free(&settled);
    events_free(&events);
    klock_string_free(before);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Running a vector                                                                           */
/* ------------------------------------------------------------------------------------------ */

static int read_config(const cJSON *v, klock_config *c) {
    klock_config_default(c);
    if (!v) return 0;
    TRY(check_object(v, "config", CONFIG_KEYS));
    const char *policy;
    TRY(opt_str(v, "policy", "config", &policy));
    if (policy) {
        if (strcmp(policy, "wait_die") == 0) c->policy = KLOCK_POLICY_WAIT_DIE;
        else if (strcmp(policy, "wound_wait") == 0) c->policy = KLOCK_POLICY_WOUND_WAIT;
        else if (strcmp(policy, "lanes") == 0) c->policy = KLOCK_POLICY_LANES;
        else return fail("config: `policy`: unknown policy \"%s\": expected wait_die, wound_wait or lanes", policy);
    }
    struct {
        const char *key;
        uint64_t *slot;
    } slots[] = {
        {"seed", &c->seed},
        {"default_ttl_ms", &c->default_ttl_ms},
        {"max_ttl_ms", &c->max_ttl_ms},
        {"default_wait_timeout_ms", &c->default_wait_timeout_ms},
        {"backoff_base_ms", &c->backoff_base_ms},
        {"backoff_cap_ms", &c->backoff_cap_ms},
        {"grace_ms", &c->grace_ms},
        {"session_idle_ms", &c->session_idle_ms},
        {"max_leases_per_session", &c->max_leases_per_session},
        {"max_lease_lifetime_ms", &c->max_lease_lifetime_ms},
    };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        bool present;
        uint64_t u;
        TRY(opt_u64(v, slots[i].key, "config", &present, &u));
        if (present) *slots[i].slot = u;
    }
    return 0;
}

static int run_vector(const cJSON *root) {
    TRY(check_object(root, "file", FILE_KEYS));
    const char *s;
    TRY(req_str(root, "name", "file", &s));
    TRY(opt_str(root, "spec", "file", &s));
    klock_config config;
    TRY(read_config(get(root, "config"), &config));
    const cJSON *steps = get(root, "steps");
    if (!steps) return fail("file: missing required key `steps`");
    if (!cJSON_IsArray(steps)) return fail("file: `steps` must be a list, got %s", show(steps));
    if (!steps->child) return fail("file: `steps` is empty");

    Runner r = {0};
    if (klock_kernel_new(&config, &r.kernel) != KLOCK_OK)
        return fail("config rejected by the kernel: %s: %s", klock_status_name(klock_last_error_status()),
                    last_message());
    int rc = 0, k = 1;
    for (const cJSON *step = steps->child; step; step = step->next, k++) {
        if (run_step(&r, step) != 0) {
            const cJSON *d = cJSON_IsObject(step) ? get(step, "do") : NULL;
            const cJSON *n = cJSON_IsObject(step) ? get(step, "now") : NULL;
            uint64_t now = 0;
            if (d && is_str(d) && n && as_u64(n, &now))
                wrap("step %d: %s @%" PRIu64 ": ", k, d->valuestring, now);
            else
                wrap("step %d: ", k);
            rc = -1;
            break;
        }
    }
    klock_kernel_free(r.kernel);
    aliases_free(&r.aliases);
    free(r.priorities);
    return rc;
}

static char *read_file(const char *path, char *err, size_t errn) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errn, "cannot read the file: %s", strerror(errno));
        return NULL;
    }
    Buf b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf_putn(&b, chunk, n);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        snprintf(err, errn, "cannot read the file: read error");
        return NULL;
    }
    if (!b.p) buf_puts(&b, "");
    if (strlen(b.p) != b.len) {
        free(b.p);
        snprintf(err, errn, "invalid JSON: the file contains a NUL byte");
        return NULL;
    }
    return b.p;
}

static int g_passed, g_failed;

static void report(const char *file, const char *name, const char *why) {
    if (!name) name = "(unnamed)";
    if (why) {
        printf("FAIL %s: %s: %s\n", file, name, why);
        g_failed++;
    } else {
        printf("ok %s: %s\n", file, name);
        g_passed++;
    }
    fflush(stdout);
}

static void run_file(const char *path) {
    char err[512];
    char *text = read_file(path, err, sizeof err);
    if (!text) {
        report(path, NULL, err);
        return;
    }
    char *pre = preprocess(text);
    free(text);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(pre, &end, 1);
    if (!root) {
        size_t at = end ? (size_t)(end - pre) : 0;
        snprintf(err, sizeof err, "invalid JSON near byte %zu: %.40s", at, end ? end : "");
        report(path, NULL, err);
        free(pre);
        return;
    }
    char *name = NULL;
    const cJSON *n = cJSON_IsObject(root) ? get(root, "name") : NULL;
    if (n && is_str(n)) name = xstrdup(n->valuestring);
    g_why[0] = 0;
    int rc = run_vector(root);
    report(path, name, rc == 0 ? NULL : g_why);
    free(name);
    cJSON_Delete(root);
    free(pre);
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static bool ends_with_json(const char *name) {
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".json") == 0;
}

static void run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    DIR *dir = opendir(path);
    if (!dir) {
        char err[512];
        snprintf(err, sizeof err, "cannot list the directory: %s", strerror(errno));
        report(path, NULL, err);
        return;
    }
    char **files = NULL;
    size_t n = 0, cap = 0;
    struct dirent *entry;
    size_t plen = strlen(path);
    bool slash = plen > 0 && path[plen - 1] == '/';
    while ((entry = readdir(dir)) != NULL) {
        if (!ends_with_json(entry->d_name)) continue;
        size_t len = plen + 1 + strlen(entry->d_name) + 1;
        char *full = xmalloc(len);
        snprintf(full, len, "%s%s%s", path, slash ? "" : "/", entry->d_name);
        struct stat fst;
        if (stat(full, &fst) == 0 && S_ISDIR(fst.st_mode)) {
            free(full);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            files = xrealloc(files, cap * sizeof *files);
        }
        files[n++] = full;
    }
    closedir(dir);
    qsort(files, n, sizeof *files, cmp_str);
    for (size_t i = 0; i < n; i++) {
        run_file(files[i]);
        free(files[i]);
    }
    free(files);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: conformance PATH...   (vector files, or directories of *.json vectors)\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fprintf(stderr, "usage: conformance PATH...   (vector files, or directories of *.json vectors)\n");
            return 2;
        }
    }
    for (int i = 1; i < argc; i++) run_path(argv[i]);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    if (g_passed + g_failed == 0) fprintf(stderr, "no vectors found\n");
    return g_failed == 0 && g_passed > 0 ? 0 : 1;
}
