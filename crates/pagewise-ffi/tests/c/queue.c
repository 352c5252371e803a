/* The queue through the C API: append, reserve/commit/cancel, read, seek,
 * waiting reads, options, durability, reopening, a run prepared up front.
 * argv[1]: a directory. */
#define _POSIX_C_SOURCE 200809L /* stat */
#include "check.h"
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static uint64_t file_size(const char *path) {
    struct stat st;
    EXPECT(stat(path, &st) == 0);
    return (uint64_t)st.st_size;
}

/* A run prepared up front: the writer allocates (and with pre-touch maps
 * in) 1 MiB, appends into it, and a reader maps the same bytes in before
 * reading them all back. With `flags` PW_QUEUE_NO_PRETOUCH no thread grows
 * the file: it has exactly what the writer prepared. */
static void prepared_run(const char *dir, const char *name, uint32_t flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const uint64_t run = 1u << 20;
    pw_queue_options opts = {0};
    opts.chunk_size = 64 * 1024; /* the run spans 16 chunks */
    opts.flags = PW_QUEUE_CREATE_NEW | flags;
    pw_queue_writer *w = NULL;
    OK(pw_queue_writer_open(path, &opts, &w));
    uint64_t first = 0;
    OK(pw_queue_append(w, "first", 5, &first));
    if (flags & PW_QUEUE_NO_PRETOUCH) {
        EXPECT(file_size(path) < first + run); /* not prepared yet */
    }
    OK(pw_queue_prepare(w, run));
    uint64_t prepared = file_size(path);
    EXPECT(prepared >= first + run);
    OK(pw_queue_prepare(w, 0));
    /* Not while a reservation is open. */
    void *slot = NULL;
    OK(pw_queue_reserve(w, 8, &slot));
    EXPECT_RC(pw_queue_prepare(w, run), -EINPROGRESS);
    OK(pw_queue_cancel(w));

    /* 6000 records of 8 + 128 bytes (about 800 KiB over 13 chunks) fit in
     * what was prepared. */
    char buf[128];
    enum { N = 6000 };
    for (int i = 0; i < N; i++) {
        memset(buf, 'a' + i % 26, sizeof buf);
        snprintf(buf, sizeof buf, "prepared %d", i);
        OK(pw_queue_append(w, buf, sizeof buf, NULL));
    }
    if (flags & PW_QUEUE_NO_PRETOUCH) {
        EXPECT(file_size(path) == prepared); /* the appends grew nothing */
    }

    pw_queue_reader *r = NULL;
    OK(pw_queue_reader_open(path, &r));
    uint64_t reached = 0;
    OK(pw_queue_reader_prepare(r, 0, &reached));
    EXPECT(reached == first); /* from the reader's position: the oldest record */
    OK(pw_queue_reader_prepare(r, run, &reached));
    EXPECT(reached > first && reached <= file_size(path));
    EXPECT(reached == first + run);
    OK(pw_queue_reader_prepare(r, run, NULL)); /* NULL: not stored */
    const void *data = NULL;
    size_t len = 0;
    OK(pw_queue_next(r, &data, &len, NULL));
    EXPECT(len == 5 && memcmp(data, "first", 5) == 0);
    for (int i = 0; i < N; i++) {
        memset(buf, 'a' + i % 26, sizeof buf);
        snprintf(buf, sizeof buf, "prepared %d", i);
        OK(pw_queue_next(r, &data, &len, NULL));
        EXPECT(len == sizeof buf && memcmp(data, buf, len) == 0);
    }
    EXPECT_RC(pw_queue_next(r, &data, &len, NULL), PW_EMPTY);
    /* More than the file holds: up to its size, not past it (a pre-toucher
     * may still be growing the file: its size is taken on both sides). */
    uint64_t before = file_size(path);
    OK(pw_queue_reader_prepare(r, UINT64_MAX, &reached));
    EXPECT(reached >= before && reached <= file_size(path));
    if (flags & PW_QUEUE_NO_PRETOUCH) {
        EXPECT(reached == prepared);
    }
    OK(pw_queue_reader_close(r));
    OK(pw_queue_writer_close(w));
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/q", argv[1]);

    pw_queue_options opts = {0};
    opts.chunk_size = 64 * 1024; /* small chunks: records cross chunk boundaries */
    opts.flags = PW_QUEUE_RECORD_CRC | PW_QUEUE_CREATE_NEW;
    opts.mode = 0600;
    pw_queue_writer *w = NULL;
    OK(pw_queue_writer_open(path, &opts, &w));
    EXPECT(w != NULL);
    size_t max = 0;
    OK(pw_queue_max_payload(w, &max));
    EXPECT(max == 64 * 1024 - 64 - 8 - 4);

    uint64_t pos[3000];
    char buf[200];
    for (int i = 0; i < 3000; i++) {
        int len = snprintf(buf, sizeof buf, "record %d", i);
        if (i % 3 == 1) {
            void *slot = NULL;
            OK(pw_queue_reserve(w, (size_t)len, &slot));
            EXPECT(slot != NULL);
            /* Other writer calls wait for the commit. */
            EXPECT_RC(pw_queue_append(w, "x", 1, NULL), -EINPROGRESS);
            EXPECT_RC(pw_queue_reserve(w, 1, &slot), -EINPROGRESS);
            memcpy(slot, buf, (size_t)len);
            OK(pw_queue_commit(w, &pos[i]));
        } else {
            OK(pw_queue_append(w, buf, (size_t)len, &pos[i]));
        }
        EXPECT(i == 0 || pos[i] > pos[i - 1]);
    }
    /* A cancelled reservation appends nothing. */
    void *slot = NULL;
    OK(pw_queue_reserve(w, 50, &slot));
    memset(slot, 'z', 50);
    OK(pw_queue_cancel(w));
    OK(pw_queue_cancel(w)); /* none open: still 0 */
    EXPECT_RC(pw_queue_commit(w, NULL), -EINVAL);
    OK(pw_queue_append(w, NULL, 0, NULL)); /* an empty record */
    OK(pw_queue_flush(w));

    pw_queue_reader *r = NULL;
    OK(pw_queue_reader_open(path, &r));
    for (int i = 0; i < 3000; i++) {
        const void *data = NULL;
        size_t len = 0;
        uint64_t p = 0;
        OK(pw_queue_next(r, &data, &len, &p));
        int want = snprintf(buf, sizeof buf, "record %d", i);
        EXPECT(len == (size_t)want && memcmp(data, buf, len) == 0);
        EXPECT(p == pos[i]);
    }
    const void *data = NULL;
    size_t len = 99;
    OK(pw_queue_next(r, &data, &len, NULL));
    EXPECT(len == 0);
    EXPECT_RC(pw_queue_next(r, &data, &len, NULL), PW_EMPTY);

    /* Waiting: a timeout gives PW_EMPTY after about that long. */
    double t0 = now_s();
    EXPECT_RC(pw_queue_next_wait(r, 20 * 1000 * 1000, &data, &len, NULL), PW_EMPTY);
    EXPECT(now_s() - t0 >= 0.015);
    OK(pw_queue_append(w, "late", 4, NULL));
    OK(pw_queue_next_wait(r, -1, &data, &len, NULL));
    EXPECT(len == 4 && memcmp(data, "late", 4) == 0);

    /* Seeking. */
    OK(pw_queue_seek(r, pos[1234]));
    OK(pw_queue_next(r, &data, &len, NULL));
    EXPECT(len == strlen("record 1234") && memcmp(data, "record 1234", len) == 0);
    OK(pw_queue_seek(r, PW_SEEK_START));
    OK(pw_queue_next(r, &data, &len, NULL));
    EXPECT(len == strlen("record 0") && memcmp(data, "record 0", len) == 0);
    OK(pw_queue_seek(r, PW_SEEK_END));
    EXPECT_RC(pw_queue_next(r, &data, &len, NULL), PW_EMPTY);
    EXPECT_RC(pw_queue_seek(r, pos[5] + 8), -EINVAL);
    /* A failed seek may have moved the reader: seek to a known place. */
    OK(pw_queue_seek(r, PW_SEEK_END));

    OK(pw_queue_writer_close(w));
    /* Reopened, the writer continues after the last record. */
    opts.flags = PW_QUEUE_NO_CREATE;
    OK(pw_queue_writer_open(path, &opts, &w));
    OK(pw_queue_append(w, "again", 5, NULL));
    OK(pw_queue_next(r, &data, &len, NULL));
    EXPECT(len == 5 && memcmp(data, "again", 5) == 0);
    OK(pw_queue_writer_close(w));
    OK(pw_queue_reader_close(r));
    OK(pw_queue_writer_close(NULL));
    OK(pw_queue_reader_close(NULL));

    prepared_run(argv[1], "prepared", 0);
    prepared_run(argv[1], "prepared-no-pretouch", PW_QUEUE_NO_PRETOUCH);
    printf("ok\n");
    return 0;
}
