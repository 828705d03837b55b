/* labkit's clock shim: shift one server's wall clock, or change the rate of its monotonic
 * clock, while it runs, without root.
 *
 * Loaded with LD_PRELOAD, it replaces clock_gettime, gettimeofday, time and timespec_get.
 * The wall clocks (CLOCK_REALTIME, its _COARSE variant and CLOCK_TAI) are shifted, exactly
 * as when an operator or NTP steps a machine's clock. The shift is read, on every call,
 * from a 64-byte file that labkit rewrites (LABKIT_CLOCK_FILE), so a running server sees a
 * step at once:
 *
 *     fake = anchor_fake + rate * (real - anchor_real)
 *
 * The monotonic clock (CLOCK_MONOTONIC and its _COARSE variant) has its own anchors and
 * rate in the same file, for a machine whose oscillator runs fast or slow: a monotonic
 * clock is immune to steps, not to drift. labkit only ever changes its rate, re-anchored
 * at the fake now, so it never jumps. All zero (a file written before these fields
 * existed): untouched. CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME and the CPU clocks pass through.
 *
 * A fake monotonic clock alone would break every timed wait: the JVM (and CPython) compute
 * an ABSOLUTE deadline from clock_gettime(CLOCK_MONOTONIC) and hand it to the kernel, which
 * compares it with the REAL clock; a clock running 1.5 times as fast would make a 1 s wait
 * last 1.5 s and more. So the calls that take an absolute CLOCK_MONOTONIC deadline translate
 * it back to real time, real = anchor_real + (fake - anchor_fake) / rate:
 * pthread_cond_timedwait (only on a condition variable made for CLOCK_MONOTONIC: glibc keeps
 * that in bit 1 of __wrefs, checked once at start, see monotonic_cond_bit),
 * pthread_cond_clockwait, sem_clockwait and clock_nanosleep(TIMER_ABSTIME). The relative
 * sleeps nanosleep and clock_nanosleep(CLOCK_MONOTONIC) are scaled by the rate. Not
 * translated: the relative timeouts of poll, epoll_wait and select (they last their real
 * length), timerfd and POSIX timers, pthread_mutex_clocklock and the rwlock waits.
 *
 * What it cannot reach: programs that read the clock without libc (Go reads it through
 * the kernel's vDSO directly: etcd), and statically linked programs.
 *
 * Why no dlsym(RTLD_NEXT) on the first call: dlsym may allocate, and the server's own
 * malloc (jemalloc in Redis) may read the clock while it initialises; Debian's libfaketime
 * aborts Redis at start with "unexpected recursive calls to clock_gettime". Here the real
 * functions are resolved once, in a constructor; until then the clock is read with a plain
 * system call. Nothing in a clock read allocates or locks, so it is safe in signal handlers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
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

struct clock_file {           /* the layout labkit/servers/runners/clock.py writes (little-endian) */
    uint32_t magic;
    uint32_t sequence;        /* odd while labkit is rewriting the fields below */
    int64_t anchor_real;      /* ns since the epoch, the real wall clock at the last change */
    int64_t anchor_fake;      /* ns since the epoch, what the server saw at that moment */
    double rate;              /* fake seconds per real second (1.0: only shifted) */
    int64_t mono_anchor_real; /* ns of the real CLOCK_MONOTONIC at the last change of its rate */
    int64_t mono_anchor_fake; /* ns of the server's CLOCK_MONOTONIC at that moment */
    double mono_rate;         /* 0: the monotonic clock is untouched (older files are all zero) */
};

struct mapping {
    int64_t anchor_real, anchor_fake;
    double rate;
};

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cond_clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
typedef int (*sem_clockwait_fn)(sem_t *, clockid_t, const struct timespec *);
typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static cond_timedwait_fn real_cond_timedwait;
static cond_clockwait_fn real_cond_clockwait;
static sem_clockwait_fn real_sem_clockwait;
static clock_nanosleep_fn real_clock_nanosleep;
static const volatile struct clock_file *shared;
/* glibc marks a condition variable made for CLOCK_MONOTONIC with this bit of __wrefs (an
 * internal detail: checked at start on two fresh condition variables). 0 if that does not
 * hold: then the monotonic clock is left untouched, since a fake clock whose timed waits
 * cannot be translated would stretch every wait of the JVM (see above) */
