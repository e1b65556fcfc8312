/*
 * replay PATH...: replays resolved scripts (klock-script/1, docs/VECTORS.md; PATH: a script, or a directory of *.json
 * scripts) through the public C API of include/klock.h. Per script: a kernel from `config`; per step, exactly the call
 * `call` names, at `now`; its answer (or its error's code, name and message), every event drained, and the snapshot at
 * `snapshot_at`, as canonical JSON, must each equal the recorded JSON exactly (every value, every key). Prints `ok
 * <file>: <name>` or `FAIL <file>: <name>: step k: <where>: expected E, got G` per script, then `N passed, M failed`;
 * exits 1 on any failure or when no script ran. A broken script (not JSON, an unknown format or op, a missing key)
 * fails. A JSON `\u0000` is read as 0xC0 0x80, the C API's spelling of U+0000.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klock.h"

typedef cJSON J;
#define MAX_SAFE 9007199254740991.0 /* 2^53 - 1: every number of a script fits, exactly, in a double */
static char bad[512], why[2048];     /* what is wrong with the current script; how its step differs */

/* ---- reading a script ---- */
#define broken(...) (bad[0] ? 0 : snprintf(bad, sizeof bad, __VA_ARGS__)) /* the first problem found is reported */
static const J *at(const J *o, const char *key) {
    const J *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v ? v : (broken("missing key `%s`", key), NULL);
}
static uint64_t number(const J *v, const char *what) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (d >= 0 && d <= MAX_SAFE && d == (double)(uint64_t)d) return (uint64_t)d;
    return broken("`%s` is not an integer from 0 to 2^53-1", what), 0;
}
static uint64_t U(const J *o, const char *key) { return number(at(o, key), key); }
static const char *S(const J *o, const char *key) {
    const J *v = at(o, key);
    return cJSON_IsString(v) ? v->valuestring : (broken("`%s` is not a string", key), "");
}
static const J *list_at(const J *o, const char *key, size_t *n) {
    const J *list = at(o, key);
    if (list && !cJSON_IsArray(list)) broken("`%s` is not a list", key);
    return *n = (size_t)cJSON_GetArraySize(list), list;
}
static const char **texts(const J *o, const char *key, size_t *n) {
    const J *list = list_at(o, key, n), *v;
    const char **out = calloc(*n + 1, sizeof *out), **p = out;
    cJSON_ArrayForEach(v, list) *p++ = cJSON_IsString(v) ? v->valuestring : (broken("`%s`: not a string", key), "");
    return out;
}
static uint64_t *ids(const J *o, const char *key, size_t *n) {
    const J *list = list_at(o, key, n), *v;
    uint64_t *out = calloc(*n + 1, sizeof *out), *p = out;
    cJSON_ArrayForEach(v, list) *p++ = number(v, key);
    return out;
}

static J *parse(char *json) { /* reads `\u0000` as 0xC0 0x80, in place; every other escape is kept whole */
    char *w = strstr(json, "\\u0000") ? json : NULL; /* almost never: skip the copy */
    for (const char *r = json; w && *r;) {
        if (r[0] == '\\' && !strncmp(r + 1, "u0000", 5)) *w++ = (char)0xC0, *w++ = (char)0x80, r += 6;
        else if (r[0] == '\\' && r[1]) *w++ = *r++, *w++ = *r++;
        else *w++ = *r++;
    }
    if (w) *w = 0;
    return cJSON_Parse(json);
}
static J *json(char *text) { /* JSON text the library wrote (then freed); not JSON equals nothing */
    J *value = text ? parse(text) : NULL;
    return klock_string_free(text), value ? value : cJSON_CreateString("(no JSON from the library)");
}

