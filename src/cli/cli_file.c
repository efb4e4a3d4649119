/* cli_file.c — reading a whole input file for a command (a prompt, a text to tokenize, an
 * image): one bounded reader instead of one per command. Invariant: on success the buffer is
 * NUL-terminated (the text commands read it as a string), holds exactly *len bytes and came from
 * snug_malloc (the caller snug_free's it); on failure it returns NULL with a message in err
 * naming `what` and the path. Read next: cli.h.
 */
#include "cli.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

char *cli_read_file(const char *path, const char *what, size_t max_bytes, size_t *len,
                    struct snug_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snug_err_set(err, SNUG_ERR_IO, "cannot open %s %s", what, path);
        return NULL;
    }
    char *b = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && (unsigned long)n <= max_bytes && fseek(f, 0, SEEK_SET) == 0 &&
        (b = snug_malloc((size_t)n + 1)) && fread(b, 1, (size_t)n, f) == (size_t)n) {
        fclose(f);
        b[n] = 0;
        *len = (size_t)n;
        return b;
    }
    snug_err_set(err, SNUG_ERR_IO, "cannot read %s %s (a regular file of at most %zu MiB)", what,
                 path, max_bytes >> 20);
    snug_free(b);
    fclose(f);
    return NULL;
}
