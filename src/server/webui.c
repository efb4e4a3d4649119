/* webui.c — the chat page at GET / (and /index.html): src/server/webui/index.html, embedded
 * in the binary at build time (webui/embed.cmake writes it as a C array), so the server needs
 * no files next to it. Served without authentication (the page itself holds no data and asks
 * for the API key when the API answers 401); `--no-webui` turns the route off (404).
 * Read next: webui/index.html, http.c (the route).
 */
#include "server/server_impl.h"

#include <string.h>

extern const unsigned char snug_webui_index[];
extern const unsigned long snug_webui_index_len;

bool snug_webui_route(const char *url) {
    return !strcmp(url, "/") || !strcmp(url, "/index.html");
}

enum MHD_Result snug_webui_send(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        (size_t)snug_webui_index_len, (void *)snug_webui_index, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    /* the page loads nothing from elsewhere; say so to the browser */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}
