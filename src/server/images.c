/* images.c — a chat request's images from their data: URLs to the engine's job (images.h). The
 * parts are the ones the chat renderer writes a vision placeholder for (chat.c render_content:
 * an object with an "image" or "image_url" key, or type "image"), in message and part order —
 * the order of the <|image_pad|> runs in the tokenized prompt, checked when placing.
 * Read next: src/vision/place.c, src/engine/engine.c (slot_prefill_image). */
#include "server/images.h"

#include "core/core.h"
#include "model/model.h"
#include "plan/plan.h"
#include "server/server_impl.h"
#include "tokenizer/tokenizer.h"
#include "vision/image.h"
#include "vision/vision.h"

#include <stdio.h>
#include <string.h>

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62; /* the URL-safe alphabet too */
    if (c == '/' || c == '_') return 63;
    return -1;
}

int snug_srv_data_url(const char *url, size_t len, uint8_t **out, size_t *n, char *why,
                      size_t why_n) {
    *out = NULL;
    *n = 0;
    if (len < 5 || strncmp(url, "data:", 5)) {
        snprintf(why, why_n, "not a data: URL");
        return -1;
    }
    const char *comma = memchr(url, ',', len);
    if (!comma) {
        snprintf(why, why_n, "a data: URL without ',' before its data");
        return -1;
    }
    size_t hl = (size_t)(comma - url);
    if (hl < 12 || strncmp(comma - 7, ";base64", 7)) {
        snprintf(why, why_n, "the data: URL is not base64 (expected data:image/...;base64,...)");
        return -1;
    }
    const unsigned char *d = (const unsigned char *)comma + 1;
    size_t dn = len - hl - 1;
    while (dn > 0 && d[dn - 1] == '=') dn--; /* padding (optional) */
    if (len - hl - 1 - dn > 2 || dn % 4 == 1) {
        snprintf(why, why_n, "base64 data of a bad length (%zu characters)", len - hl - 1);
        return -1;
    }
    size_t bytes = dn / 4 * 3 + (dn % 4 ? dn % 4 - 1 : 0);
    uint8_t *o = snug_malloc(bytes ? bytes : 1);
    if (!o) {
        snprintf(why, why_n, "out of memory for %zu bytes", bytes);
        return -1;
    }
    uint32_t acc = 0;
    size_t k = 0;
    for (size_t i = 0; i < dn; i++) {
        int v = b64_value(d[i]);
        if (v < 0) {
            snprintf(why, why_n, "invalid base64 character 0x%02x at offset %zu of the data", d[i],
                     i);
            snug_free(o);
            return -1;
        }
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            o[k++] = (uint8_t)(acc >> 16), o[k++] = (uint8_t)(acc >> 8), o[k++] = (uint8_t)acc;
            acc = 0;
        }
    }
    if (dn % 4 == 2) o[k++] = (uint8_t)(acc >> 4);
    if (dn % 4 == 3) o[k++] = (uint8_t)(acc >> 10), o[k++] = (uint8_t)(acc >> 2);
    *out = o;
    *n = k;
    return 0;
}

