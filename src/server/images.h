/* images.h — the images of a chat request (docs/vision.md "Through the server"): image parts in
 * the order the chat template renders them, each a data: URL whose base64 bytes are decoded,
 * their header read (format, size) and checked against the server's vision encoder (the
 * --max-source-pixels bound, the resize into --min/--max-image-pixels); after tokenizing, each
 * image's single <|image_pad|> is widened to its rows·cols pads (src/vision/place.c, as the CLI
 * does), the message marks shifted, and the prefix cache's key made (pads drawn from the image
 * bytes' hash). The engine encodes the bytes when the prefill reaches them.
 * Owns: the decoded bytes and the key (counted allocations, freed with the request).
 * Invariant: every image part is either accepted here or a 400 naming the part and the reason;
 * nothing reaches the engine unchecked. Read next: engine.h (struct snug_engine_image). */
#ifndef SNUG_SERVER_IMAGES_H
#define SNUG_SERVER_IMAGES_H

#include "engine/engine.h"
#include "server/server.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct snug_vision_encoder;
struct snug_tokenizer;

struct snug_srv_images {
    int32_t n;
    struct snug_engine_image img[SNUG_ENGINE_MAX_IMAGES];
    uint8_t *bytes[SNUG_ENGINE_MAX_IMAGES];
    snug_token *key; /* [n_prompt] after snug_srv_images_place */
};

/* A data: URL's payload: "data:[type][;params];base64,DATA" → *out (snug_malloc'd, *n bytes).
 * -1 with a reason in why (why_n bytes) when it is not one (not a data: URL, not base64, a
 * character outside the base64 alphabet — its offset named — or a bad length). */
int snug_srv_data_url(const char *url, size_t len, uint8_t **out, size_t *n, char *why,
                      size_t why_n);

/* Collect and check the image parts of `messages` (chat form). venc NULL: the server has no
 * vision tower, and any image part is a 400 saying so. */
int snug_srv_images_collect(const json_t *messages, const struct snug_vision_encoder *venc,
                            struct snug_srv_images *out, struct snug_server_error *e);
/* After tokenizing: widen the pads in *prompt (replaced by a new counted buffer), shift the
 * marks (token positions, ascending) and ends[0..n_ends) (system_end, last_end, user_end), make
 * the key. */
int snug_srv_images_place(struct snug_srv_images *im, const struct snug_tokenizer *tok,
                          snug_token **prompt, int32_t *n_prompt, int32_t *marks, int32_t n_marks,
                          int32_t *const *ends, int32_t n_ends, struct snug_server_error *e);
void snug_srv_images_free(struct snug_srv_images *im);

#endif /* SNUG_SERVER_IMAGES_H */
