/* Wall-clock milliseconds for record timestamps, at a fraction of clock_gettime's cost.
 *
 * Every record appended without a timestamp gets "now" in ms.  clock_gettime(CLOCK_REALTIME)
 * costs 20-60 ns even through the vDSO -- measured as a quarter of a whole append -- while
 * a CPU's tick counter (rdtsc on x86-64, cntvct_el0 on arm64) reads in a few ns.  So each
 * reading of the real clock also notes how many ns remain in its millisecond, and the tick
 * count when it was taken; later calls that see fewer ticks pass than it takes that many ns
 * to pass return the same millisecond without asking the clock.  The result is always the
 * value clock_gettime would have given at some instant during the call: never early, never
 * late by a millisecond.
 *
 * Ticks per ns: arm64 states its counter's frequency (cntfrq_el0).  x86-64's TSC runs at the
 * processor's nominal frequency, at least 1 GHz on every x86-64 part with an invariant TSC,
 * so one tick is taken to be at most 1 ns: an underestimate of time that only shortens the
 * reuse.  Without an invariant TSC (CPUID 8000_0007h EDX bit 8) the ticks are not trusted and
 * every call reads the clock.  Ticks that go backwards (a thread moved to another core)
 * look like a huge step and force a reading too.
 *
 * The cache is per caller (a record batch builder, used by one thread at a time); the
 * functions touch nothing else and need no lock. */
#ifndef NK_CLOCK_H
#define NK_CLOCK_H

/* clock_gettime is POSIX: ask for it under -std=c11 (Python.h, included first by the
 * extensions, asks for the same). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <x86intrin.h>
#define NK_CLOCK_HAS_TICKS 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define NK_CLOCK_HAS_TICKS 1
#else
#define NK_CLOCK_HAS_TICKS 0
#endif

typedef struct {
    uint64_t ticks_per_ms;  /* lower bound on ticks per ms; 0: ticks not usable */
    uint64_t read_ticks;    /* tick count just before the last clock reading */
    uint64_t reuse_ticks;   /* ticks after read_ticks during which ms is still current */
    int64_t ms;             /* the last reading, ms since the epoch */
} nk_clock_cache;

#if NK_CLOCK_HAS_TICKS
static inline uint64_t nk_clock_ticks(void)
{
#if defined(__x86_64__)
    return __rdtsc();
#else
    uint64_t ticks;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(ticks));
    return ticks;
#endif
}
#endif

/* A lower bound on tick-counter ticks per millisecond, or 0 when the counter cannot be
 * trusted for this.  Costly on x86-64 (CPUID traps to the hypervisor in a VM): call once
 * and copy the result into each cache. */
static inline uint64_t nk_clock_ticks_per_ms(void)
{
#if NK_CLOCK_HAS_TICKS && defined(__x86_64__)
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx);
    return (edx & (1u << 8)) ? 1000000u : 0;
#elif NK_CLOCK_HAS_TICKS
    uint64_t frequency_hz;
    __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(frequency_hz));
    return frequency_hz / 1000u;
#else
    return 0;
#endif
}

static inline void nk_clock_init(nk_clock_cache *cache, uint64_t ticks_per_ms)
{
    cache->ticks_per_ms = ticks_per_ms;
    cache->read_ticks = 0;
    cache->reuse_ticks = 0;
    cache->ms = 0;
}

/* Reads the real clock and refreshes the cache. */
static inline int64_t nk_clock_read_ms(nk_clock_cache *cache)
{
    struct timespec now;
#if NK_CLOCK_HAS_TICKS
    /* Ticks first: the time since then is at least the time since the reading. */
    cache->read_ticks = nk_clock_ticks();
#endif
    clock_gettime(CLOCK_REALTIME, &now);
    cache->ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    /* ns left in this millisecond, as ticks (rounded down: on the safe side). */
    cache->reuse_ticks = (uint64_t)(1000000 - now.tv_nsec % 1000000) * cache->ticks_per_ms / 1000000u;
    return cache->ms;
}

/* Now, in ms since the epoch: from the cache while its millisecond is surely current. */
static inline int64_t nk_clock_now_ms(nk_clock_cache *cache)
{
#if NK_CLOCK_HAS_TICKS
    if (nk_clock_ticks() - cache->read_ticks < cache->reuse_ticks)
        return cache->ms;
#endif
    return nk_clock_read_ms(cache);
}

#endif
