/* Pages of declared contents for `memvisor validate ksm`: one process of a KSM content mix.
 *
 *   ksmpages IDS_FILE
 *
 * IDS_FILE holds little-endian uint64 content ids, one per 4 KiB page. The program maps an
 * anonymous private region of that many pages, refuses transparent huge pages for it
 * (MADV_NOHUGEPAGE: KSM then sees 4 KiB pages only, as the simulator does), writes every page from
 * its id, marks the region MADV_MERGEABLE, prints "ready" on stdout and sleeps until killed. The
 * pages are written once, before the region becomes mergeable, so that KSM sees static content.
 *
 * Page contents from an id (memvisor's Rust scanner generates the same bytes):
 *   id 0    an all-zero page (written, so that it is a private anonymous page: a page only read
 *           would map the shared zero page, which KSM never scans);
 *   id > 0  512 little-endian uint64 words, word i = splitmix64((id << 9) | i).
 *
 * Build: cc -O2 -o ksmpages ksmpages.c
 * Exit status: 2 for bad arguments or a bad ids file, 1 if the kernel refuses the mapping or the
 * advice; otherwise it runs until a signal ends it. It also dies with its parent
 * (PR_SET_PDEATHSIG), so that a killed validation leaves no process behind.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#define PAGE 4096u
#define WORDS (PAGE / 8u)

/* Vigna's splitmix64 finaliser (wrapping u64 arithmetic): the exact generator of the Rust side. */
static uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Byte by byte, so that the page is little-endian whatever the machine. */
static void store_le64(volatile unsigned char *p, uint64_t v) {
    for (int b = 0; b < 8; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = (v << 8) | p[b];
    return v;
}

static void fill(volatile unsigned char *page, uint64_t id) {
    if (id == 0) {
        /* Stores, not memset on a pointer the compiler may reason about: each page must be
         * write-faulted into a private anonymous page. */
        for (unsigned i = 0; i < WORDS; i++)
            store_le64(page + 8 * i, 0);
        return;
    }
    for (uint64_t i = 0; i < WORDS; i++)
        store_le64(page + 8 * i, splitmix64((id << 9) | i));
}

static int usage(const char *msg, const char *arg) {
    if (arg)
        fprintf(stderr, "ksmpages: %s: %s\n", msg, arg);
    else
        fprintf(stderr, "ksmpages: %s\n", msg);
    fprintf(stderr, "usage: ksmpages IDS_FILE  (IDS_FILE: little-endian uint64 content ids, one per 4 KiB page)\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return usage("expected exactly one argument", NULL);

    /* Dies with the validation that started it; checked again after, in case it already died. */
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        return 1;

    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "ksmpages: cannot open %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "ksmpages: cannot seek in %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "ksmpages: cannot read the size of %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    if (size == 0)
        return usage("the ids file is empty (at least one page is needed)", argv[1]);
    if (size % 8 != 0) {
        fprintf(stderr, "ksmpages: %s has %ld bytes, not a multiple of 8 (uint64 ids)\n", argv[1], size);
        return 2;
    }
    size_t pages = (size_t)size / 8;
    unsigned char *ids = malloc((size_t)size);
    if (!ids) {
        perror("ksmpages: malloc");
        return 1;
    }
    if (fread(ids, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "ksmpages: short read from %s\n", argv[1]);
        return 2;
    }
    fclose(f);

    volatile unsigned char *region = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("ksmpages: mmap");
        return 1;
    }
    /* Before the first write: no huge page (nor mTHP folio) may back the region. */
    if (madvise((void *)region, pages * PAGE, MADV_NOHUGEPAGE) != 0) {
        perror("ksmpages: madvise(MADV_NOHUGEPAGE)");
        return 1;
    }
    for (size_t i = 0; i < pages; i++)
        fill(region + i * PAGE, load_le64(ids + 8 * i));
    free(ids);

    /* Only now does KSM learn of the region (__ksm_enter): its first visit sees final contents. */
    if (madvise((void *)region, pages * PAGE, MADV_MERGEABLE) != 0) {
        perror("ksmpages: madvise(MADV_MERGEABLE)");
        return 1;
    }
    if (printf("ready\n") < 0 || fflush(stdout) != 0)
        return 1;
    for (;;)
        pause();
}
