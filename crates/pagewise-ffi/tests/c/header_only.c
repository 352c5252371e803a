/* Includes only pagewise.h and uses every type it declares; compiled as
 * C11 and as C++17 with -Wall -Wextra -Werror -pedantic. */
#include <pagewise.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    pw_queue_options q;
    pw_region_options r;
    pw_buffer_options b;
    pw_backing k;
    memset(&q, 0, sizeof q);
    memset(&r, 0, sizeof r);
    memset(&b, 0, sizeof b);
    memset(&k, 0, sizeof k);
    pw_queue_writer *w = NULL;
    pw_queue_reader *rd = NULL;
    pw_region *rg = NULL;
    pw_buffer *bf = NULL;
    const char *v = pw_version();
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", PW_VERSION_MAJOR, PW_VERSION_MINOR, PW_VERSION_PATCH);
    if (strcmp(v, want) != 0) {
        fprintf(stderr, "header %s, library %s\n", want, v);
        return 1;
    }
    /* NULL handles are errors, not crashes. */
    if (pw_queue_writer_close(w) != 0 || pw_queue_reader_close(rd) != 0 ||
        pw_region_free(rg) != 0 || pw_buffer_free(bf) != 0) {
        return 1;
    }
    if (PW_SEEK_END != UINT64_MAX || PW_EMPTY <= 0 || q.flags != 0 || r.pages != PW_PAGES_AUTO ||
        b.pretouch != PW_PRETOUCH_NONE || k.why != NULL) {
        return 1;
    }
    printf("ok %s\n", v);
    return 0;
}
