/* Regions through the C API. */
#include "check.h"
#include <errno.h>
#include <string.h>

int main(void) {
    size_t size = 8u << 20;
    pw_region_options o = {0};
    o.populate = PW_POPULATE_EAGER;
    pw_region *r = NULL;
    OK(pw_region_new(size, &o, &r));
    void *p = NULL;
    size_t len = 0;
    OK(pw_region_ptr(r, &p));
    OK(pw_region_len(r, &len));
    EXPECT(p != NULL && len == size);
    memset(p, 0x5a, len);
    pw_backing b;
    OK(pw_region_backing(r, &b));
    EXPECT(b.requested_bytes == size && b.mapped_bytes >= size);
    EXPECT(b.page_bytes >= 4096 && b.populated_frontier == size);
    EXPECT(b.page_size >= PW_PAGES_4K && b.page_size <= PW_PAGES_HUGETLB_1G);
    EXPECT(b.why != NULL && strstr(b.why, "pages, populated") != NULL);
    if (b.verified) {
        uint64_t granted = b.granted_hugetlb_1g_bytes + b.granted_hugetlb_2m_bytes +
                           b.granted_thp_bytes + b.granted_base_bytes;
        EXPECT(granted >= size);
    }
    printf("eager: %s\n", b.why);
    OK(pw_region_wait_populated(r, size));
    OK(pw_region_free(r));
    EXPECT_RC(pw_region_len(r, &len), -EBADF);

    /* Background population with two workers, waited for piece by piece. */
    o.populate = PW_POPULATE_BACKGROUND;
    o.threads = 2;
    o.flags = PW_REGION_DONT_FORK;
    OK(pw_region_new(size, &o, &r));
    OK(pw_region_ptr(r, &p));
    for (size_t at = 0; at < size; at += 1u << 20) {
        OK(pw_region_wait_populated(r, at + (1u << 20)));
        memset((char *)p + at, 1, 1u << 20);
    }
    OK(pw_region_backing(r, &b));
    EXPECT(b.populated_frontier == size);
    OK(pw_region_free(r));

    /* Lazy 4 KiB pages, strictly. */
    memset(&o, 0, sizeof o);
    o.pages = PW_PAGES_4K;
    OK(pw_region_new(12345, &o, &r));
    OK(pw_region_backing(r, &b));
    EXPECT(b.page_size == PW_PAGES_4K && b.page_bytes == 4096 && b.mapped_bytes == 16384);
    OK(pw_region_free(r));
    OK(pw_region_free(NULL));

    /* A strict hugetlb size either works or says how to reserve pages. */
    o.pages = PW_PAGES_HUGETLB_1G;
    int rc = pw_region_new(1u << 30, &o, &r);
    if (rc == 0) {
        OK(pw_region_free(r));
    } else {
        EXPECT(rc == -ENOMEM);
        EXPECT(strstr(pw_last_error(), "hugetlb") != NULL);
        printf("strict 1 GiB: %s\n", pw_last_error());
    }
    printf("ok\n");
    return 0;
}
