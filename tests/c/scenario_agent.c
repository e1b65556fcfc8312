/*
 * The C remote client (klock_remote_*) as a driver of tests/remote-scenarios/: the runner
 * (python/tests/test_remote_scenarios.py with KLOCK_SCENARIO_DRIVERS=c, started by
 * scripts/test-c.sh) keeps the server, the link and the expectations, and this program makes
 * every call of the client the scenario asks for, through libklock and nothing else.
 *
 *   scenario_agent        (commands on stdin, answers on stdout)
 *
 * One command a line, its fields separated by tabs (an intent has spaces); each is answered
 * with one line at once:
 *
 *   connect CLIENT URL BUDGET_MS      -> ok | error NAME      CLIENT: linked or direct
 *   open SESSION CLIENT               -> ok | error NAME      agent id SESSION, namespace default
 *   enter BLOCK SESSION TTL_MS TIMEOUT_MS INTENT...  -> ok    TTL_MS, TIMEOUT_MS: a number or -
 *   exit BLOCK                        -> ok
 *   check BLOCK                       -> lost - | lost REASON | error NAME
 *   quit                              -> ok, then the program ends
 *
 * `enter` acquires and `exit` releases in a thread of their own (a scenario cuts the link
 * under a call in flight); when the call returns, that thread writes
 *
 *   done BLOCK ok | done BLOCK error NAME
 *
 * NAME is the stable name a failure's message starts with (UNREACHABLE, TIMEOUT, ...); REASON
 * is the name of what ended a lost lease (LEASE_EXPIRED, ...). A malformed command ends the
 * program with a message on stderr and status 2: the runner has a bug. `quit` waits for every
 * thread and frees every handle, so the program ends with nothing left behind.
 */
#define _POSIX_C_SOURCE 200809L /* getline, strtok_r */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klock.h"

#define MAX_NAMED 64
#define MAX_INTENTS 16

typedef struct {
    char name[64];
    klock_remote_client *client;
} named_client;

typedef struct {
    char name[64];
    klock_remote_session *session;
} named_session;

typedef struct {
    char name[64];
    const klock_remote_session *session;
    char *intents[MAX_INTENTS];
    size_t intents_len;
    klock_remote_acquire_options options;
    klock_remote_lease *lease; /* set by the enter thread once granted */
    pthread_t thread;
    bool running; /* a thread was started and not joined yet */
} block;

static named_client clients[2];
static size_t clients_len;
static named_session sessions[MAX_NAMED];
static size_t sessions_len;
static block blocks[MAX_NAMED];
static size_t blocks_len;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *why, const char *line) {
    fprintf(stderr, "scenario_agent: %s: %s\n", why, line ? line : "");
    exit(2);
}

/* One whole line on stdout: the command's thread and the call threads share it. */
static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...) {
    va_list args;
    pthread_mutex_lock(&out);
    va_start(args, format);
    vprintf(format, args);
    va_end(args);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

/* The stable name the last failure's message starts with (up to the first ':' or space), or
 * the status's name when the message is empty. Written into `name`. */
static void failure_name(klock_status status, char *name, size_t len) {
    char message[1024] = "";
    klock_last_error_message(message, sizeof message, NULL);
    size_t n = strcspn(message, ": ");
    if (n == 0) {
        snprintf(name, len, "%s", klock_status_name(status));
        return;
    }
    snprintf(name, len, "%.*s", (int)n, message);
}

/* The reason a lost lease's message names: "LEASE_LOST: REASON: lease ... lost; ...". */
static void lost_reason(char *reason, size_t len) {
    char message[1024] = "";
    klock_last_error_message(message, sizeof message, NULL);
    const char *after = strstr(message, ": ");
    after = after == NULL ? message : after + 2; /* no reason named: the message's first word */
    snprintf(reason, len, "%.*s", (int)strcspn(after, ": "), after);
}

/* Says "PREFIX NAME" for a failed call (NAME: what its message starts with); true if it failed. */
static bool failed(klock_status status, const char *prefix) {
    if (status == KLOCK_OK) return false;
    char name[128];
    failure_name(status, name, sizeof name);
    say("%s\t%s", prefix, name);
    return true;
}

/* The report of a call of block `name` that returned `status`. */
static void report(const char *name, klock_status status) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "done\t%s\terror", name);
    if (!failed(status, prefix)) say("done\t%s\tok", name);
}

static klock_remote_client *client_named(const char *name, const char *line) {
    for (size_t i = 0; i < clients_len; i++)
        if (strcmp(clients[i].name, name) == 0) return clients[i].client;
    die("no such client", line);
    return NULL;
}

static klock_remote_session *session_named(const char *name, const char *line) {
    for (size_t i = 0; i < sessions_len; i++)
        if (strcmp(sessions[i].name, name) == 0) return sessions[i].session;
    die("no such session", line);
    return NULL;
}

static block *block_named(const char *name, const char *line) {
    for (size_t i = 0; i < blocks_len; i++)
        if (strcmp(blocks[i].name, name) == 0) return &blocks[i];
    die("no such block", line);
    return NULL;
}

/* A number of milliseconds, or "-" (`*given` false). */
static uint64_t millis(const char *field, bool *given, const char *line) {
    *given = strcmp(field, "-") != 0;
    if (!*given) return 0;
    char *end = NULL;
    unsigned long long value = strtoull(field, &end, 10);
    /* Digits only: strtoull would also take a sign (and negate) or leading blanks. */
    if (field[0] < '0' || field[0] > '9' || *end != '\0') die("not a number of milliseconds", line);
    return (uint64_t)value;
}

