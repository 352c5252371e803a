/* Thread safety as documented: one thread at a time per writer or reader
 * (-EBUSY for a second one, never a race), any threads on a region, and
 * pw_last_error per thread. argv[1]: a directory. */
#include "check.h"
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static pw_queue_reader *reader;
static pw_region *region;

static void *wait_for_record(void *arg) {
    (void)arg;
    const void *data = NULL;
    size_t len = 0;
    /* The main thread polls the same reader: a call that meets one of its
     * polls is -EBUSY, as documented; try again until this thread holds it. */
    int rc;
    while ((rc = pw_queue_next_wait(reader, -1, &data, &len, NULL)) == -EBUSY) {
        struct timespec us = {0, 1000};
        nanosleep(&us, NULL);
    }
    if (rc != 0 || len != 5 || memcmp(data, "hello", 5) != 0) return (void *)1;
    return NULL;
}

static void *use_region(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p = NULL;
        size_t len = 0;
        if (pw_region_ptr(region, &p) != 0 || pw_region_len(region, &len) != 0) return (void *)1;
        if (len != (1u << 20)) return (void *)1;
    }
    return NULL;
}

static void *fail_here(void *arg) {
    (void)arg;
    if (pw_queue_flush(NULL) != -EBADF) return (void *)1;
    if (strstr(pw_last_error(), "pw_queue_writer") == NULL) return (void *)1;
    return NULL;
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/q", argv[1]);
    pw_queue_writer *w = NULL;
    OK(pw_queue_writer_open(path, NULL, &w));
    OK(pw_queue_reader_open(path, &reader));

    pthread_t t;
    EXPECT(pthread_create(&t, NULL, wait_for_record, NULL) == 0);
    /* Until the waiting thread holds the reader, our call may still get in
     * first; once it does hold it, ours is -EBUSY. */
    const void *data = NULL;
    size_t len = 0;
    int rc = 0;
    for (int i = 0; i < 2000; i++) {
        rc = pw_queue_next(reader, &data, &len, NULL);
        if (rc == -EBUSY) break;
        EXPECT(rc == PW_EMPTY);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    EXPECT(rc == -EBUSY);
    EXPECT(strstr(pw_last_error(), "another thread") != NULL);
    EXPECT_RC(pw_queue_reader_close(reader), -EBUSY);
    OK(pw_queue_append(w, "hello", 5, NULL));
    void *result = (void *)1;
    EXPECT(pthread_join(t, &result) == 0 && result == NULL);
    OK(pw_queue_reader_close(reader));

    /* A failure in another thread leaves this thread's message alone. */
    EXPECT_RC(pw_queue_append(w, NULL, 3, NULL), -EFAULT);
    EXPECT(pthread_create(&t, NULL, fail_here, NULL) == 0);
    EXPECT(pthread_join(t, &result) == 0 && result == NULL);
    EXPECT(strstr(pw_last_error(), "data is NULL") != NULL);

    /* Any number of threads on one region. */
    OK(pw_region_new(1u << 20, NULL, &region));
    pthread_t ts[4];
    for (int i = 0; i < 4; i++) EXPECT(pthread_create(&ts[i], NULL, use_region, NULL) == 0);
    for (int i = 0; i < 4; i++) {
        EXPECT(pthread_join(ts[i], &result) == 0 && result == NULL);
    }
    OK(pw_region_free(region));
    OK(pw_queue_writer_close(w));
    printf("ok\n");
    return 0;
}
