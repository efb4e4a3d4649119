/* test.h — the tiny test harness shared by tests/unit and tests/e2e.
 * CHECK records a failure and goes on; the program ends with TEST_DONE(), which prints
 * "N passed, N failed" (the closing line CI reads) and returns the exit status.
 * Fixture-dependent tests call test_fixtures_dir(): it returns the fixtures folder, or NULL
 * after printing a visible SKIP; with SNUG_REQUIRE_FIXTURES=1 a missing folder is a failure.
 * Temporary files and folders: test_tmp_template, under $TMPDIR. Random test inputs:
 * test_rand01, the same sequence on every run and platform. */
#ifndef SNUG_TEST_H
#define SNUG_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int test_passed, test_failed;

/* A name template for mkstemp / mkdtemp in the temporary folder ($TMPDIR, else the system's):
 * "<folder>/<name>_XXXXXX" into buf; returns buf. */
static inline char *test_tmp_template(char *buf, size_t cap, const char *name) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/%s_XXXXXX", t && *t ? t : "/tmp", name);
    return buf;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)", (double)(a),       \
           (double)(b), (double)(tol))

/* A uniform double in [0, 1) (53 bits) from a xorshift64 stream (shifts 13, 7, 17) seeded at
 * 0x9E3779B97F4A7C15: one stream per test program, the same sequence on every run. */
static inline double test_rand01(void) {
    static uint64_t s = 0x9E3779B97F4A7C15ULL;
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (double)(s >> 11) / 9007199254740992.0;
}

#define TEST_DONE()                                                                                \
    (printf("%d passed, %d failed\n", test_passed, test_failed), test_failed ? 1 : 0)

/* The shared fixtures folder (../shared/fixtures next to the checkout, or $SNUG_FIXTURES). */
static inline const char *test_fixtures_dir(void) {
    static char path[4096];
    const char *env = getenv("SNUG_FIXTURES");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        snprintf(path, sizeof path, "%s/../shared/fixtures", SNUG_SOURCE_DIR);
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return path;
    const char *req = getenv("SNUG_REQUIRE_FIXTURES");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: fixtures folder %s is missing and SNUG_REQUIRE_FIXTURES=1\n", path);
        test_failed++;
    } else {
        fprintf(stderr, "SKIP: fixtures folder %s is missing (set SNUG_FIXTURES)\n", path);
    }
    return NULL;
}

#endif
