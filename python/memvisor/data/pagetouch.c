/* Page-touching program for `memvisor validate linux-paging`: the same access patterns the
 * simulator's `stress` and `random` workloads generate, run natively inside a memory cgroup.
 *
 *   pagetouch stress PAGES PASSES        sweep PAGES pages PASSES times, one store per page
 *                                        (seed 003's loop; the first pass allocates them)
 *   pagetouch random PAGES TOUCHES SEED  store to PAGES pages once in order, then TOUCHES loads
 *                                        from pages drawn uniformly by xorshift64* from SEED
 *   pagetouch zipf PAGES TOUCHES SEED    the same with pages drawn by Zipf's law (exponent 1),
 *                                        in integers as memvisor's `access::Zipf` draws them
 *
 * Transparent huge pages are refused (MADV_NOHUGEPAGE) so that the kernel pages 4 KiB at a time,
 * as the simulator does. Build: cc -O2 -o pagetouch pagetouch.c
 *
 * Exit status: 0 when the pattern ran to its end, whatever the data; 1 if the memory cannot be
 * mapped, 2 for bad arguments. memvisor tells an OOM kill from the cgroup's own counter and SIGKILL,
 * never from this status.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t state;
/* Where the random pattern's loads end up, so that they are used without the data deciding anything. */
static volatile char sink;

/* xorshift64*, identical to memvisor's `random` workload. */
static uint64_t next(void) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

/* Zipf with exponent 1: cumulative weights floor(2^40 / (k + 1)); a draw picks the first rank
 * whose cumulative weight exceeds it modulo the total; ranks spread by a prime multiplier. */
static uint64_t *cdf;
static uint64_t zipf_page(uint64_t x, size_t pages) {
    uint64_t r = x % cdf[pages - 1];
    size_t lo = 0, hi = pages;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] <= r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint64_t)lo * 2654435761ULL % pages;
}

int main(int argc, char **argv) {
    int random = argc >= 2 && (!strcmp(argv[1], "random") || !strcmp(argv[1], "zipf"));
    if (argc < 4 || (strcmp(argv[1], "stress") && !random) || (random && argc < 5)) {
        fprintf(stderr, "usage: pagetouch stress PAGES PASSES | pagetouch random|zipf PAGES TOUCHES SEED\n");
        return 2;
    }
    size_t pages = strtoull(argv[2], 0, 10);
    uint64_t n = strtoull(argv[3], 0, 10);
    volatile char *p = mmap(0, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    madvise((void *)p, pages * 4096, MADV_NOHUGEPAGE);
    if (!strcmp(argv[1], "stress")) {
        for (uint64_t k = 0; k < n; k++)
            for (size_t i = 0; i < pages; i++)
                p[i * 4096]++;
    } else {
        state = strtoull(argv[4], 0, 10);
        int zipf = !strcmp(argv[1], "zipf");
        if (zipf) {
            /* Built before the first pass, so that its pages are charged before the sweep's. */
            cdf = malloc(pages * sizeof *cdf);
            if (!cdf) {
                perror("malloc");
                return 1;
            }
            uint64_t sum = 0;
            for (size_t k = 0; k < pages; k++)
                cdf[k] = sum += (1ULL << 40) / (k + 1);
        }
        for (size_t i = 0; i < pages; i++)
            p[i * 4096]++;
        char sum = 0;
        for (uint64_t k = 0; k < n; k++)
            sum += p[(zipf ? zipf_page(next(), pages) : next() % pages) * 4096];
        sink = sum;
    }
    return 0;
}
