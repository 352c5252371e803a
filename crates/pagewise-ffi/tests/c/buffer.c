/* Buffers through the C API. */
#include "check.h"
#include <string.h>

int main(void) {
    pw_buffer_options o = {0};
    o.pretouch = PW_PRETOUCH_EAGER;
    pw_buffer *b = NULL;
    OK(pw_buffer_new(1u << 20, &o, &b));
    size_t len = 1;
    OK(pw_buffer_len(b, &len));
    EXPECT(len == 0);
    OK(pw_buffer_resize(b, 1000, 'a'));
    OK(pw_buffer_append(b, "tail", 4));
    OK(pw_buffer_len(b, &len));
    EXPECT(len == 1004);
    char *p = NULL;
    OK(pw_buffer_ptr(b, (void **)&p));
    EXPECT(p[0] == 'a' && p[999] == 'a' && memcmp(p + 1000, "tail", 4) == 0);
    /* Shrinking keeps the pages and the address; growing again refills. */
    OK(pw_buffer_resize(b, 10, 0));
    char *q = NULL;
    OK(pw_buffer_ptr(b, (void **)&q));
    EXPECT(q == p);
    OK(pw_buffer_resize(b, 20, 0x1ff)); /* converted to unsigned char, as memset */
    EXPECT((unsigned char)q[15] == 0xff);
    /* Past the reserved maximum the pages move once; the bytes stay. */
    OK(pw_buffer_resize(b, 3u << 20, 'z'));
    OK(pw_buffer_ptr(b, (void **)&q));
    EXPECT(q[0] == 'a' && (unsigned char)q[15] == 0xff && q[(3u << 20) - 1] == 'z');
    OK(pw_buffer_free(b));
    o.flags = PW_BUFFER_HUGE_PAGES;
    o.pretouch = PW_PRETOUCH_BACKGROUND;
    OK(pw_buffer_new(0, &o, &b)); /* zero capacity: the first write reserves */
    OK(pw_buffer_resize(b, 5u << 20, 7));
    OK(pw_buffer_ptr(b, (void **)&q));
    EXPECT(q[(5u << 20) - 1] == 7);
    OK(pw_buffer_free(b));
    printf("ok\n");
    return 0;
}