static unsigned int monotonic_cond_bit;

static int read_real(clockid_t clock, struct timespec *ts) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real)
        return real(clock, ts);
    return (int)syscall(SYS_clock_gettime, clock, ts);
}

static void *next(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

/* the waits below may be called by another library's constructor before ours has run */
#define RESOLVE(pointer, name) \
    do { \
        if (!pointer) \
            pointer = (__typeof__(pointer))next(name); \
    } while (0)

static void find_monotonic_cond_bit(void) {
    pthread_condattr_t attr;
    pthread_cond_t monotonic, wall;
    if (pthread_condattr_init(&attr) != 0)
        return;
    if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&monotonic, &attr) == 0) {
        if (pthread_cond_init(&wall, NULL) == 0) {
            unsigned int bit = 2;
            if ((monotonic.__data.__wrefs & bit) && !(wall.__data.__wrefs & bit))
                monotonic_cond_bit = bit;
            pthread_cond_destroy(&wall);
        }
        pthread_cond_destroy(&monotonic);
    }
    pthread_condattr_destroy(&attr);
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
    find_monotonic_cond_bit();
    real_cond_timedwait = (cond_timedwait_fn)next("pthread_cond_timedwait");
    real_cond_clockwait = (cond_clockwait_fn)next("pthread_cond_clockwait");
    real_sem_clockwait = (sem_clockwait_fn)next("sem_clockwait");
    real_clock_nanosleep = (clock_nanosleep_fn)next("clock_nanosleep");
    __atomic_store_n(&real_clock_gettime, (clock_gettime_fn)next("clock_gettime"), __ATOMIC_RELEASE);
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

static int is_monotonic_clock(clockid_t clock) {
    return clock == CLOCK_MONOTONIC || clock == CLOCK_MONOTONIC_COARSE;
}

/* A seqlock read: retry while labkit is halfway through a rewrite. A writer killed in the
 * middle must not hang the server, so after many tries the last values read are used.
 * Returns 0 when the clock asked for is untouched (no file, or a monotonic rate of 0). */
static int read_mapping(int monotonic, struct mapping *out) {
    if (!shared || (monotonic && !monotonic_cond_bit))
        return 0;
    for (int attempt = 0; attempt < 10000; attempt++) {
        uint32_t before = __atomic_load_n(&shared->sequence, __ATOMIC_ACQUIRE);
        if (monotonic) {
            out->anchor_real = shared->mono_anchor_real;
            out->anchor_fake = shared->mono_anchor_fake;
            out->rate = shared->mono_rate;
        } else {
            out->anchor_real = shared->anchor_real;
            out->anchor_fake = shared->anchor_fake;
            out->rate = shared->rate;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!(before & 1) && before == __atomic_load_n(&shared->sequence, __ATOMIC_RELAXED))
            break;
    }
    return out->rate > 0.0;
}

static int64_t to_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * NS + ts->tv_nsec;
}

static struct timespec from_ns(int64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / NS), .tv_nsec = (long)(ns % NS)};
    if (ts.tv_nsec < 0) {
        ts.tv_nsec += NS;
        ts.tv_sec -= 1;
    }
    return ts;
}

/* a double holds 53 bits, an epoch in ns needs 61: multiply only the distance from the
 * anchor, and add a pure offset in integers */
static int64_t fake_of(const struct mapping *m, int64_t real) {
    if (m->rate == 1.0)
        return real + (m->anchor_fake - m->anchor_real);
    return m->anchor_fake + (int64_t)((double)(real - m->anchor_real) * m->rate);
}

static int64_t real_of(const struct mapping *m, int64_t fake) {
    if (m->rate == 1.0)
        return fake - (m->anchor_fake - m->anchor_real);
    return m->anchor_real + (int64_t)((double)(fake - m->anchor_fake) / m->rate);
}

static void shift(struct timespec *ts, int monotonic) {
    struct mapping m;
    if (read_mapping(monotonic, &m))
        *ts = from_ns(fake_of(&m, to_ns(ts)));
}

