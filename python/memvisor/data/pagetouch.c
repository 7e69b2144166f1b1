/* Page-touching program for `memvisor validate linux-paging`: the same access patterns the
 * simulator's `stress` and `random` workloads generate, run natively inside a memory cgroup.
 *
 *   pagetouch stress PAGES PASSES        sweep PAGES pages PASSES times, one store per page
 *                                        (seed 003's loop; the first pass allocates them)
 *   pagetouch random PAGES TOUCHES SEED  store to PAGES pages once in order, then TOUCHES loads
 *                                        from pages drawn uniformly by xorshift64* from SEED
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

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "stress") && strcmp(argv[1], "random")) ||
        (!strcmp(argv[1], "random") && argc < 5)) {
        fprintf(stderr, "usage: pagetouch stress PAGES PASSES | pagetouch random PAGES TOUCHES SEED\n");
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
        for (size_t i = 0; i < pages; i++)
            p[i * 4096]++;
        char sum = 0;
        for (uint64_t k = 0; k < n; k++)
            sum += p[(next() % pages) * 4096];
        sink = sum;
    }
    return 0;
}