/* ---- C results as canonical JSON (the serde JSON of klock_core's types) ---- */
static J *num(uint64_t v) { /* a double is exact up to 2^53 - 1 only: beyond it, a string that equals nothing */
    return v <= (uint64_t)MAX_SAFE ? cJSON_CreateNumber((double)v) : cJSON_CreateString("(beyond 2^53-1)");
}
static J *str(const char *s) { return cJSON_CreateString(s); }
static J *put(J *o, ...) { /* key, value, ..., NULL; a NULL value puts nothing */
    va_list ap;
    J *value;
    va_start(ap, o);
    for (const char *key; (key = va_arg(ap, const char *));)
        if ((value = va_arg(ap, J *))) cJSON_AddItemToObject(o, key, value);
    return va_end(ap), o;
}
#define OBJ(...) put(cJSON_CreateObject(), __VA_ARGS__, NULL)
static J *list(const void *items, size_t n, size_t size, J *(*one)(const void *)) {
    J *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, one((const char *)items + i * size));
    return a;
}
static J *id(const void *p) { return num(*(const uint64_t *)p); }
/* A field of `x` under its C name, which is the kernel's serde name: a number, a string, a predicate, a list (of its
 * `_len` items, each converted by `one`). IF(cond, field): the field only when `cond` holds. */
#define NUM(f) #f, num(x->f)
#define STR(f) #f, str(x->f)
#define PRED(f) #f, str(klock_predicate_name(x->f))
#define ITEMS(f, one) #f, list(x->f, x->f##_len, sizeof *x->f, one)
#define IF(cond, ...) IF_(cond, __VA_ARGS__)
#define IF_(cond, key, value) key, (cond) ? (value) : NULL
/* One converter per struct: `name(p)` is the object of the fields listed, `x` being `p` as a `const T *`. */
#define CONVERT(name, T, ...)      \
    static J *name(const void *p) { \
        const T *x = p;             \
        return OBJ(__VA_ARGS__);    \
    }
CONVERT(lease, klock_lease, NUM(lease_id), NUM(session_id), STR(agent_id), STR(resource), PRED(predicate), NUM(fence),
        NUM(acquired_at), NUM(expires_at), NUM(ttl_ms))
CONVERT(intent, klock_intent, PRED(predicate), STR(resource))
CONVERT(blocker, klock_blocker, NUM(session_id), STR(agent_id), ITEMS(intents, intent))
#define VERDICT(k) (x->kind == KLOCK_VERDICT_##k)
CONVERT(verdict, klock_verdict, "verdict", str(klock_verdict_kind_name(x->kind)),
        IF(VERDICT(GRANTED), ITEMS(leases, lease)), IF(VERDICT(WAIT), NUM(ticket)),
        IF(VERDICT(DIE), NUM(retry_after_ms)), IF(VERDICT(WAIT) || VERDICT(DIE), ITEMS(held_by, blocker)),
        IF(x->cycle_len > 0, ITEMS(cycle, id))) /* a detect victim's cycle, written only when there is one */
#define EVENT(k) (x->kind == KLOCK_EVENT_##k)
CONVERT(event, klock_event, "event", str(klock_event_kind_name(x->kind)), NUM(session),
        IF(EVENT(GRANTED) || EVENT(WAIT_TIMEOUT) || EVENT(DIED), NUM(ticket)),
        IF(EVENT(GRANTED) || EVENT(ACQUIRED), ITEMS(leases, lease)),
        /* RELEASED's lease ids are `released` in C, `leases` in the kernel's serde names */
        IF(EVENT(RELEASED), "leases", list(x->released, x->released_len, sizeof *x->released, id)),
        IF(EVENT(DIED) || EVENT(WOUNDED), NUM(retry_after_ms)), IF(EVENT(LEASE_EXPIRED), NUM(lease)),
        IF(EVENT(WOUNDED), NUM(by)), IF(EVENT(WOUNDED), ITEMS(lost_leases, id)),
        IF(EVENT(WOUNDED), ITEMS(lost_tickets, id)),
        IF(EVENT(SESSION_CLOSED), "reason", str(klock_close_reason_name(x->close_reason))),
        IF(x->cycle_len > 0, ITEMS(cycle, id)))
