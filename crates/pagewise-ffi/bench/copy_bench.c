/*
 * copy_bench: pw_copy (through libpagewise's C entry point) against glibc's
 * memcpy, on the rows of `pagewise bench memcpy` that issue #20 compares:
 * "4 KiB L1 aligned" (hot: the same buffers again and again) and
 * "1 GiB cold aligned" (one call per trial). It copies the method of
 * crates/pagewise-bench/src/memcpy.rs: buffers mapped with MADV_HUGEPAGE and
 * faulted in first, the destination 12 KiB past the source modulo 2 MiB,
 * calls through non-inlined pointers, each hot trial of each side the
 * fastest of 3 runs of 96 MiB of calls (after 16 warm-up calls), the order
 * of the sides flipped every trial, medians over trials.
 *
 * Build and run (quiet machine; docs/c.md, "Is pw_copy as fast as copy?"):
 *   cc -O2 crates/pagewise-ffi/bench/copy_bench.c $(pkg-config --cflags --libs pagewise) -o copy_bench
 *   ./copy_bench [--trials N] [--quick]
 * and compare with `pagewise bench memcpy --sizes 4K,1G --no-misaligned
 * --no-fleet --no-end-to-end --trials N`: the same rows' `pagewise` and
 * `ratio` columns. --quick runs small sizes once (a smoke test). Run each
 * several times: the 4 KiB row moves by up to 25% between processes with
 * where the kernel places the buffers.
 */
#define _GNU_SOURCE
#include <pagewise.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef void (*copy_fn)(void *, const void *, size_t);

static void __attribute__((noinline)) via_pw_copy(void *d, const void *s, size_t n) {
    if (pw_copy(d, s, n) != 0) {
        fprintf(stderr, "pw_copy: %s\n", pw_last_error());
        exit(1);
    }
}

static void __attribute__((noinline)) via_memcpy(void *d, const void *s, size_t n) {
    memcpy(d, s, n);
}

/* Not constant-folded: the compiler cannot pick the callee. */
static copy_fn volatile sides[2] = {via_pw_copy, via_memcpy};
static const char *side_names[2] = {"pw_copy", "memcpy"};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned char *map(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, len, MADV_HUGEPAGE); /* best effort, as the Rust benchmark */
    return p;
}

#define SPAN (2u << 20)
#define SHIFT (12u << 10)

/* GB/s of one run: `reps` calls on the same buffers (hot) or one call. */
static double run(copy_fn f, unsigned char *dst, const unsigned char *src, size_t n, size_t reps) {
    for (size_t i = 0; i < (reps < 16 ? reps : 16) && reps > 1; i++) f(dst, src, n);
    double t = now();
    for (size_t i = 0; i < reps; i++) {
        f(dst, src, n);
        __asm__ volatile("" ::: "memory");
    }
    double dt = now() - t;
    return (double)reps * (double)n / (dt > 1e-9 ? dt : 1e-9) / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void row(const char *name, size_t n, int hot, int trials) {
    unsigned char *src = map(n);
    unsigned char *area = map(n + SPAN);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i % 251);
    memset(area, 0, n + SPAN);
    size_t wanted = ((uintptr_t)src + SHIFT) % SPAN;
    size_t start = (wanted + SPAN - (uintptr_t)area % SPAN) % SPAN;
    unsigned char *dst = area + start;
    via_pw_copy(dst, src, n);
    if (memcmp(dst, src, n) != 0) {
        fprintf(stderr, "%s: pw_copy copied wrong bytes\n", name);
        exit(1);
    }
    size_t reps = hot ? (96u << 20) / n : 1;
    int runs = hot ? 3 : 1;
    double *gbps[2];
    for (int s = 0; s < 2; s++) gbps[s] = calloc((size_t)trials, sizeof(double));
    for (int t = 0; t < trials; t++) {
        int order[2] = {t % 2 == 0 ? 1 : 0, t % 2 == 0 ? 0 : 1}; /* memcpy first on even trials */
        for (int r = 0; r < runs; r++) {
            for (int k = 0; k < 2; k++) {
                int s = order[k];
                double g = run(sides[s], dst, src, n, reps);
                if (g > gbps[s][t]) gbps[s][t] = g;
            }
        }
    }
    double med[2];
    for (int s = 0; s < 2; s++) {
        qsort(gbps[s], (size_t)trials, sizeof(double), cmp);
        med[s] = trials % 2 ? gbps[s][trials / 2]
                            : (gbps[s][trials / 2 - 1] + gbps[s][trials / 2]) / 2;
        printf("%-22s %-8s median %7.2f GB/s  min %7.2f  max %7.2f\n", name, side_names[s],
               med[s], gbps[s][0], gbps[s][trials - 1]);
        free(gbps[s]);
    }
    printf("%-22s ratio pw_copy/memcpy %.3f\n", name, med[0] / med[1]);
    munmap(src, n);
    munmap(area, n + SPAN);
}

int main(int argc, char **argv) {
    int trials = 5, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
            trials = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: copy_bench [--trials N] [--quick]\n");
            return 2;
        }
    }
    if (trials < 1) trials = 1;
    printf("libpagewise %s, %d trials (GB/s = 1e9 bytes/s)\n", pw_version(), quick ? 1 : trials);
    if (quick) {
        row("4 KiB L1 aligned", 4096, 1, 1);
        row("16 MiB cold aligned", 16u << 20, 0, 1);
    } else {
        row("4 KiB L1 aligned", 4096, 1, trials);
        row("1 GiB cold aligned", 1u << 30, 0, trials);
    }
    return 0;
}