/* FNV-1a, 64 bits: the image's identity in the prefix cache's key (with its grid). */
static uint64_t bytes_hash(const uint8_t *b, size_t n) {
    return snug_fnv1a(SNUG_FNV_OFFSET, b, n) ^ n;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int part_error(struct snug_server_error *e, size_t mi, size_t pi, const char *fmt,
                      const char *a) {
    char msg[600];
    snprintf(msg, sizeof msg, fmt, a);
    snug_server_error_set(e, 400, "invalid_request_error", "messages",
                          "'messages[%zu].content[%zu]': %s", mi, pi, msg);
    return SNUG_ERR_INVALID;
}

static int one_image(const json_t *p, size_t mi, size_t pi, const struct snug_vision_encoder *venc,
                     struct snug_srv_images *out, struct snug_server_error *e) {
    const json_t *iu = json_object_get(p, "image_url");
    const json_t *u = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    if (!u) u = json_object_get(p, "image");
    const char *url = json_string_value(u);
    if (!venc)
        return part_error(e, mi, pi,
                          "an image part, but this server was started without a vision tower "
                          "(--mmproj MMPROJ.gguf)%s",
                          url && (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
                              ? "; and it never fetches http(s) URLs: images go inline as "
                                "data: URLs"
                              : "; send text only");
    if (!url) return part_error(e, mi, pi, "an image part needs image_url.url (a data: URL)%s", "");
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
        return part_error(e, mi, pi,
                          "the server never fetches http(s) URLs: pass the image as a data: URL "
                          "(data:image/png;base64,...)%s",
                          "");
    if (out->n >= SNUG_ENGINE_MAX_IMAGES) {
        char m[32];
        snprintf(m, sizeof m, "%d", SNUG_ENGINE_MAX_IMAGES);
        return part_error(e, mi, pi, "a request holds at most %s images", m);
    }
    char why[200];
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (snug_srv_data_url(url, json_string_length(u), &bytes, &n, why, sizeof why))
        return part_error(e, mi, pi, "the image's URL: %s", why);
    struct snug_err err = {0};
    int32_t w, h, rows, cols;
    int rc = snug_image_probe(bytes, n, &w, &h, &err);
    if (rc == SNUG_OK) rc = snug_vision_encoder_check(venc, w, h, &rows, &cols, &err);
    /* the whole file decodes (a truncated one is refused here, not when the engine encodes it) */
    if (rc == SNUG_OK) rc = snug_image_check(bytes, n, &err);
    if (rc) {
        snug_free(bytes);
        return part_error(e, mi, pi, "%s", err.msg);
    }
    int32_t k = out->n++;
    out->bytes[k] = bytes;
    out->img[k] = (struct snug_engine_image){
        .rows = rows, .cols = cols, .bytes = bytes, .n_bytes = n, .hash = bytes_hash(bytes, n)};
    return SNUG_OK;
}

int snug_srv_images_collect(const json_t *messages, const struct snug_vision_encoder *venc,
                            struct snug_srv_images *out, struct snug_server_error *e) {
    memset(out, 0, sizeof *out);
    size_t mi, pi;
    const json_t *m, *p;
    json_array_foreach(messages, mi, m) {
        const json_t *content = json_object_get(m, "content");
        if (!json_is_array(content)) continue;
        json_array_foreach(content, pi, p) {
            if (!json_is_object(p)) continue;
            const char *type = json_string_value(json_object_get(p, "type"));
            if (!json_object_get(p, "image") && !json_object_get(p, "image_url") &&
                !(type && !strcmp(type, "image")))
                continue;
            int rc = one_image(p, mi, pi, venc, out, e);
            if (rc) {
                snug_srv_images_free(out);
                return rc;
            }
        }
    }
    return SNUG_OK;
}

int snug_srv_images_place(struct snug_srv_images *im, const struct snug_tokenizer *tok,
                          snug_token **prompt, int32_t *n_prompt, int32_t *marks, int32_t n_marks,
                          int32_t *const *ends, int32_t n_ends, struct snug_server_error *e) {
    struct snug_err err = {0};
    struct snug_vision_tokens vt;
    struct snug_image_rows rows[SNUG_ENGINE_MAX_IMAGES];
    int32_t old_first[SNUG_ENGINE_MAX_IMAGES], grow[SNUG_ENGINE_MAX_IMAGES];
    if (snug_vision_tokens(tok, &vt, &err)) {
        snug_server_error_set(e, 400, "invalid_request_error", "messages", "%s", err.msg);
        return err.status;
    }
    for (int32_t k = 0; k < im->n; k++)
        rows[k] = (struct snug_image_rows){0, im->img[k].rows, im->img[k].cols, NULL};
    int64_t cap = snug_vision_placed_len(*prompt, *n_prompt, vt.pad, rows, im->n);
    snug_token *out = cap < (1 << 30) ? snug_malloc((size_t)cap * sizeof *out) : NULL;
    snug_token *key = out ? snug_malloc((size_t)cap * sizeof *key) : NULL;
    int32_t n_out = 0;
    if (!out || !key) {
        snug_free(out);
        snug_server_error_set(e, 500, "server_error", NULL, "out of memory for the prompt");
        return SNUG_ERR_NOMEM;
    }
    if (snug_vision_place(*prompt, *n_prompt, &vt, rows, im->n, false, out, cap, &n_out, old_first,
                          &err)) {
        snug_free(out);
        snug_free(key);
        snug_server_error_set(e, 400, "invalid_request_error", "messages",
                              "the rendered prompt and the image parts disagree: %s", err.msg);
        return SNUG_ERR_INVALID;
    }
    for (int32_t k = 0; k < im->n; k++) { /* pads added at each place */
        int32_t run = 0;
        while (old_first[k] + run < *n_prompt && (*prompt)[old_first[k] + run] == vt.pad) run++;
        grow[k] = rows[k].rows * rows[k].cols - run;
        im->img[k].first = rows[k].first;
    }
    /* a position p of the old ids moves by the pads added at the places before it */
    for (int32_t i = 0; i < n_marks + n_ends; i++) {
        int32_t *p = i < n_marks ? &marks[i] : ends[i - n_marks];
        int32_t add = 0;
        for (int32_t k = 0; k < im->n; k++)
            if (old_first[k] < *p) add += grow[k];
        if (*p > 0) *p += add;
    }
    memcpy(key, out, (size_t)n_out * sizeof *key);
    for (int32_t k = 0; k < im->n; k++) {
        const struct snug_engine_image *g = &im->img[k];
        uint64_t h = g->hash ^ ((uint64_t)g->rows << 40) ^ ((uint64_t)g->cols << 20);
        for (int32_t j = 0; j < g->rows * g->cols; j++)
            key[g->first + j] = (snug_token)(0x40000000u | (mix64(h + (uint64_t)j) & 0x3fffffffu));
    }
    snug_free(*prompt);
    *prompt = out;
    *n_prompt = n_out;
    snug_free(im->key);
    im->key = key;
    return SNUG_OK;
}

void snug_srv_images_free(struct snug_srv_images *im) {
    for (int32_t k = 0; k < im->n; k++) snug_free(im->bytes[k]);
    snug_free(im->key);
    memset(im, 0, sizeof *im);
}

/* ---- boot ---------------------------------------------------------------------------------- */
int snug_srv_vision_boot(struct snug_srv *s, int32_t threads, struct snug_plan *plan,
                         struct snug_err *err) {
    const struct snug_server_opts *o = &s->opts;
    int64_t min_px = o->min_image_pixels ? o->min_image_pixels : SNUG_VISION_MIN_PIXELS;
    int64_t max_px = o->max_image_pixels ? o->max_image_pixels : SNUG_VISION_MAX_PIXELS;
    int64_t max_src = o->max_source_pixels ? o->max_source_pixels : SNUG_VISION_MAX_SOURCE_PIXELS;
    int rc = snug_vision_load(&s->vision, o->mmproj, err);
    if (rc) return rc;
    const struct snug_vision_hparams *vh = snug_vision_hparams(s->vision);
    if (vh->out_dim != snug_model_n_embd(s->model))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "%s projects to %d values per row but the model's hidden size is %d: "
                            "is it this model's mmproj?",
                            o->mmproj, vh->out_dim, snug_model_n_embd(s->model));
    struct snug_vision_tokens vt;
    if ((rc = snug_vision_tokens(s->tok, &vt, err))) return rc;
    rc = snug_vision_encoder_init(&s->venc, s->vision, min_px, max_px, max_src, threads,
                                  o->vision_backend, err);
    if (rc) return rc;
    const struct snug_vision_plan *vp = snug_vision_encoder_plan(s->venc);
    if ((rc = snug_vision_plan_add(vp, plan, err))) return rc;
    if (o->vision_backend) { /* the whole tower on the GPU (vision_backend.c) */
        rc = snug_vision_be_open(&s->vision_be, s->vision, o->vision_backend, vp->max_patches, err);
        if (rc) return rc;
        fprintf(stderr,
                "snug serve: vision tower on the cuda backend (%.1f MiB there, %.1f MiB "
                "planned)\n",
                (double)snug_vision_be_bytes(s->vision_be) / 1048576.0,
                (double)snug_vision_plan_device_total(vp) / 1048576.0);
    }
    if (o->budget && plan->device_total > o->budget)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the memory plan with the vision tower (%.2f GiB for images of up to "
                            "%lld pixels) is %.2f GiB, over --budget %.2f GiB: lower "
                            "--max-image-pixels or --ctx",
                            (double)snug_vision_plan_total(vp) / 1073741824.0, (long long)max_px,
                            (double)plan->device_total / 1073741824.0,
                            (double)o->budget / 1073741824.0);
    fprintf(stderr,
            "snug serve: vision tower %s: images resized into %lld..%lld pixels (at most %lld "
            "tokens each), decoded sources up to %lld pixels; %.2f GiB planned\n",
            o->mmproj, (long long)min_px, (long long)max_px, (long long)vp->max_tokens,
            (long long)max_src, (double)snug_vision_plan_total(vp) / 1073741824.0);
    return SNUG_OK;
}
