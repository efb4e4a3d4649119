/* test_server_images.c — a request image's path before the engine: data: URLs decoded
 * (src/server/images.c snug_srv_data_url: RFC 4648's base64 test vectors, padding optional, the
 * URL-safe alphabet, refusals naming the reason and the offset), and an image's pad run widened
 * in a prompt's ids (src/vision/place.c, shared with the CLI: a single pad becomes rows·cols
 * pads, a full run is kept, other lengths and count mismatches are refused, prepending only when
 * asked). */
#include "core/core.h"
#include "server/images.h"
#include "test.h"
#include "vision/vision.h"

#include <string.h>

static bool url_is(const char *url, const char *want) {
    uint8_t *b = NULL;
    size_t n = 0;
    char why[200];
    int rc = snug_srv_data_url(url, strlen(url), &b, &n, why, sizeof why);
    bool ok = rc == 0 && n == strlen(want) && !memcmp(b, want, n);
    snug_free(b);
    return ok;
}

static bool url_refused(const char *url, const char *reason) {
    uint8_t *b = NULL;
    size_t n = 0;
    char why[200] = {0};
    int rc = snug_srv_data_url(url, strlen(url), &b, &n, why, sizeof why);
    snug_free(b);
    return rc != 0 && !b && strstr(why, reason) != NULL;
}

static void test_data_url(void) {
    /* RFC 4648 section 10 */
    static const char *vec[][2] = {{"", ""},
                                   {"Zg==", "f"},
                                   {"Zm8=", "fo"},
                                   {"Zm9v", "foo"},
                                   {"Zm9vYg==", "foob"},
                                   {"Zm9vYmE=", "fooba"},
                                   {"Zm9vYmFy", "foobar"}};
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        char url[64];
        snprintf(url, sizeof url, "data:image/png;base64,%s", vec[i][0]);
        CHECKF(url_is(url, vec[i][1]), "%s", url);
    }
    CHECK(url_is("data:image/png;base64,Zm9vYg", "foob")); /* padding optional */
    CHECK(url_is("data:;base64,-_8=", "\xfb\xff"));        /* URL-safe alphabet */
    CHECK(url_refused("https://example.com/a.png", "not a data: URL"));
    CHECK(url_refused("data:image/png,Zm9v", "not base64"));
    CHECK(url_refused("data:image/png;base64", "without ','"));
    CHECK(url_refused("data:image/png;base64,Zm9v$mFy", "0x24 at offset 4"));
    CHECK(url_refused("data:image/png;base64,Zm9vY", "bad length"));
    CHECK(url_refused("data:image/png;base64,Zg===", "bad length"));
}

static void test_place(void) {
    const struct snug_vision_tokens vt = {.pad = 9, .start = 7, .end = 8};
    struct snug_image_rows im[2] = {{0, 2, 3, NULL}, {0, 1, 2, NULL}};
    snug_token ids[] = {1, 7, 9, 8, 2, 7, 9, 9, 8, 3}; /* single pad, then a full run of 2 */
    snug_token out[64];
    int32_t n = 0, old[2];
    struct snug_err err = {0};
    CHECK(snug_vision_placed_len(ids, 10, 9, im, 2) >= 15);
    CHECK(snug_vision_place(ids, 10, &vt, im, 2, false, out, 64, &n, old, &err) == SNUG_OK);
    snug_token want[] = {1, 7, 9, 9, 9, 9, 9, 9, 8, 2, 7, 9, 9, 8, 3};
    CHECKF(n == 15 && !memcmp(out, want, sizeof want), "placed %d", n);
    CHECK(im[0].first == 2 && im[1].first == 11 && old[0] == 2 && old[1] == 6);
    /* a run of 3 pads for a 2 x 3 image: refused, naming what it needs */
    snug_token bad[] = {7, 9, 9, 9, 8};
    CHECK(snug_vision_place(bad, 5, &vt, im, 1, false, out, 64, &n, NULL, &err) ==
              SNUG_ERR_INVALID &&
          strstr(err.msg, "needs 6"));
    /* one place, two images */
    CHECK(snug_vision_place(ids, 5, &vt, im, 2, false, out, 64, &n, NULL, &err) ==
              SNUG_ERR_INVALID &&
          strstr(err.msg, "1 image places"));
    /* no place: prepended only when asked */
    snug_token text[] = {1, 2};
    CHECK(snug_vision_place(text, 2, &vt, im, 1, false, out, 64, &n, NULL, &err) ==
          SNUG_ERR_INVALID);
    CHECK(snug_vision_place(text, 2, &vt, im, 1, true, out, 64, &n, old, &err) == SNUG_OK &&
          n == 10 && out[0] == 7 && out[7] == 8 && out[8] == 1 && im[0].first == 1 && old[0] == -1);
    /* too small a buffer */
    CHECK(snug_vision_place(ids, 10, &vt, im, 2, false, out, 8, &n, NULL, &err) ==
          SNUG_ERR_INVALID);
}

int main(void) {
    test_data_url();
    test_place();
    return TEST_DONE();
}
