/* labkit's clock shim: shift one server's wall clock while it runs, without root.
 *
 * Loaded with LD_PRELOAD, it replaces clock_gettime, gettimeofday, time and timespec_get.
 * Only the wall clocks (CLOCK_REALTIME, its _COARSE variant and CLOCK_TAI) are shifted;
 * monotonic and CPU clocks pass through untouched, exactly as when an operator or NTP
 * steps a machine's clock. The shift is read, on every call, from a 64-byte file that
 * labkit rewrites (LABKIT_CLOCK_FILE), so a running server sees a step at once:
 *
 *     fake = anchor_fake + rate * (real - anchor_real)
 *
 * What it cannot reach: programs that read the clock without libc (Go reads it through
 * the kernel's vDSO directly: etcd), and statically linked programs.
 *
 * Why no dlsym(RTLD_NEXT) on the first call: dlsym may allocate, and the server's own
 * malloc (jemalloc in Redis) may read the clock while it initialises; Debian's libfaketime
 * aborts Redis at start with "unexpected recursive calls to clock_gettime". Here the real
 * clock_gettime is resolved once, in a constructor; until it is known, and during that
 * resolution, the clock is read with a plain system call. Nothing here allocates or
 * locks, so it is safe in signal handlers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
#define MAGIC 0x4c434b4cu /* "LKCL" */

struct clock_file {      /* the layout labkit/servers/clock.py writes (little-endian) */
    uint32_t magic;
    uint32_t sequence;   /* odd while labkit is rewriting the fields below */
    int64_t anchor_real; /* ns since the epoch, the real wall clock at the last change */
    int64_t anchor_fake; /* ns since the epoch, what the server saw at that moment */
    double rate;         /* fake seconds per real second (1.0: only shifted) */
};

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
static clock_gettime_fn real_clock_gettime;
static const volatile struct clock_file *shared;

static int read_real(clockid_t clock, struct timespec *ts) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real)
        return real(clock, ts);
    return (int)syscall(SYS_clock_gettime, clock, ts);
}

__attribute__((constructor)) static void clock_shim_init(void) {
    const char *path = getenv("LABKIT_CLOCK_FILE");
    if (path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        /* mapping past the end of a short file would SIGBUS the server on first read */
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct clock_file)) {
            void *map = mmap(NULL, sizeof(struct clock_file), PROT_READ, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED && ((struct clock_file *)map)->magic == MAGIC)
                shared = map;
        }
        if (fd >= 0)
            close(fd);
    }
    __atomic_store_n(&real_clock_gettime, (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime"), __ATOMIC_RELEASE);
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

/* A seqlock read: retry while labkit is halfway through a rewrite. A writer killed in the
 * middle must not hang the server, so after many tries the last values read are used. */
static void shift(struct timespec *ts) {
    if (!shared)
        return;
    int64_t anchor_real = 0, anchor_fake = 0;
    double rate = 1.0;
    for (int attempt = 0; attempt < 10000; attempt++) {
        uint32_t before = __atomic_load_n(&shared->sequence, __ATOMIC_ACQUIRE);
        anchor_real = shared->anchor_real;
        anchor_fake = shared->anchor_fake;
        rate = shared->rate;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!(before & 1) && before == __atomic_load_n(&shared->sequence, __ATOMIC_RELAXED))
            break;
    }
    int64_t real = (int64_t)ts->tv_sec * NS + ts->tv_nsec;
    /* a double holds 53 bits, an epoch in ns needs 61: multiply only the distance from
     * the anchor, and add a pure offset in integers */
    int64_t fake = rate == 1.0 ? real + (anchor_fake - anchor_real)
                               : anchor_fake + (int64_t)((double)(real - anchor_real) * rate);
    int64_t seconds = fake / NS, nanos = fake % NS;
    if (nanos < 0) {
        nanos += NS;
        seconds -= 1;
    }
    ts->tv_sec = (time_t)seconds;
    ts->tv_nsec = (long)nanos;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int status = read_real(clock, ts);
    if (status == 0 && is_wall_clock(clock))
        shift(ts);
    return status;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete: glibc fills no time zone either */
    struct timespec ts;
    read_real(CLOCK_REALTIME, &ts);
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    read_real(CLOCK_REALTIME, &ts);
    shift(&ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC)
        return 0;
    read_real(CLOCK_REALTIME, ts);
    shift(ts);
    return base;
}
