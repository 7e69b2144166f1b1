/* memhog: the guest's page-touching program. Allocates SIZE MiB and writes one byte in every page,
 * PASSES times over (0: until killed), printing a line per pass so a test can follow it.
 * A static binary so the guest needs no libc. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: memhog SIZE_MIB [PASSES]\n");
        return 2;
    }
    char *end;
    long mib = strtol(argv[1], &end, 10);
    long passes = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
    if (*end || mib <= 0) {
        fprintf(stderr, "memhog: SIZE_MIB must be a positive integer, got '%s'\n", argv[1]);
        return 2;
    }
    size_t len = (size_t)mib << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("memhog: mmap");
        return 1;
    }
    for (long pass = 1; passes == 0 || pass <= passes; pass++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (size_t off = 0; off < len; off += 4096)
            p[off] = (char)pass;
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("memhog pass %ld %ld MiB %.3f s\n", pass, mib, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
        fflush(stdout);
    }
    return 0;
}
