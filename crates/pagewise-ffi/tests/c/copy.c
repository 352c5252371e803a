/* pw_copy and pw_fill give the bytes memcpy and memset give, at every
 * size class (up to past the non-temporal thresholds). */
#include "check.h"
#include <string.h>

int main(void) {
    size_t big = 160u << 20;
    unsigned char *src = malloc(big + 64), *dst = malloc(big + 64), *ref = malloc(big + 64);
    EXPECT(src && dst && ref);
    for (size_t i = 0; i < big + 64; i++) src[i] = (unsigned char)(i * 7 + (i >> 12));
    size_t sizes[] = {0, 1, 7, 31, 32, 33, 63, 64, 65, 200, 512, 513, 4096, 24 << 10,
                      (24 << 10) + 5, 1 << 20, 20u << 20, 100u << 20, 160u << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (size_t off = 0; off < 3; off++) {
            size_t so = off * 7 % 64, d = off * 13 % 64;
            memset(dst, 0xee, n + 64);
            OK(pw_copy(dst + d, src + so, n));
            EXPECT(memcmp(dst + d, src + so, n) == 0);
            EXPECT(d == 0 || dst[d - 1] == 0xee);
            EXPECT(dst[d + n] == 0xee);
            memset(ref, 0xee, n + 64);
            memset(ref + d, (int)(n & 0xff), n);
            OK(pw_fill(dst, 0xee, n + 64));
            OK(pw_fill(dst + d, (int)(n & 0xff), n));
            EXPECT(memcmp(dst, ref, n + 64) == 0);
        }
    }
    free(src);
    free(dst);
    free(ref);
    printf("ok\n");
    return 0;
}