CONVERT(session, klock_session_info, NUM(session_id), STR(agent_id), "namespace", str(x->namespace_name),
        NUM(priority), NUM(epoch))
CONVERT(beat, klock_heartbeat_result, NUM(lease_id), "status", str(klock_status_name(x->status)),
        IF(x->status == KLOCK_OK, NUM(expires_at)))
#define ACTIVE (x->status == KLOCK_LEASE_STATUS_ACTIVE)
CONVERT(check, klock_lease_check, NUM(lease_id), "status", str(klock_lease_status_name(x->status)),
        IF(ACTIVE, NUM(expires_at)), IF(ACTIVE, NUM(fence)))
CONVERT(holder, klock_holder, NUM(session_id), STR(agent_id), NUM(lease_id), STR(resource), PRED(predicate),
        NUM(fence), NUM(expires_at))
CONVERT(waiter, klock_waiter, NUM(session_id), STR(agent_id), NUM(ticket), PRED(predicate), NUM(position),
        NUM(deadline))
CONVERT(state, klock_resource_state, STR(resource), "namespace", str(x->namespace_name), ITEMS(holders, holder),
        ITEMS(waiting, waiter), ITEMS(covering, holder))

/* ---- one call, exactly as `c` names it: {"ok": output} or {"error": {code, name, message}} ---- */
/* OP(o, output, k): whether the call is op `o`; if so, its Output (klock_core's serde) is named `output` and holds the
 * answer under the key `k` (NULL: the output "done" holds nothing). */
