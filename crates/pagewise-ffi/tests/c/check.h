/* Assertions for the C tests: a failed one prints where and the library's
 * last error, and exits 1. */
#ifndef CHECK_H
#define CHECK_H
#include <pagewise.h>
#include <stdio.h>
#include <stdlib.h>

#define EXPECT(cond)                                                              \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__,    \
                    __LINE__, #cond, pw_last_error());                            \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

/* `call` returns exactly `want`; for a negative `want`, pw_last_error()
 * then holds a message. */
#define EXPECT_RC(call, want)                                                     \
    do {                                                                          \
        int rc_ = (call);                                                         \
        if (rc_ != (want)) {                                                      \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d (last error: %s)\n", \
                    __FILE__, __LINE__, #call, rc_, (int)(want), pw_last_error()); \
            exit(1);                                                              \
        }                                                                         \
        if ((want) < 0 && pw_last_error()[0] == '\0') {                           \
            fprintf(stderr, "%s:%d: %s failed without a message\n", __FILE__,     \
                    __LINE__, #call);                                             \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

#define OK(call) EXPECT_RC(call, PW_OK)

#endif