/* an absolute CLOCK_MONOTONIC deadline the program computed from its fake clock, as the
 * kernel's real clock will reach it; NULL when the monotonic clock is untouched */
static const struct timespec *real_deadline(const struct timespec *fake, struct timespec *out) {
    struct mapping m;
    if (!fake || !read_mapping(1, &m))
        return fake;
    *out = from_ns(real_of(&m, to_ns(fake)));
    return out;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int status = read_real(clock, ts);
    if (status == 0 && is_wall_clock(clock))
        shift(ts, 0);
    else if (status == 0 && is_monotonic_clock(clock))
        shift(ts, 1);
    return status;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete: glibc fills no time zone either */
    struct timespec ts;
    read_real(CLOCK_REALTIME, &ts);
    shift(&ts, 0);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    read_real(CLOCK_REALTIME, &ts);
    shift(&ts, 0);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC)
        return 0;
    read_real(CLOCK_REALTIME, ts);
    shift(ts, 0);
    return base;
}

/* -- timed waits on the monotonic clock ------------------------------------------------ */

int pthread_cond_timedwait(pthread_cond_t *restrict cond, pthread_mutex_t *restrict mutex,
                           const struct timespec *restrict abstime) {
    struct timespec translated;
    if (monotonic_cond_bit && (__atomic_load_n(&cond->__data.__wrefs, __ATOMIC_RELAXED) & monotonic_cond_bit))
        abstime = real_deadline(abstime, &translated);
    RESOLVE(real_cond_timedwait, "pthread_cond_timedwait");
    return real_cond_timedwait(cond, mutex, abstime);
}

int pthread_cond_clockwait(pthread_cond_t *restrict cond, pthread_mutex_t *restrict mutex, clockid_t clock,
                           const struct timespec *restrict abstime) {
    struct timespec translated;
    if (clock == CLOCK_MONOTONIC)
        abstime = real_deadline(abstime, &translated);
    RESOLVE(real_cond_clockwait, "pthread_cond_clockwait");
    return real_cond_clockwait(cond, mutex, clock, abstime);
}

int sem_clockwait(sem_t *restrict sem, clockid_t clock, const struct timespec *restrict abstime) {
    struct timespec translated;
    if (clock == CLOCK_MONOTONIC)
        abstime = real_deadline(abstime, &translated);
    RESOLVE(real_sem_clockwait, "sem_clockwait");
    return real_sem_clockwait(sem, clock, abstime);
}

/* a relative sleep of `fake` on the server's clock lasts fake / rate of real time; the
 * time left after an interruption is given back on the server's clock */
static int scaled_sleep(clockid_t clock, const struct timespec *request, struct timespec *remain) {
    struct mapping m;
    RESOLVE(real_clock_nanosleep, "clock_nanosleep");
    if (!request || !read_mapping(1, &m) || m.rate == 1.0)
        return real_clock_nanosleep(clock, 0, request, remain);
    struct timespec real_request = from_ns((int64_t)((double)to_ns(request) / m.rate)), real_remain;
    int status = real_clock_nanosleep(clock, 0, &real_request, remain ? &real_remain : NULL);
    if (status == EINTR && remain)
        *remain = from_ns((int64_t)((double)to_ns(&real_remain) * m.rate));
    return status;
}

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *request, struct timespec *remain) {
    struct timespec translated;
    RESOLVE(real_clock_nanosleep, "clock_nanosleep");
    if (clock != CLOCK_MONOTONIC)
        return real_clock_nanosleep(clock, flags, request, remain);
    if (flags & TIMER_ABSTIME)
        return real_clock_nanosleep(clock, flags, real_deadline(request, &translated), remain);
    return scaled_sleep(clock, request, remain);
}

int nanosleep(const struct timespec *request, struct timespec *remain) {
    if (!request || request->tv_nsec < 0 || request->tv_nsec >= NS) {
        errno = EINVAL;
        return -1;
    }
    int status = scaled_sleep(CLOCK_MONOTONIC, request, remain);
    if (status != 0) {
        errno = status;
        return -1;
    }
    return 0;
}
