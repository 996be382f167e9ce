/* What the kernel charges for the pages of a write-ahead log, measured where the WAL's
 * cost goes: CPU of the calling thread (CLOCK_THREAD_CPUTIME_ID), per 4 KiB page.
 * bench/test_bench_wal_pages.py builds and runs it; usage: wal_page_cost DIRECTORY.
 *
 * Prints "name value" lines:
 *   redirty_fault_ns_per_page     a write to a page of a shared file mapping after msync
 *                                 wrote it back (the kernel write-protects it to see the
 *                                 next write: one fault per page, page_mkwrite)
 *   redirty_populate_ns_per_page  the same made by MADV_POPULATE_WRITE ahead of the writes
 *                                 (what the WAL's housekeeping thread does for a recycled
 *                                 segment)
 *   populate_fresh_ns_per_page    MADV_POPULATE_WRITE of a new fallocated segment
 *   msync_ns_per_page_{300k,3m}   msync(MS_SYNC) of pages written since the last one,
 *                                 syncs of ~300 KiB and ~3 MiB (fixed cost included)
 *   msync_one_page_cpu_us         the CPU of a sync of one dirty page: its fixed part
 *   msync_one_page_{min,median}_us  its wall time: the disk's flush ("always" waits for it)
 *   direct_ns_per_page            the alternative: O_DIRECT pwrite of ~300 KiB from shared
 *                                 memory plus fdatasync, per page, into the fallocated
 *                                 (never written) segment
 *   direct_overwrite_ns_per_page_3m  the same, ~3 MiB per sync, over the segment once
 *                                 written: what a recycled segment would cost
 *   stage_rewrite_ns_per_page     writing 200-byte entries again into the shared memory
 *                                 (resident, never written back: no fault), the memory
 *                                 traffic any WAL pays for its bytes
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SEGMENT_BYTES (64L << 20)
#define PAGE_BYTES 4096L
#define PAGES (SEGMENT_BYTES / PAGE_BYTES)
#define FLUSHES 200
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double clock_ns(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static unsigned char *map_new_segment(const char *path, int *fd)
{
    unsigned char *m;
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (*fd < 0 || posix_fallocate(*fd, 0, SEGMENT_BYTES) != 0) die(path);
    m = mmap(NULL, SEGMENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (m == MAP_FAILED) die("mmap");
    return m;
}

/* A WAL entry's size for a 100 B record (bench/test_bench_wal.py's topic names). */
static const unsigned char entry[200] = {1};

/* Writes the whole segment in 200-byte entries, msync()ing every sync_bytes; returns the
 * CPU of the syncs per page. */
static double write_and_sync(unsigned char *m, long sync_bytes)
{
    double sync_cpu = 0, start;
    long synced = 0, off, aligned;
    for (off = 0; off + (long)sizeof entry <= SEGMENT_BYTES; off += sizeof entry) {
        memcpy(m + off, entry, sizeof entry);
        if (off + (long)sizeof entry - synced >= sync_bytes) {
            aligned = synced - synced % PAGE_BYTES;
            start = cpu_ns();
            if (msync(m + aligned, off + sizeof entry - aligned, MS_SYNC) != 0) die("msync");
            sync_cpu += cpu_ns() - start;
            synced = off + sizeof entry;
        }
    }
    return sync_cpu / PAGES;
}

/* O_DIRECT copies of the staged segment to the file, chunk_bytes per pwrite, each followed
 * by fdatasync; returns their CPU per page. */
static double copy_direct(int direct_fd, const unsigned char *stage, long chunk_bytes)
{
    double cpu = 0, start;
    long off, n;
    for (off = 0; off < SEGMENT_BYTES; off += n) {
        n = SEGMENT_BYTES - off < chunk_bytes ? SEGMENT_BYTES - off : chunk_bytes;
        start = cpu_ns();
        if (pwrite(direct_fd, stage + off, n, off) != n) die("pwrite");
        if (fdatasync(direct_fd) != 0) die("fdatasync");
        cpu += cpu_ns() - start;
    }
    return cpu / PAGES;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    char path[4096];
    int fd, direct_fd, stage_fd;
    unsigned char *m, *stage;
    double start, cpu = 0, wall[FLUSHES], t;
    long off;
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/segment", argv[1]);

    m = map_new_segment(path, &fd);
    start = cpu_ns();
    if (madvise(m, SEGMENT_BYTES, MADV_POPULATE_WRITE) != 0) die("madvise");
    printf("populate_fresh_ns_per_page %.0f\n", (cpu_ns() - start) / PAGES);
    printf("msync_ns_per_page_300k %.0f\n", write_and_sync(m, 75 * PAGE_BYTES));
    start = cpu_ns();
    if (madvise(m, SEGMENT_BYTES, MADV_POPULATE_WRITE) != 0) die("madvise");
    printf("redirty_populate_ns_per_page %.0f\n", (cpu_ns() - start) / PAGES);
    printf("msync_ns_per_page_3m %.0f\n", write_and_sync(m, 750 * PAGE_BYTES));
    start = cpu_ns();
    for (off = 0; off < SEGMENT_BYTES; off += PAGE_BYTES) m[off] = 2;
    printf("redirty_fault_ns_per_page %.0f\n", (cpu_ns() - start) / PAGES);
    for (i = 0; i < FLUSHES; i++) {
        m[i * PAGE_BYTES] = 3;
        t = clock_ns(CLOCK_MONOTONIC);
        start = cpu_ns();
        if (msync(m + i * PAGE_BYTES, PAGE_BYTES, MS_SYNC) != 0) die("msync");
        cpu += cpu_ns() - start;
        wall[i] = clock_ns(CLOCK_MONOTONIC) - t;
    }
    qsort(wall, FLUSHES, sizeof wall[0], by_value);
    printf("msync_one_page_cpu_us %.1f\n", cpu / FLUSHES / 1e3);
    printf("msync_one_page_min_us %.0f\n", wall[0] / 1e3);
    printf("msync_one_page_median_us %.0f\n", wall[FLUSHES / 2] / 1e3);
    munmap(m, SEGMENT_BYTES);

    /* The alternative: entries in shared memory (never written back, so never
     * write-protected), copied to the file with O_DIRECT at each sync. */
    stage_fd = memfd_create("wal-stage", 0);
    if (stage_fd < 0 || ftruncate(stage_fd, SEGMENT_BYTES) != 0) die("memfd");
    stage = mmap(NULL, SEGMENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, stage_fd, 0);
    if (stage == MAP_FAILED) die("mmap");
    memset(stage, 4, SEGMENT_BYTES);
    direct_fd = open(path, O_RDWR | O_DIRECT);
    if (direct_fd < 0) die("O_DIRECT");
    printf("direct_ns_per_page %.0f\n", copy_direct(direct_fd, stage, 75 * PAGE_BYTES));
    printf("direct_overwrite_ns_per_page_3m %.0f\n",
           copy_direct(direct_fd, stage, 750 * PAGE_BYTES));
    start = cpu_ns();
    for (off = 0; off + (long)sizeof entry <= SEGMENT_BYTES; off += sizeof entry)
        memcpy(stage + off, entry, sizeof entry);
    printf("stage_rewrite_ns_per_page %.0f\n", (cpu_ns() - start) / PAGES);
    close(direct_fd);
    close(fd);
    unlink(path);
    return 0;
}
