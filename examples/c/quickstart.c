/*
 * Klock from C in one page: open a session, acquire, handle WAIT by driving advance and
 * draining events, release.
 *
 * Build against an installed libklock (`make -C bindings/c install PREFIX=...`, see
 * bindings/c/README.md), with pkg-config or with CMake (examples/c/CMakeLists.txt):
 *   cc -std=c11 examples/c/quickstart.c $(pkg-config --cflags --libs klock)
 *   cmake -S examples/c -B build -DCMAKE_PREFIX_PATH=PREFIX && cmake --build build
 * or from the checkout, statically (after `cargo build --release -p klock-c`):
 *   gcc -std=c11 -Iinclude examples/c/quickstart.c target/release/libklock.a -lpthread -ldl -lm
 *
 * The kernel never reads a clock: the host passes `now` (milliseconds, any epoch) on every call.
 * This example runs on a virtual clock that jumps straight to the next deadline; a real host
 * sleeps (or arms a timer) until klock_kernel_next_deadline() instead, then calls
 * klock_kernel_advance() with its own clock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "klock.h"

/* Prints the failure of `call` and exits. */
static void check(klock_status status, const char *call) {
    if (status == KLOCK_OK) return;
    char message[256];
    klock_last_error_message(message, sizeof message, NULL); /* truncated safely if longer */
    fprintf(stderr, "%s failed: %s: %s\n", call, klock_status_name(status), message);
    exit(1);
}

int main(void) {
    uint64_t now = 0; /* the host's clock, in ms */
    klock_config config;
    klock_kernel *kernel = NULL;
    check(klock_config_default(&config), "klock_config_default");
    check(klock_kernel_new(&config, &kernel), "klock_kernel_new");

    /* Alice opens first, so she is older (higher priority) than Bob. */
    klock_session_info alice, bob;
    check(klock_session_open(kernel, "alice", NULL, now, &alice), "open alice");
    check(klock_session_open(kernel, "bob", NULL, now, &bob), "open bob");

    /* Bob takes the file for 2 seconds. */
    const char *intents[] = {"MUTATES FILE:/src/auth.ts"};
    klock_acquire_options options;
    klock_acquire_options_default(&options);
    options.has_ttl_ms = true;
    options.ttl_ms = 2000;
    klock_verdict *verdict = NULL;
    check(klock_session_acquire(kernel, bob.session_id, intents, 1, &options, now, &verdict), "bob acquires");
    printf("bob: %s, fence %" PRIu64 "\n", klock_verdict_kind_name(verdict->kind), verdict->leases[0].fence);
    klock_verdict_free(verdict);

    /* Alice wants it too. She is older than Bob, so she WAITs (a younger requester would DIE and
     * retry after verdict->retry_after_ms, keeping its priority). */
    now = 10;
    check(klock_session_acquire(kernel, alice.session_id, intents, 1, NULL, now, &verdict), "alice acquires");
    if (verdict->kind != KLOCK_VERDICT_WAIT) {
        fprintf(stderr, "expected WAIT, got %s\n", klock_verdict_kind_name(verdict->kind));
        return 1;
    }
    uint64_t ticket = verdict->ticket;
    printf("alice: WAIT on ticket %" PRIu64 " behind %s\n", ticket, verdict->held_by[0].agent_id);
    klock_verdict_free(verdict);

    /* The drive loop: drain events; when none resolves the ticket, wait for the next deadline
     * and advance. Bob never heartbeats, so his lease expires and Alice is granted. */
    uint64_t lease_id = 0, fence = 0;
    while (lease_id == 0) {
        klock_event *event = NULL;
        check(klock_kernel_poll_event(kernel, &event), "poll_event");
        if (event) {
            printf("t=%" PRIu64 " event %s (session %" PRIu64 ")\n", now, klock_event_kind_name(event->kind),
                   event->session);
            if (event->kind == KLOCK_EVENT_GRANTED && event->ticket == ticket) {
                lease_id = event->leases[0].lease_id;
                fence = event->leases[0].fence;
            } else if (event->ticket == ticket) { /* WAIT_TIMEOUT, DIED: give up in this example */
                klock_event_free(event);
                fprintf(stderr, "alice's wait ended without a grant\n");
                return 1;
            }
            klock_event_free(event);
            continue;
        }
        bool has_deadline = false;
        uint64_t deadline = 0;
        check(klock_kernel_next_deadline(kernel, &has_deadline, &deadline), "next_deadline");
        if (!has_deadline) {
            fprintf(stderr, "nothing pending, yet the ticket is unresolved\n");
            return 1;
        }
        if (deadline > now) now = deadline; /* a real host sleeps until then */
        check(klock_kernel_advance(kernel, now), "advance");
    }
    printf("alice: holds lease %" PRIu64 " with fence %" PRIu64 " (writes must carry it)\n", lease_id, fence);

    /* Work, heartbeat to keep the lease, then release. */
    now += 500;
    klock_heartbeat_results *beats = NULL;
    check(klock_lease_heartbeat(kernel, alice.session_id, &lease_id, 1, now, &beats), "heartbeat");
    printf("alice: heartbeat %s, expires at %" PRIu64 "\n", klock_status_name(beats->items[0].status),
           beats->items[0].expires_at);
    klock_heartbeat_results_free(beats);
    bool released = false;
    check(klock_lease_release(kernel, alice.session_id, lease_id, now, &released), "release");
    printf("alice: released=%s\n", released ? "true" : "false");

    check(klock_session_close(kernel, alice.session_id, now), "close alice");
    check(klock_session_close(kernel, bob.session_id, now), "close bob");
    klock_kernel_free(kernel);
    return 0;
}