#define OP(o, output, k) (!strcmp(op, o) && (name = output, key = k, true))
#define ANSWER(call, ...) ((st = (call)) != KLOCK_OK ? NULL : (__VA_ARGS__))
static J *apply(klock_kernel *k, const J *c, uint64_t now) {
    const char *op = S(c, "op"), **strs = NULL, *name = NULL, *key = NULL;
    klock_status st = KLOCK_OK;
    uint64_t s = cJSON_HasObjectItem(c, "session") ? U(c, "session") : 0, *leases = NULL, when = 0;
    size_t n = 0;
    bool flag = false, every = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "leases"));
    char *text = NULL, message[8192] = ""; /* kernel messages are far shorter; a longer one would fail, never pass */
    klock_session_info info;
    klock_verdict *v = NULL;
    klock_digest *d = NULL;
    klock_heartbeat_results *h = NULL;
    klock_reconcile_results *r = NULL;
    klock_resource_state *rs = NULL;
    J *out = NULL;
    if (OP("open", "session", "session"))
        out = ANSWER(klock_session_open(k, S(c, "agent_id"), S(c, "namespace"), now, &info), session(&info));
    else if (OP("resume", "session", "session")) { /* a digest the caller built, e.g. from its own storage */
        const J *dj = at(c, "digest"), *who = at(dj, "identity"), *rec = at(dj, "recovery");
        klock_digest mine = {(uint32_t)U(dj, "version"), S(who, "agent_id"), S(who, "namespace"), U(who, "session_id"),
                             U(who, "priority_timestamp"), U(who, "epoch"), S(rec, "last_phase"), NULL, 0};
        mine.pending_intents = strs = texts(rec, "pending_intents", &mine.pending_intents_len);
        out = ANSWER(klock_session_resume(k, &mine, now, &info), session(&info));
    } else if (OP("close", "done", NULL)) st = klock_session_close(k, s, now);
    else if (OP("suspend", "done", NULL)) st = klock_session_suspend(k, s, now);
    else if (OP("cancel_wait", "done", NULL)) st = klock_ticket_cancel(k, s, U(c, "ticket"), now);
    else if (OP("advance", "done", NULL)) st = klock_kernel_advance(k, now);
    else if (OP("digest", "digest", "digest")) { /* klock_digest_to_json reads every field of the struct */
        if ((st = klock_session_digest(k, s, now, &d)) == KLOCK_OK)
            out = ANSWER(klock_digest_to_json(d, &text), json(text));
    } else if (OP("acquire", "verdict", "verdict")) {
        const J *o = at(c, "options"), *ttl = at(o, "ttl_ms"), *wait = at(o, "wait"), *limit = at(o, "wait_timeout_ms");
        klock_acquire_options opt = {!cJSON_IsNull(ttl), cJSON_IsNull(ttl) ? 0 : U(o, "ttl_ms"), cJSON_IsTrue(wait),
                                     !cJSON_IsNull(limit), cJSON_IsNull(limit) ? 0 : U(o, "wait_timeout_ms")};
        if (!cJSON_IsBool(wait)) broken("`wait` is not a boolean");
        strs = texts(c, "intents", &n);
        out = ANSWER(klock_session_acquire(k, s, strs, n, &opt, now, &v), verdict(v));
    } else if (OP("heartbeat", "heartbeat", "results")) {
        if (!every) leases = ids(c, "leases", &n);
        st = every ? klock_lease_heartbeat_all(k, s, now, &h) : klock_lease_heartbeat(k, s, leases, n, now, &h);
        out = ANSWER(st, list(h->items, h->len, sizeof *h->items, beat));
    } else if (OP("reconcile", "reconcile", "statuses")) {
        leases = ids(c, "leases", &n);
        out = ANSWER(klock_lease_reconcile(k, s, leases, n, now, &r), list(r->items, r->len, sizeof *r->items, check));
    } else if (OP("release", "released", "released"))
        out = ANSWER(klock_lease_release(k, s, U(c, "lease"), now, &flag), cJSON_CreateBool(flag));
    else if (OP("release_all", "released_all", "count")) out = ANSWER(klock_session_release_all(k, s, now, &n), num(n));
    else if (OP("resource_state", "resource_state", "state"))
        out = ANSWER(klock_resource_get_state(k, S(c, "resource"), S(c, "namespace"), now, &rs), state(rs));
    else if (OP("next_deadline", "next_deadline", "deadline"))
        out = ANSWER(klock_kernel_next_deadline(k, &flag, &when), flag ? num(when) : cJSON_CreateNull());
    else broken("unknown op `%s`", op);
    klock_verdict_free(v), klock_digest_free(d), klock_heartbeat_results_free(h), klock_reconcile_results_free(r);
    klock_resource_state_free(rs), free(leases), free(strs);
    if (st == KLOCK_OK) return OBJ("ok", OBJ("output", str(name), key, out));
    klock_last_error_message(message, sizeof message, NULL);
    return OBJ("error", OBJ("code", num(st), "name", str(klock_status_name(st)), "message", str(message)));
}

/* ---- comparison: whether `got` equals `want` exactly; else `why` says where and how ---- */
static bool differ(const char *path, const J *want, const J *got) {
    char *w = want ? cJSON_PrintUnformatted(want) : NULL, *g = got ? cJSON_PrintUnformatted(got) : NULL;
    snprintf(why, sizeof why, "%s: expected %.400s, got %.400s", path, w ? w : "nothing", g ? g : "nothing");
    return free(w), free(g), false;
}
static bool same(const J *want, const J *got, char *path, size_t len) {
    size_t end = strlen(path);
    bool array = cJSON_IsArray(want), ok = got && (want->type & 0xFF) == (got->type & 0xFF);
    ok = ok && (!cJSON_IsNumber(want) || want->valuedouble == got->valuedouble);
    ok = ok && (!cJSON_IsString(want) || !strcmp(want->valuestring, got->valuestring));
    if (!ok || (array && cJSON_GetArraySize(want) != cJSON_GetArraySize(got))) return differ(path, want, got);
    int i = 0;
    for (const J *w = want->child, *g = got->child; w; w = w->next, g = g ? g->next : NULL, i++) { /* lists: in order */
        array ? snprintf(path + end, len - end, "[%d]", i) : snprintf(path + end, len - end, ".%s", w->string);
        if (!same(w, array ? g : cJSON_GetObjectItemCaseSensitive(got, w->string), path, len)) return false;
    }
    for (const J *g = array ? NULL : got->child; g; g = g->next) /* objects: no key beyond the wanted ones */
        if (!cJSON_GetObjectItemCaseSensitive(want, g->string))
            return snprintf(path + end, len - end, ".%s", g->string), differ(path, NULL, g);
    return path[end] = 0, true;
}

