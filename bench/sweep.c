/* Sweeps N anonymous pages P times, writing one byte per page: seed 003's stress pattern with a
 * fixed amount of work. Used by reclaimcost.py. Build: cc -O2 -o sweep sweep.c */
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    size_t n = (size_t)atol(argv[1]);
    int passes = atoi(argv[2]);
    char *p = mmap(0, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, n * 4096, MADV_NOHUGEPAGE);
    for (int k = 0; k < passes; k++)
        for (size_t i = 0; i < n; i++)
            p[i * 4096]++;
    return 0;
}
