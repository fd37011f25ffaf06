/* A wall-clock step for one process, and nothing else (preloaded by tests/e2e/test_clock_jump.py).
 *
 * CLOCK_REALTIME (and gettimeofday, time) read OFFSET seconds off real time; OFFSET is read from
 * the file named by GPUYARD_TEST_CLOCK_OFFSET_FILE, at most every 100 ms of the monotonic clock.
 * Every other clock (MONOTONIC, BOOTTIME), every sleep and every timer are left alone, exactly
 * as a real step of the wall clock (`date -s`, an NTP step) leaves them. libfaketime, which
 * fakes every clock by default, does not do that: with FAKETIME_DONT_FAKE_MONOTONIC it still
 * shifts the absolute monotonic deadlines of clock_nanosleep (Python's time.sleep fails with
 * EINVAL once the offset exceeds the uptime) and refuses setitimer (EINVAL).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static int64_t offset_ns;      /* read and written atomically */
static int64_t next_read_ns;   /* monotonic ns after which the file is read again */
static pthread_mutex_t reading = PTHREAD_MUTEX_INITIALIZER;

static clock_gettime_fn real_clock_gettime(void) {
    static clock_gettime_fn real;
    if (real == NULL)
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return real;
}

static int64_t offset_now(void) {
    struct timespec mono;
    if (real_clock_gettime()(CLOCK_MONOTONIC, &mono) == 0) {
        int64_t now = (int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec;
        if (now >= __atomic_load_n(&next_read_ns, __ATOMIC_RELAXED)
            && pthread_mutex_trylock(&reading) == 0) {
            const char *path = getenv("GPUYARD_TEST_CLOCK_OFFSET_FILE");
            FILE *f = path ? fopen(path, "r") : NULL;
            double seconds;
            if (f != NULL) {
                if (fscanf(f, "%lf", &seconds) == 1)
                    __atomic_store_n(&offset_ns, (int64_t)(seconds * 1e9), __ATOMIC_RELAXED);
                fclose(f);
            }
            __atomic_store_n(&next_read_ns, now + 100000000, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&reading);
        }
    }
    return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts) {
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset_now();
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int rc = real_clock_gettime()(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
