/* prefetch.c — reading a model file once through the page cache before it is mapped, with
 * progress: the one place where a user waits on the disk (a 16 GiB file takes minutes from a
 * slow drive), so `snug run` and `snug serve` can show bytes read instead of a silent pause,
 * and the first forward does not fault the weights in one page at a time.
 * Invariant: reads only; a file that cannot be opened, or one too big to stay cached (over 80%
 * of physical memory: it would only evict itself), is skipped silently (the model load that
 * follows reports real errors). Allocates one 1 MiB buffer, freed before returning.
 * Read next: src/server/boot.c (the server's loading state), src/cli/cmd_run.c.
 */
#define _GNU_SOURCE /* posix_fadvise */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t snug_file_prefetch(const char *path, snug_prefetch_fn progress, void *user) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    uint64_t total = (uint64_t)st.st_size, done = 0;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && total > (uint64_t)pages * (uint64_t)psz / 10 * 8) {
        close(fd);
        return 0;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    enum { BUF = 1 << 20 };
    char *buf = snug_malloc(BUF);
    if (buf && progress) progress(user, 0, total);
    while (buf) {
        ssize_t n = read(fd, buf, BUF);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (uint64_t)n;
        if (progress) progress(user, done, total);
    }
    snug_free(buf);
    close(fd);
    return done;
}
