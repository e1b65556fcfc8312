/*
 * Bad digests fail the same way on every host: runs every case of tests/bad-digests.json (its
 * `description` key states the format and the setup) through the C API, under valgrind in
 * scripts/test-c.sh.
 *
 *   target/klock-c/bad_digests tests/bad-digests.json
 *
 * For each case: a fresh kernel with the default config, klock_session_open("a", "default", 0)
 * (session 1, priority 1), then klock_digest_from_json(case.json) and, when that parses,
 * klock_session_resume(digest, now = 1). The first failing status must be the case's `error`
 * (null = KLOCK_OK and epoch 1; a name = the status of that name, INVALID_ARGUMENT included),
 * with a non-empty message. The file is read strictly: an unknown key, a case without a name,
 * or zero cases fail the run. Prints `FAIL <name>: ...` per failed case, then
 * `bad_digests: N passed, M failed`.
 */
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klock.h"

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    size_t n;
    while (p && (n = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                p = NULL;
                break;
            }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) p[len] = '\0';
    return p;
}

static const char *last_message(void) {
    static char msg[512];
    klock_last_error_message(msg, sizeof msg, NULL);
    return msg;
}

/* The case's outcome: the first failing status (KLOCK_OK if the resume succeeded). `why` gets
 * the error's message, or what else went wrong (then `*problem` is set). */
static klock_status run_case(const char *json, char *why, size_t why_len, bool *problem) {
    klock_config config;
    klock_kernel *k = NULL;
    klock_session_info info;
    if (klock_config_default(&config) != KLOCK_OK || klock_kernel_new(&config, &k) != KLOCK_OK ||
        klock_session_open(k, "a", "default", 0, &info) != KLOCK_OK || info.session_id != 1 || info.priority != 1) {
        snprintf(why, why_len, "the setup failed: %s", last_message());
        *problem = true;
        klock_kernel_free(k);
        return KLOCK_PANIC;
    }
    klock_digest *d = NULL;
    klock_status status = klock_digest_from_json(json, &d);
    if (status == KLOCK_OK) {
        klock_session_info resumed;
        status = klock_session_resume(k, d, 1, &resumed);
        if (status == KLOCK_OK && (resumed.session_id != 1 || resumed.epoch != 1 || resumed.priority != 1)) {
            snprintf(why, why_len, "resumed session %llu with epoch %llu and priority %llu, expected 1, 1, 1",
                     (unsigned long long)resumed.session_id, (unsigned long long)resumed.epoch,
                     (unsigned long long)resumed.priority);
            *problem = true;
        }
    } else if (d != NULL) {
        snprintf(why, why_len, "a failed klock_digest_from_json left a digest behind");
        *problem = true;
    }
    if (!*problem && status != KLOCK_OK) {
        snprintf(why, why_len, "%s", last_message());
        if (!why[0]) {
            snprintf(why, why_len, "the error has no message");
            *problem = true;
        }
    }
    klock_digest_free(d);
    klock_kernel_free(k);
    return status;
}

static bool only_keys(const cJSON *obj, const char *const *keys) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        bool known = false;
        for (const char *const *k = keys; *k; k++) known = known || strcmp(c->string, *k) == 0;
        if (!known) {
            printf("FAIL: unknown key `%s` in tests/bad-digests.json\n", c->string);
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s tests/bad-digests.json\n", argv[0]);
        return 2;
    }
    char *text = read_all(argv[1]);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    static const char *const top_keys[] = {"description", "cases", NULL};
    static const char *const case_keys[] = {"name", "json", "error", "js_error", NULL};
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (!cJSON_IsObject(root) || !only_keys(root, top_keys) || !cJSON_IsArray(cases)) {
        printf("FAIL: %s is not an object with a `cases` array\n", argv[1]);
        cJSON_Delete(root);
        return 1;
    }
    int passed = 0, failed = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
        const cJSON *json = cJSON_GetObjectItemCaseSensitive(c, "json");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(c, "error");
        if (!cJSON_IsObject(c) || !only_keys(c, case_keys) || !cJSON_IsString(name) || !cJSON_IsString(json) ||
            !(cJSON_IsNull(error) || cJSON_IsString(error))) {
            printf("FAIL: case %d: needs a string `name`, a string `json` and `error` (a name or null)\n",
                   passed + failed);
            failed++;
            continue;
        }
        const char *want = cJSON_IsNull(error) ? "OK" : error->valuestring;
        char why[1024] = "";
        bool problem = false;
        klock_status got = run_case(json->valuestring, why, sizeof why, &problem);
        const char *got_name = klock_status_name(got);
        if (strcmp(got_name, want) != 0) {
            printf("FAIL %s: expected %s, got %s (%s)\n", name->valuestring, want, got_name, why);
            failed++;
        } else if (problem) {
            printf("FAIL %s: %s\n", name->valuestring, why);
            failed++;
        } else {
            passed++;
        }
    }
    cJSON_Delete(root);
    printf("bad_digests: %d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
