/* Appends N records (records.h) to the queue at PATH, half with
 * pw_queue_append and half with pw_queue_reserve + pw_queue_commit. */
#include <pagewise.h>
#include <stdlib.h>
#include <string.h>
#include "records.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: writer_1m PATH N\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    pw_queue_writer *w = NULL;
    CHECK(pw_queue_writer_open(argv[1], NULL, &w));
    char rec[80];
    for (uint64_t i = 0; i < n; i++) {
        size_t len = record(i, rec);
        if (i % 2 == 0) {
            CHECK(pw_queue_append(w, rec, len, NULL));
        } else {
            void *slot = NULL;
            CHECK(pw_queue_reserve(w, len, &slot));
            memcpy(slot, rec, len);
            CHECK(pw_queue_commit(w, NULL));
        }
    }
    CHECK(pw_queue_flush(w));
    CHECK(pw_queue_writer_close(w));
    printf("appended %llu\n", (unsigned long long)n);
    return 0;
}