static void join(block *b) {
    if (b->running) {
        pthread_join(b->thread, NULL);
        b->running = false;
    }
}

static void *enter_thread(void *arg) {
    block *b = arg;
    klock_remote_lease *lease = NULL;
    klock_status status = klock_remote_acquire(b->session, (const char *const *)b->intents, b->intents_len,
                                               &b->options, &lease, NULL);
    b->lease = lease; /* NULL when it failed */
    report(b->name, status);
    return NULL;
}

static void *exit_thread(void *arg) {
    block *b = arg;
    report(b->name, klock_remote_lease_release(b->lease));
    return NULL;
}

static void start(block *b, void *(*run)(void *), const char *line) {
    join(b); /* the enter before an exit has returned: the runner awaited it */
    if (pthread_create(&b->thread, NULL, run, b) != 0) die("cannot start a thread", line);
    b->running = true;
}

/* Splits `line` at tabs into `fields` (at most `max`, else the program ends); returns how many. */
static size_t split(char *line, char **fields, size_t max, const char *copy) {
    size_t n = 0;
    char *rest = NULL;
    for (char *f = strtok_r(line, "\t", &rest); f != NULL; f = strtok_r(NULL, "\t", &rest)) {
        if (n == max) die("too many fields", copy);
        fields[n++] = f;
    }
    return n;
}

static void command(char *line) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", line);
    char *f[5 + MAX_INTENTS]; /* enter: 5 fields, then at most MAX_INTENTS intents */
    size_t n = split(line, f, sizeof f / sizeof f[0], copy);
    if (n == 0) die("an empty command", copy);
    if (strcmp(f[0], "connect") == 0 && n == 4) {
        if (clients_len == sizeof clients / sizeof clients[0]) die("too many clients", copy);
        bool given;
        klock_remote_connect_options options;
        klock_remote_connect_options_default(&options);
        options.reconnect_timeout_ms = millis(f[3], &given, copy);
        klock_remote_client *client = NULL;
        if (failed(klock_remote_connect_with(f[2], &options, &client), "error")) return;
        snprintf(clients[clients_len].name, sizeof clients[0].name, "%s", f[1]);
        clients[clients_len++].client = client;
        say("ok");
    } else if (strcmp(f[0], "open") == 0 && n == 3) {
        if (sessions_len == MAX_NAMED) die("too many sessions", copy);
        klock_remote_session *session = NULL;
        if (failed(klock_remote_session_open(client_named(f[2], copy), f[1], NULL, &session), "error")) return;
        snprintf(sessions[sessions_len].name, sizeof sessions[0].name, "%s", f[1]);
        sessions[sessions_len++].session = session;
        say("ok");
    } else if (strcmp(f[0], "enter") == 0 && n >= 6) {
        if (blocks_len == MAX_NAMED) die("too many blocks", copy);
        block *b = &blocks[blocks_len];
        memset(b, 0, sizeof *b);
        snprintf(b->name, sizeof b->name, "%s", f[1]);
        b->session = session_named(f[2], copy);
        klock_remote_acquire_options_default(&b->options);
        bool given;
        uint64_t ttl = millis(f[3], &given, copy);
        if (given) b->options.ttl_ms = ttl;
        b->options.timeout_ms = millis(f[4], &b->options.has_timeout_ms, copy);
        for (size_t i = 5; i < n; i++)
            if ((b->intents[b->intents_len++] = strdup(f[i])) == NULL) die("out of memory", copy);
        blocks_len++;
        start(b, enter_thread, copy);
        say("ok");
    } else if (strcmp(f[0], "exit") == 0 && n == 2) {
        block *b = block_named(f[1], copy);
        join(b);
        if (b->lease == NULL) die("exit of a block that holds nothing", copy);
        start(b, exit_thread, copy);
        say("ok");
    } else if (strcmp(f[0], "check") == 0 && n == 2) {
        block *b = block_named(f[1], copy);
        join(b); /* its enter has returned (the runner saw it held): this reads its lease after it */
        if (b->lease == NULL) die("check of a block that holds nothing", copy);
        klock_status status = klock_remote_lease_check(b->lease);
        if (status == KLOCK_OK) {
            say("lost\t-");
        } else if (status == KLOCK_LEASE_LOST) {
            char reason[128];
            lost_reason(reason, sizeof reason);
            say("lost\t%s", reason);
        } else {
            failed(status, "error");
        }
    } else {
        die("not a command", copy);
    }
}

int main(void) {
    char *line = NULL;
    size_t capacity = 0;
    ssize_t len;
    while ((len = getline(&line, &capacity, stdin)) > 0) {
        if (line[len - 1] == '\n') line[len - 1] = '\0';
        if (strcmp(line, "quit") == 0) break;
        command(line);
    }
    free(line);
    for (size_t i = 0; i < blocks_len; i++) {
        join(&blocks[i]);
        klock_remote_lease_free(blocks[i].lease);
        for (size_t k = 0; k < blocks[i].intents_len; k++) free(blocks[i].intents[k]);
    }
    for (size_t i = 0; i < sessions_len; i++) klock_remote_session_free(sessions[i].session);
    for (size_t i = 0; i < clients_len; i++) klock_remote_client_free(clients[i].client);
    say("ok");
    return 0;
}
