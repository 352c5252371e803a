/* Record i of the cross-process tests; the Rust side has the same
 * generator (common::record). Printable, 8 to 64 bytes. */
#ifndef RECORDS_H
#define RECORDS_H
#include <stdint.h>
#include <stdio.h>

static size_t record(uint64_t i, char out[80]) {
    int n = snprintf(out, 80, "%llu:", (unsigned long long)i);
    size_t len = 8 + (size_t)(i % 57), k = 0;
    size_t at = (size_t)n;
    while (at < len) {
        out[at++] = (char)('a' + (i + k) % 26);
        k++;
    }
    return at;
}

#define CHECK(call)                                                               \
    do {                                                                          \
        int rc_ = (call);                                                         \
        if (rc_ < 0) {                                                            \
            fprintf(stderr, "%s:%d: %s: %d: %s\n", __FILE__, __LINE__, #call, rc_, \
                    pw_last_error());                                             \
            return 1;                                                             \
        }                                                                         \
    } while (0)

#endif
