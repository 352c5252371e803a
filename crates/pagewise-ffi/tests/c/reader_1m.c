/* Reads N records (records.h) from the queue at PATH, waiting for each
 * (the writer may still be running), and checks every byte and that no
 * record follows. */
#include <pagewise.h>
#include <stdlib.h>
#include <string.h>
#include "records.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: reader_1m PATH N\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    pw_queue_reader *r = NULL;
    CHECK(pw_queue_reader_open(argv[1], &r));
    char want[80];
    uint64_t last = 0;
    for (uint64_t i = 0; i < n; i++) {
        const void *data = NULL;
        size_t len = 0;
        uint64_t pos = 0;
        int rc = pw_queue_next_wait(r, 10LL * 1000 * 1000 * 1000, &data, &len, &pos);
        CHECK(rc);
        if (rc == PW_EMPTY) {
            fprintf(stderr, "record %llu did not arrive within 10 s\n", (unsigned long long)i);
            return 1;
        }
        size_t wlen = record(i, want);
        if (len != wlen || memcmp(data, want, len) != 0) {
            fprintf(stderr, "record %llu differs: %zu bytes, expected %zu\n",
                    (unsigned long long)i, len, wlen);
            return 1;
        }
        if (i > 0 && pos <= last) {
            fprintf(stderr, "positions do not grow at record %llu\n", (unsigned long long)i);
            return 1;
        }
        last = pos;
    }
    const void *data = NULL;
    size_t len = 0;
    int rc = pw_queue_next(r, &data, &len, NULL);
    CHECK(rc);
    if (rc != PW_EMPTY) {
        fprintf(stderr, "a record follows the %llu expected\n", (unsigned long long)n);
        return 1;
    }
    CHECK(pw_queue_reader_close(r));
    printf("read %llu\n", (unsigned long long)n);
    return 0;
}
