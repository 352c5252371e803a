/* Bad handles, NULL pointers, oversize records and bad options give error
 * codes and messages, never a crash. argv[1]: a directory. */
#define _POSIX_C_SOURCE 200809L /* mkfifo */
#include "check.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    char path[4096], other[4096];
    snprintf(path, sizeof path, "%s/q", argv[1]);
    snprintf(other, sizeof other, "%s/not-a-queue", argv[1]);
    EXPECT(pw_last_error() != NULL);

    pw_queue_options opts = {0};
    opts.chunk_size = 64 * 1024;
    pw_queue_writer *w = NULL;
    OK(pw_queue_writer_open(path, &opts, &w));
    pw_queue_reader *r = NULL;
    OK(pw_queue_reader_open(path, &r));
    const void *data = NULL;
    size_t len = 0;
    uint64_t pos = 0;
    void *slot = NULL;

    /* NULL handles. */
    EXPECT_RC(pw_queue_append(NULL, "x", 1, NULL), -EBADF);
    EXPECT_RC(pw_queue_reserve(NULL, 1, &slot), -EBADF);
    EXPECT_RC(pw_queue_commit(NULL, NULL), -EBADF);
    EXPECT_RC(pw_queue_flush(NULL), -EBADF);
    EXPECT_RC(pw_queue_next(NULL, &data, &len, NULL), -EBADF);
    EXPECT_RC(pw_queue_next_wait(NULL, 0, &data, &len, NULL), -EBADF);
    EXPECT_RC(pw_queue_seek(NULL, 0), -EBADF);
    EXPECT_RC(pw_queue_prepare(NULL, 4096), -EBADF);
    EXPECT_RC(pw_queue_reader_prepare(NULL, 4096, &pos), -EBADF);
    EXPECT_RC(pw_queue_reader_prepare(NULL, 4096, NULL), -EBADF);
    EXPECT_RC(pw_region_ptr(NULL, &slot), -EBADF);
    EXPECT_RC(pw_buffer_resize(NULL, 1, 0), -EBADF);

    /* Made-up handles and handles of another kind. */
    pw_queue_writer *fake = (pw_queue_writer *)(uintptr_t)0x12345678;
    EXPECT_RC(pw_queue_append(fake, "x", 1, NULL), -EBADF);
    EXPECT_RC(pw_queue_writer_close(fake), -EBADF);
    EXPECT_RC(pw_queue_append((pw_queue_writer *)(uintptr_t)UINTPTR_MAX, "x", 1, NULL), -EBADF);
    EXPECT_RC(pw_queue_append((pw_queue_writer *)(void *)r, "x", 1, NULL), -EBADF);
    EXPECT_RC(pw_queue_next((pw_queue_reader *)(void *)w, &data, &len, NULL), -EBADF);
    EXPECT_RC(pw_queue_prepare((pw_queue_writer *)(void *)r, 4096), -EBADF);
    EXPECT_RC(pw_queue_reader_prepare((pw_queue_reader *)(void *)w, 4096, &pos), -EBADF);
    EXPECT_RC(pw_region_free((pw_region *)(void *)w), -EBADF);
    EXPECT_RC(pw_buffer_free((pw_buffer *)(void *)r), -EBADF);
    EXPECT(strstr(pw_last_error(), "pw_buffer") != NULL);

    /* NULL pointers where a pointer is required. */
    EXPECT_RC(pw_queue_append(w, NULL, 1, NULL), -EFAULT);
    EXPECT_RC(pw_queue_reserve(w, 1, NULL), -EFAULT);
    EXPECT_RC(pw_queue_next(r, NULL, &len, NULL), -EFAULT);
    EXPECT_RC(pw_queue_next(r, &data, NULL, NULL), -EFAULT);
    EXPECT_RC(pw_queue_max_payload(w, NULL), -EFAULT);
    EXPECT_RC(pw_queue_writer_open(NULL, NULL, &w), -EFAULT);
    EXPECT_RC(pw_queue_writer_open(other, NULL, NULL), -EFAULT);
    EXPECT_RC(pw_queue_reader_open(NULL, &r), -EFAULT);
    EXPECT_RC(pw_queue_reader_open(path, NULL), -EFAULT);
    EXPECT_RC(pw_region_new(4096, NULL, NULL), -EFAULT);
    EXPECT_RC(pw_buffer_new(4096, NULL, NULL), -EFAULT);
    EXPECT_RC(pw_copy(NULL, "x", 1), -EFAULT);
    EXPECT_RC(pw_copy(&pos, NULL, 1), -EFAULT);
    EXPECT_RC(pw_fill(NULL, 0, 1), -EFAULT);
    OK(pw_copy(NULL, NULL, 0));
    OK(pw_fill(NULL, 0, 0));
    /* A NULL out-pointer does not lose the record: it is still there after. */
    OK(pw_queue_append(w, "kept", 4, NULL));
    EXPECT_RC(pw_queue_next(r, &data, NULL, &pos), -EFAULT);
    OK(pw_queue_next(r, &data, &len, &pos));
    EXPECT(len == 4 && memcmp(data, "kept", 4) == 0);

    /* Oversize records. */
    size_t max = 0;
    OK(pw_queue_max_payload(w, &max));
    char *big = calloc(1, max + 1);
    EXPECT(big != NULL);
    EXPECT_RC(pw_queue_append(w, big, max + 1, NULL), -EMSGSIZE);
    EXPECT(strstr(pw_last_error(), "does not fit") != NULL);
    EXPECT_RC(pw_queue_reserve(w, max + 1, &slot), -EMSGSIZE);
    EXPECT_RC(pw_queue_reserve(w, SIZE_MAX, &slot), -EMSGSIZE);
    OK(pw_queue_append(w, big, max, NULL));
    free(big);

    /* Bad options. */
    pw_queue_writer *w2 = NULL;
    pw_queue_options bad = {0};
    bad.reserved[3] = 1;
    EXPECT_RC(pw_queue_writer_open(other, &bad, &w2), -EINVAL);
    memset(&bad, 0, sizeof bad);
    bad.chunk_size = 1000; /* not a power of two */
    EXPECT_RC(pw_queue_writer_open(other, &bad, &w2), -EINVAL);
    memset(&bad, 0, sizeof bad);
    bad.flags = 1u << 30;
    EXPECT_RC(pw_queue_writer_open(other, &bad, &w2), -EINVAL);
    EXPECT(w2 == NULL);

    /* The queue's own errors. */
    EXPECT_RC(pw_queue_writer_open(path, NULL, &w2), -EBUSY); /* one writer */
    pw_queue_options excl = {0};
    excl.flags = PW_QUEUE_CREATE_NEW;
    EXPECT_RC(pw_queue_writer_open(path, &excl, &w2), -EEXIST);
    excl.flags = PW_QUEUE_NO_CREATE;
    EXPECT_RC(pw_queue_writer_open(other, &excl, &w2), -ENOENT);
    FILE *f = fopen(other, "w");
    EXPECT(f != NULL);
    for (int i = 0; i < 5000; i++) fputc('x', f);
    fclose(f);
    pw_queue_reader *r2 = NULL;
    EXPECT_RC(pw_queue_reader_open(other, &r2), -EBADMSG);
    EXPECT_RC(pw_queue_reader_open("", &r2), -ENOENT);
    /* Paths that are not regular files: a directory is -EISDIR, a FIFO or
     * a device -EINVAL (never -EPERM, which means a link or another user's
     * file), and neither open blocks on the FIFO. */
    char fifo[4096];
    snprintf(fifo, sizeof fifo, "%s/fifo", argv[1]);
    EXPECT(mkfifo(fifo, 0600) == 0);
    EXPECT_RC(pw_queue_writer_open(argv[1], NULL, &w2), -EISDIR);
    EXPECT(strstr(pw_last_error(), "a directory, not a regular file") != NULL);
    EXPECT_RC(pw_queue_reader_open(argv[1], &r2), -EISDIR);
    EXPECT_RC(pw_queue_writer_open(fifo, NULL, &w2), -EINVAL);
    EXPECT(strstr(pw_last_error(), "a FIFO, not a regular file") != NULL);
    EXPECT_RC(pw_queue_reader_open(fifo, &r2), -EINVAL);
    EXPECT_RC(pw_queue_writer_open("/dev/null", &excl, &w2), -EINVAL);
    EXPECT_RC(pw_queue_reader_open("/dev/null", &r2), -EINVAL);
    EXPECT(w2 == NULL && r2 == NULL);
    EXPECT_RC(pw_queue_seek(r, 12345), -EINVAL);

    /* Closed handles stay invalid, also once their slot is reused. */
    OK(pw_queue_reader_close(r));
    EXPECT_RC(pw_queue_next(r, &data, &len, NULL), -EBADF);
    EXPECT_RC(pw_queue_reader_close(r), -EBADF);
    EXPECT_RC(pw_queue_reader_prepare(r, 4096, &pos), -EBADF);
    OK(pw_queue_reader_open(path, &r2));
    EXPECT(r2 != r);
    EXPECT_RC(pw_queue_next(r, &data, &len, NULL), -EBADF);
    OK(pw_queue_next(r2, &data, &len, NULL));
    OK(pw_queue_reader_close(r2));
    OK(pw_queue_writer_close(w));
    EXPECT_RC(pw_queue_append(w, "x", 1, NULL), -EBADF);
    EXPECT_RC(pw_queue_writer_close(w), -EBADF);
    EXPECT_RC(pw_queue_prepare(w, 4096), -EBADF);

    /* Regions, buffers and copies. */
    pw_region *region = NULL;
    EXPECT_RC(pw_region_new(0, NULL, &region), -EINVAL);
    pw_region_options ro = {0};
    ro.pages = 77;
    EXPECT_RC(pw_region_new(4096, &ro, &region), -EINVAL);
    pw_buffer *b = NULL;
    OK(pw_buffer_new(1 << 20, NULL, &b));
    OK(pw_buffer_resize(b, 100, 'a'));
    void *p = NULL;
    OK(pw_buffer_ptr(b, &p));
    EXPECT_RC(pw_buffer_append(b, p, 10), -EINVAL); /* from inside itself */
    EXPECT_RC(pw_buffer_resize(b, SIZE_MAX, 0), -EOVERFLOW);
    OK(pw_buffer_free(b));
    EXPECT_RC(pw_buffer_free(b), -EBADF);
    char area[64];
    EXPECT_RC(pw_copy(area + 8, area, 16), -EINVAL); /* overlap */
    EXPECT_RC(pw_copy(area, area, 16), -EINVAL);
    printf("ok\n");
    return 0;
}