/* ---- scripts ---- */
static bool replay(const J *script, int *step) {
    const J *c, *s, *config = at(script, "config");
    const char *parts[] = {"result", "events", "snapshot"};
    klock_config cfg;
    klock_kernel *k = NULL;
    klock_config_default(&cfg);
    if (strcmp(S(script, "format"), "klock-script/1")) broken("unknown format `%s`", S(script, "format"));
    cJSON_ArrayForEach(c, config) {
        klock_status st = strcmp(c->string, "policy") ? klock_config_set_number(&cfg, c->string, U(config, c->string))
                                                      : klock_config_set_policy(&cfg, S(config, "policy"));
        if (st) broken("config `%s`: %s", c->string, klock_status_name(st));
    }
    if (!bad[0] && klock_kernel_new(&cfg, &k)) broken("klock_kernel_new refuses the config");
    bool ok = !bad[0];
    cJSON_ArrayForEach(s, (ok ? at(script, "steps") : NULL)) {
        char *snapshot = NULL, path[512];
        J *got[3] = {apply(k, at(s, "call"), U(s, "now")), cJSON_CreateArray()};
        for (klock_event *e = NULL; klock_kernel_poll_event(k, &e) == KLOCK_OK && e; klock_event_free(e))
            cJSON_AddItemToArray(got[1], event(e));
        klock_kernel_snapshot_json(k, U(s, "snapshot_at"), &snapshot);
        got[2] = json(snapshot);
        for (int i = 0; i < 3; cJSON_Delete(got[i++])) {
            const J *want = at(s, parts[i]);
            ok = ok && want && !bad[0] && same(want, got[i], strcpy(path, parts[i]), sizeof path);
        }
        if (++*step, !ok) break;
    }
    klock_kernel_free(k);
    if (ok && *step == 0) broken("no step");
    return ok && !bad[0];
}

/* ---- files ---- */
static int passed, failed;
static void run(const char *file) {
    FILE *f = fopen(file, "rb");
    long size = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    char *json = size >= 0 ? calloc((size_t)size + 1, 1) : NULL;
    bool read = json && !fseek(f, 0, SEEK_SET) && fread(json, 1, (size_t)size, f) == (size_t)size;
    J *script = read ? parse(json) : NULL;
    const J *name = cJSON_GetObjectItemCaseSensitive(script, "name");
    int step = 0;
    bad[0] = why[0] = 0;
    if (!script) broken(read ? "not JSON" : "cannot read the file");
    bool ok = script && replay(script, &step);
    printf("%s %s: %s", ok ? "ok" : "FAIL", file, cJSON_IsString(name) ? name->valuestring : "(no name)");
    if (ok) passed++, printf("\n");
    else failed++, printf(": step %d: %s%s\n", step, bad[0] ? "bad script: " : "", bad[0] ? bad : why);
    if (f) fclose(f);
    free(json), cJSON_Delete(script);
}
static int is_json(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 5 && !strcmp(e->d_name + n - 5, ".json");
}
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, is_json, alphasort); /* a directory's *.json scripts, in order */
        if (n < 0) run(argv[i]); /* not a directory: a script, or a path that cannot be read (which then fails) */
        for (int j = 0; j < n; free(names[j++])) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
            run(path);
        }
        free(names);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
