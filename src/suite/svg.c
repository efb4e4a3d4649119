/* svg.c — the bench results as a self-contained SVG: left panel, bars of mean decode and wall
 * tokens/s per prompt with min–max whiskers; right panel, prefill tokens/s against prompt depth
 * (a line through the mean of each depth). Every mark carries data-* attributes with the value
 * it draws, so a test (or a script) can read the numbers back with any XML parser.
 * Invariant: the document is well-formed XML (text is escaped); absent data draws a note.
 * Read next: bench.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* XML-escaped text. */
static void esc(struct snug_sbuf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            snug_sbuf_puts(b, "&lt;");
            break;
        case '>':
            snug_sbuf_puts(b, "&gt;");
            break;
        case '&':
            snug_sbuf_puts(b, "&amp;");
            break;
        case '"':
            snug_sbuf_puts(b, "&quot;");
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n') snug_sbuf_append(b, s, 1);
        }
    }
}

static double stat(const json_t *st, const char *metric, const char *key) {
    json_t *v = json_object_get(json_object_get(st, metric), key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A "nice" axis maximum at or above x. */
static double nice_max(double x) {
    if (!(x > 0)) return 1;
    double e = pow(10, floor(log10(x))), m = x / e;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * e;
}

char *snug_ops_bench_svg(const json_t *bench) {
    const int W = 900, H = 420, PX = 60, PY = 60, PW = 340, PH = 280;
    struct snug_sbuf b = {0};
    snug_sbuf_printf(&b,
                     "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                     "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
                     "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                     W, H, W, H);
    json_t *srv = json_object_get(bench, "server");
    snug_sbuf_puts(&b, "<text x=\"20\" y=\"24\" font-size=\"15\" id=\"title\">snug bench: ");
    esc(&b, json_string_value(json_object_get(srv, "model")));
    snug_sbuf_puts(&b, " @ ");
    esc(&b, json_string_value(json_object_get(srv, "url")));
    snug_sbuf_puts(&b, "</text>\n");

    /* ---- panel 1: tokens/s per prompt ---- */
    json_t *prompts = json_object_get(bench, "prompts");
    double top = 0;
    size_t i;
    json_t *p;
    json_array_foreach(prompts, i, p) {
        json_t *st = json_object_get(p, "stats");
        double m1 = stat(st, "decode_tps", "max"), m2 = stat(st, "wall_tps", "max");
        if (m1 > top) top = m1;
        if (m2 > top) top = m2;
    }
    top = nice_max(top);
    snug_sbuf_printf(&b,
                     "<g id=\"tps\"><text x=\"%d\" y=\"%d\">tokens/s per prompt (mean, "
                     "min-max)</text>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                     "stroke=\"black\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                     "stroke=\"black\"/>\n<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>"
                     "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n",
                     PX, PY - 12, PX, PY, PX, PY + PH, PX, PY + PH, PX + PW, PY + PH, PX - 4,
                     PY + 4, top, PX - 4, PY + PH + 4);
    size_t np = json_array_size(prompts);
    double slot = np ? (double)PW / (double)np : PW;
    static const char *const BARS[][2] = {{"decode_tps", "#4878cf"}, {"wall_tps", "#6acc65"}};
    json_array_foreach(prompts, i, p) {
        json_t *st = json_object_get(p, "stats");
        const char *name = json_string_value(json_object_get(p, "name"));
        for (int k = 0; k < 2; k++) {
            double mean = stat(st, BARS[k][0], "mean");
            double mn = stat(st, BARS[k][0], "min"), mx = stat(st, BARS[k][0], "max");
            if (!isfinite(mean)) continue;
            double bw = slot / 3, x = PX + slot * (double)i + slot / 6 + bw * k;
            double h = mean / top * PH, y = PY + PH - h;
            snug_sbuf_printf(&b, "<rect class=\"bar\" data-prompt=\"");
            esc(&b, name);
            snug_sbuf_printf(&b,
                             "\" data-metric=\"%s\" data-value=\"%.6g\" x=\"%.1f\" "
                             "y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                             BARS[k][0], mean, x, y, bw - 4, h, BARS[k][1]);
            if (isfinite(mn) && isfinite(mx))
                snug_sbuf_printf(&b,
                                 "<line class=\"whisker\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" "
                                 "y2=\"%.1f\" stroke=\"black\"/>\n",
                                 x + (bw - 4) / 2, x + (bw - 4) / 2, PY + PH - mn / top * PH,
                                 PY + PH - mx / top * PH);
        }
        snug_sbuf_printf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">",
                         PX + slot * ((double)i + 0.5), PY + PH + 16);
        esc(&b, name);
        snug_sbuf_puts(&b, "</text>\n");
    }
    snug_sbuf_printf(&b,
                     "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"#4878cf\"/>"
                     "<text x=\"%d\" y=\"%d\">decode</text><rect x=\"%d\" y=\"%d\" width=\"10\" "
                     "height=\"10\" fill=\"#6acc65\"/><text x=\"%d\" y=\"%d\">wall</text>\n",
                     PX, PY + PH + 28, PX + 14, PY + PH + 37, PX + 80, PY + PH + 28, PX + 94,
                     PY + PH + 37);
    if (!np) snug_sbuf_printf(&b, "<text x=\"%d\" y=\"%d\">no runs</text>\n", PX + 10, PY + 20);
    snug_sbuf_puts(&b, "</g>\n");

    /* ---- panel 2: prefill tokens/s vs depth ---- */
    const int QX = PX + PW + 110;
    json_t *pre = json_object_get(bench, "prefill");
    double dmax = 0, vmax = 0;
    json_array_foreach(pre, i, p) {
        double v = stat(p, "prefill_tps", "mean");
        double d = (double)json_integer_value(json_object_get(p, "depth"));
        if (!isfinite(v)) continue;
        if (d > dmax) dmax = d;
        if (v > vmax) vmax = v;
    }
    dmax = nice_max(dmax);
    vmax = nice_max(vmax);
    snug_sbuf_printf(&b,
                     "<g id=\"prefill\"><text x=\"%d\" y=\"%d\">prefill tokens/s vs prompt "
                     "depth (tokens)</text>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                     "stroke=\"black\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                     "stroke=\"black\"/>\n<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>"
                     "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>\n",
                     QX, PY - 12, QX, PY, QX, PY + PH, QX, PY + PH, QX + PW, PY + PH, QX - 4,
                     PY + 4, vmax, QX + PW, PY + PH + 16, dmax);
    struct snug_sbuf line = {0};
    int npts = 0;
    json_array_foreach(pre, i, p) {
        double v = stat(p, "prefill_tps", "mean");
        json_int_t d = json_integer_value(json_object_get(p, "depth"));
        if (!isfinite(v)) continue;
        double x = QX + (double)d / dmax * PW, y = PY + PH - v / vmax * PH;
        snug_sbuf_printf(&b,
                         "<circle class=\"point\" data-depth=\"%lld\" data-value=\"%.6g\" "
                         "cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d65f5f\"/>\n",
                         (long long)d, v, x, y);
        snug_sbuf_printf(&line, "%s%.1f,%.1f", npts++ ? " " : "", x, y);
    }
    if (npts > 1)
        snug_sbuf_printf(&b, "<polyline points=\"%s\" fill=\"none\" stroke=\"#d65f5f\"/>\n",
                         line.data);
    if (!npts)
        snug_sbuf_printf(&b, "<text x=\"%d\" y=\"%d\">no prefill data</text>\n", QX + 10, PY + 20);
    snug_sbuf_free(&line);
    snug_sbuf_puts(&b, "</g>\n</svg>\n");
    if (b.oom) {
        snug_sbuf_free(&b);
        return NULL;
    }
    return b.data;
}
