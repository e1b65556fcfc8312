/*
 * Klock's remote client from C in one page: connect to a `klock serve`, open a session,
 * acquire a file (blocking until granted or the timeout), write with the lease's fence,
 * release, close.
 *
 *   klock serve --memory &                 # listens on http://127.0.0.1:7300
 *   ./remote_quickstart http://127.0.0.1:7300 [TOKEN]
 *
 * Built like examples/c/quickstart.c (pkg-config, CMake, or statically from the checkout:
 *   gcc -std=c11 -Iinclude examples/c/remote_quickstart.c target/release/libklock.a -lpthread -ldl -lm).
 *
 * The client renews a held lease in the background (on its own thread) until it is released
 * or its handle freed; klock_remote_lease_check() says whether it was lost meanwhile.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "klock.h"

/* Prints the failure of `call` (its status and the message, which starts with the stable
 * name: the server's own for a refusal) and exits. */
static void check(klock_status status, const char *call) {
    if (status == KLOCK_OK) return;
    char message[512];
    klock_last_error_message(message, sizeof message, NULL); /* truncated safely if longer */
    fprintf(stderr, "%s failed: %s: %s\n", call, klock_status_name(status), message);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [TOKEN]\n", argv[0]);
        return 2;
    }
    /* NULL token: $KLOCK_TOKEN if set; NULL CA file: $KLOCK_CA (for https://) if set. */
    klock_remote_client *client = NULL;
    check(klock_remote_connect(argv[1], argc > 2 ? argv[2] : NULL, NULL, &client), "connect");
    klock_remote_session *session = NULL;
    check(klock_remote_session_open(client, "quickstart", NULL, &session), "open a session");

    /* Wait up to 10 s for the file; each lease lives 30 s past its last renewal. */
    const char *intents[] = {"MUTATES FILE:/src/auth.ts"};
    klock_remote_acquire_options options;
    check(klock_remote_acquire_options_default(&options), "default options");
    options.ttl_ms = 30000;
    options.has_timeout_ms = true;
    options.timeout_ms = 10000;
    klock_remote_lease *lease = NULL;
    uint64_t retry_after_ms = 0; /* set on KLOCK_DIED: release what you hold, wait, ask again */
    check(klock_remote_acquire(session, intents, 1, &options, &lease, &retry_after_ms), "acquire");
    klock_remote_grant grant;
    check(klock_remote_lease_grant(lease, &grant), "read the grant");
    printf("granted %s, fence %" PRIu64 "\n", grant.leases[0].resource, grant.fence);

    /* ... work on the file, passing grant.fence to the store so it refuses stale writers ... */
    check(klock_remote_lease_check(lease), "still held");
    printf("still held\n");

    check(klock_remote_lease_release(lease), "release");
    printf("released\n");
    klock_remote_lease_free(lease);
    check(klock_remote_session_close(session), "close the session");
    klock_remote_session_free(session);
    klock_remote_client_free(client);
    printf("closed\n");
    return 0;
}
