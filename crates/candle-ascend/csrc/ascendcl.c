/* Emulated libascendcl.so: init, devices, one worker thread per stream, device memory that the
 * host cannot dereference, copies, error messages, counters and fault injection. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Device addresses are host addresses with bit 62 set: non-canonical on x86-64 and aarch64,
 * so a host dereference of a device pointer faults instead of silently working. */
#define DEVICE_TAG (1ull << 62)
/* CANDLE_ASCEND_SIM_DEVICES emulated devices, 1..MAX_DEVICES; 8 by default, as a training server. */
#define MAX_DEVICES 16
#define DEFAULT_DEVICES 8
static int g_device_count = DEFAULT_DEVICES;
/* Stream work runs when the host waits for it, or once this many tasks are queued: a host
 * read that skips the synchronisation sees stale memory, deterministically. */
#define LAZY_DEPTH 64

/* The emulated parts: names, HBM, AI Core counts and L2 from the vendor's platform files
 * (CANN 8.1.RC1 platform_config/<SoC>.ini, via soc/cann/platforms.tsv), HBM of the 910A and 910ProA,
 * which their files lack, from the vendor's card specifications (soc/platforms_supplement.tsv). */
#include "soc_profiles.h"
static const SocProfile *g_soc = &g_socs[DEFAULT_SOC];

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static __thread int t_device = -1;
static __thread char t_error[1024];
static __thread char t_error_out[1024];
static __thread int t_has_error;

/* ---- errors ---------------------------------------------------------------------------- */

SIM_EXPORT void aclsimSetError(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_error, sizeof t_error, fmt, ap);
    va_end(ap);
    t_has_error = 1;
}

SIM_EXPORT const char *aclGetRecentErrMsg(void) {
    if (!t_has_error) return NULL;
    memcpy(t_error_out, t_error, sizeof t_error_out);
    t_has_error = 0;
    return t_error_out;
}

/* ---- counters and fault injection ----------------------------------------------------- */

typedef struct { char name[64]; uint64_t count, aicpu; } OpCount;
static OpCount g_ops[256];
static int g_nops;
static uint64_t g_allocs, g_frees, g_h2d, g_h2d_bytes, g_d2h, g_d2h_bytes, g_d2d, g_syncs;
static uint64_t g_collectives, g_collective_bytes; /* counted by libhccl.so */
static uint64_t g_current, g_peak;
/* Device memory in use on each device: each has its own HBM. */
static uint64_t g_device_bytes[MAX_DEVICES];
static long g_fail_alloc_at = -1;   /* 1-based index of the first aclrtMalloc call that fails */
static long g_fail_alloc_last = -1; /* ... and of the last (-1: every call from the first on) */
static char g_fail_op[128];

/* CANDLE_ASCEND_SIM_SOC selects the part; an unknown name fails aclInit. */
static int read_soc(void) {
    const char *name = getenv("CANDLE_ASCEND_SIM_SOC");
    if (!name || !*name) return 1;
    for (size_t i = 0; i < sizeof g_socs / sizeof *g_socs; i++)
        if (strcmp(g_socs[i].name, name) == 0) {
            g_soc = &g_socs[i];
            return 1;
        }
    aclsimSetError("CANDLE_ASCEND_SIM_SOC=%s is not an emulated SoC (emulated: Ascend910A, Ascend910ProA, "
                   "Ascend910B1, Ascend910B2, Ascend910B3, Ascend910B4)", name);
    return 0;
}

SIM_EXPORT int aclsimSocFamily(void) { return g_soc->family; }

/* CANDLE_ASCEND_SIM_NO_MATH=1: kernels do no arithmetic. Allocation, argument checks, the
 * support table, launches, copies and counters are unchanged, so real sizes can be counted in
 * seconds; values read back are meaningless. */
static int g_no_math;

SIM_EXPORT int aclsimNoMath(void) { return g_no_math; }

/* CANDLE_ASCEND_SIM_DEVICES: a number in 1..MAX_DEVICES, or aclInit fails. */
static int read_devices(void) {
    const char *v = getenv("CANDLE_ASCEND_SIM_DEVICES");
    if (!v || !*v) return 1;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > MAX_DEVICES) {
        aclsimSetError("CANDLE_ASCEND_SIM_DEVICES=%s: expected a device count from 1 to %d", v, MAX_DEVICES);
        return 0;
    }
    g_device_count = (int)n;
    return 1;
}

SIM_EXPORT int aclsimDeviceCount(void) { return g_device_count; }

/* The part and device count from the environment without aclInit (the emulated DCMI, which a
 * monitoring process loads without ACL): 1, or 0 with the error set. */
SIM_EXPORT int aclsimReadConfig(void) {
    pthread_mutex_lock(&g_lock);
    int ok = g_initialized || (read_soc() && read_devices());
    pthread_mutex_unlock(&g_lock);
    return ok;
}

SIM_EXPORT uint64_t aclsimSocHbm(void) { return g_soc->hbm; }
SIM_EXPORT uint32_t aclsimSocAiCores(void) { return g_soc->ai_core_cnt; }
SIM_EXPORT int aclsimSocIndex(void) { return (int)(g_soc - g_socs); }
SIM_EXPORT const char *aclsimSocName(int index) {
    return index >= 0 && (size_t)index < sizeof g_socs / sizeof *g_socs ? g_socs[index].name : NULL;
}

/* ---- the monitor files the emulated DCMI reads ------------------------------------------ */

/* CANDLE_ASCEND_SIM_MONITOR_DIR, else $TMPDIR (or /tmp)/candle-ascend-sim-<uid>. */
SIM_EXPORT void aclsimMonitorDir(char *out, size_t len) {
    const char *dir = getenv("CANDLE_ASCEND_SIM_MONITOR_DIR");
    if (dir && *dir) {
        snprintf(out, len, "%s", dir);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/candle-ascend-sim-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
}

static SimMonitor *g_monitor[MAX_DEVICES];
static char g_monitor_path[MAX_DEVICES][600];
static pid_t g_monitor_owner;

/* A process's records go with it (a monitor also drops those nobody holds any more); a forked
 * child that exits leaves its parent's. */
__attribute__((destructor)) static void remove_monitor_files(void) {
    if (getpid() != g_monitor_owner) return;
    for (int d = 0; d < MAX_DEVICES; d++)
        if (g_monitor[d]) unlink(g_monitor_path[d]);
}

/* This process's monitor record of `device`, created on first use (NULL when the folder cannot
 * be written: monitoring is then off, nothing else changes). Called with g_lock held. The record
 * is written whole under a temporary name and renamed into place, so a reader never sees a short
 * file; its descriptor stays open with a shared lock, which tells readers the process is alive
 * (a pid can be reused, or belong to another namespace). */
static SimMonitor *monitor(int device) {
    if (device < 0 || device >= MAX_DEVICES) return NULL;
    if (g_monitor[device]) return g_monitor[device];
    static int failed;
    if (failed) return NULL;
    char dir[512], path[600], tmp[640];
    aclsimMonitorDir(dir, sizeof dir);
    struct stat st;
    /* The folder must be ours and private: a shared /tmp is no place to follow someone's link. */
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != getuid()) {
        failed = 1;
        return NULL;
    }
    snprintf(path, sizeof path, "%s/dev%d.%d", dir, device, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    SimMonitor init = {.magic = SIM_MONITOR_MAGIC, .pid = (int32_t)getpid(), .device = device,
                       .start_s = now.tv_sec + now.tv_nsec * 1e-9};
    SimMonitor *m = MAP_FAILED;
    if (fd >= 0 && pwrite(fd, &init, sizeof init, 0) == (ssize_t)sizeof init && flock(fd, LOCK_SH) == 0)
        m = mmap(NULL, sizeof(SimMonitor), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || rename(tmp, path) != 0) {
        if (m != MAP_FAILED) munmap(m, sizeof(SimMonitor));
        if (fd >= 0) close(fd);
        unlink(tmp);
        failed = 1;
        return NULL;
    }
    /* fd stays open for the process's life: it holds the lock. */
    snprintf(g_monitor_path[device], sizeof g_monitor_path[device], "%s", path);
    g_monitor_owner = getpid();
    g_monitor[device] = m;
    return m;
}

/* The backend's modelled device time of a launch it made on this thread's device. */
SIM_EXPORT void aclsimAddBusyUs(double us) {
    pthread_mutex_lock(&g_lock);
    SimMonitor *m = monitor(t_device);
    if (m) m->busy_us += us;
    pthread_mutex_unlock(&g_lock);
}

static void read_faults(void) {
    const char *a = getenv("CANDLE_ASCEND_SIM_FAIL_ALLOC");
    const char *o = getenv("CANDLE_ASCEND_SIM_FAIL_OP");
    const char *m = getenv("CANDLE_ASCEND_SIM_NO_MATH");
    g_no_math = m && strcmp(m, "1") == 0;
    /* "N": every call from the N-th on; "N-M": the N-th to the M-th only (a transient shortage,
     * which the backend's release-and-retry meets when M > N). */
    char *end = NULL;
    g_fail_alloc_at = a ? strtol(a, &end, 10) : -1;
    g_fail_alloc_last = (a && end && *end == '-') ? strtol(end + 1, NULL, 10) : -1;
    snprintf(g_fail_op, sizeof g_fail_op, "%s", o ? o : "");
}

/* A kernel launch of `op`; `aicpu`: the kernel tables put it on the AI CPU (op_support.h). */
SIM_EXPORT void aclsimCountLaunch(const char *op, int aicpu) {
    pthread_mutex_lock(&g_lock);
    int i;
    for (i = 0; i < g_nops; i++)
        if (strcmp(g_ops[i].name, op) == 0) break;
    if (i == g_nops && g_nops < 256) snprintf(g_ops[g_nops++].name, 64, "%s", op);
    if (i < 256) {
        g_ops[i].count++;
        g_ops[i].aicpu += aicpu != 0;
    }
    SimMonitor *m = monitor(t_device);
    if (m) m->launches++;
    pthread_mutex_unlock(&g_lock);
}

SIM_EXPORT int aclsimFailOp(const char *op) { return g_fail_op[0] && strcmp(g_fail_op, op) == 0; }

/* A collective that ran, with the bytes of each rank's buffer (libhccl.so calls this). */
SIM_EXPORT void aclsimCountCollective(uint64_t bytes) {
    pthread_mutex_lock(&g_lock);
    g_collectives++;
    g_collective_bytes += bytes;
    pthread_mutex_unlock(&g_lock);
}

/* Counters, in this order: allocations, frees, h2d copies, h2d bytes, d2h copies, d2h bytes,
 * d2d copies, stream synchronisations, current device bytes, peak device bytes, collectives
 * run (per rank), their bytes. */
SIM_EXPORT void aclsimCounters(uint64_t out[12]) {
    pthread_mutex_lock(&g_lock);
    uint64_t v[12] = {g_allocs, g_frees, g_h2d, g_h2d_bytes, g_d2h, g_d2h_bytes, g_d2d, g_syncs, g_current, g_peak,
                      g_collectives, g_collective_bytes};
    memcpy(out, v, sizeof v);
    pthread_mutex_unlock(&g_lock);
}

/* Kernel launches per op as "name count aicpu" lines (aicpu: those run on the AI CPU); returns
 * the bytes needed. */
SIM_EXPORT size_t aclsimOpCounts(char *buf, size_t len) {
    pthread_mutex_lock(&g_lock);
    size_t used = 0;
    for (int i = 0; i < g_nops; i++) {
        char line[128]; /* a 63-character name and two 20-digit counts fit */
        int n = snprintf(line, sizeof line, "%s %llu %llu\n", g_ops[i].name, (unsigned long long)g_ops[i].count,
                         (unsigned long long)g_ops[i].aicpu);
        if (buf && used + (size_t)n < len) memcpy(buf + used, line, (size_t)n + 1);
        used += (size_t)n;
    }
    pthread_mutex_unlock(&g_lock);
    return used;
}

SIM_EXPORT void aclsimResetCounters(void) {
    pthread_mutex_lock(&g_lock);
    g_nops = 0;
    g_allocs = g_frees = g_h2d = g_h2d_bytes = g_d2h = g_d2h_bytes = g_d2d = g_syncs = 0;
    g_collectives = g_collective_bytes = 0;
    g_peak = g_current;
    pthread_mutex_unlock(&g_lock);
}

/* ---- init and devices ----------------------------------------------------------------- */

SIM_EXPORT aclError aclInit(const char *config) {
    (void)config;
    pthread_mutex_lock(&g_lock);
    int again = g_initialized;
    if (!again && !(read_soc() && read_devices())) {
        pthread_mutex_unlock(&g_lock);
        return ACL_ERROR_INVALID_PARAM;
    }
    g_initialized = 1;
    if (!again) read_faults();
    pthread_mutex_unlock(&g_lock);
    return again ? ACL_ERROR_REPEAT_INITIALIZE : ACL_SUCCESS;
}

SIM_EXPORT aclError aclFinalize(void) { return ACL_SUCCESS; }

SIM_EXPORT aclError aclrtGetDeviceCount(uint32_t *count) {
    if (!count) return ACL_ERROR_INVALID_PARAM;
    if (!g_initialized) return ACL_ERROR_UNINITIALIZE;
    *count = (uint32_t)g_device_count;
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtSetDevice(int32_t id) {
    if (!g_initialized) return ACL_ERROR_UNINITIALIZE;
    if (id < 0 || id >= g_device_count) {
        aclsimSetError("aclrtSetDevice: device id %d out of range 0..%d", id, g_device_count - 1);
        return ACL_ERROR_RT_INVALID_DEVICEID;
    }
    t_device = id;
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtResetDevice(int32_t id) { (void)id; return ACL_SUCCESS; }

SIM_EXPORT aclError aclrtGetDevice(int32_t *id) {
    if (!id) return ACL_ERROR_INVALID_PARAM;
    *id = t_device < 0 ? 0 : t_device;
    return ACL_SUCCESS;
}

SIM_EXPORT const char *aclrtGetSocName(void) { return g_initialized ? g_soc->name : NULL; }

SIM_EXPORT aclError aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total) {
    (void)attr;
    if (!free_bytes || !total) return ACL_ERROR_INVALID_PARAM;
    if (t_device < 0) return ACL_ERROR_RT_PARAM_INVALID;
    pthread_mutex_lock(&g_lock);
    *total = g_soc->hbm;
    *free_bytes = g_soc->hbm - g_device_bytes[t_device];
    pthread_mutex_unlock(&g_lock);
    return ACL_SUCCESS;
}

/* ---- device memory -------------------------------------------------------------------- */

typedef struct { uintptr_t host; uint64_t size; int device; } Block;
static Block *g_blocks;
static size_t g_nblocks, g_capblocks;

static Block *find_block(uintptr_t host, uint64_t bytes) {
    for (size_t i = 0; i < g_nblocks; i++)
        if (host >= g_blocks[i].host && host + bytes <= g_blocks[i].host + g_blocks[i].size) return &g_blocks[i];
    return NULL;
}

/* The host address behind a device range, or NULL when the range is not device memory. */
SIM_EXPORT void *aclsimHostPtr(const void *dev, uint64_t bytes) {
    uintptr_t d = (uintptr_t)dev;
    if (!(d & DEVICE_TAG)) return NULL;
    uintptr_t host = d & ~DEVICE_TAG;
    pthread_mutex_lock(&g_lock);
    Block *b = find_block(host, bytes);
    pthread_mutex_unlock(&g_lock);
    return b ? (void *)host : NULL;
}

SIM_EXPORT aclError aclrtMalloc(void **ptr, size_t size, int policy) {
    (void)policy;
    if (!ptr || size == 0) {
        aclsimSetError("aclrtMalloc: size must be > 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (t_device < 0) {
        aclsimSetError("aclrtMalloc: no device set on this thread");
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    pthread_mutex_lock(&g_lock);
    g_allocs++;
    int fail = g_fail_alloc_at > 0 && (long)g_allocs >= g_fail_alloc_at &&
               (g_fail_alloc_last < 0 || (long)g_allocs <= g_fail_alloc_last);
    uint64_t rounded = (size + 31) / 32 * 32 + 32; /* CANN: a multiple of 32, plus 32 */
    if (fail || g_device_bytes[t_device] + rounded > g_soc->hbm) {
        pthread_mutex_unlock(&g_lock);
        aclsimSetError("aclrtMalloc: out of device memory allocating %zu bytes%s", size,
                       fail ? " (injected by CANDLE_ASCEND_SIM_FAIL_ALLOC)" : "");
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    void *host = NULL;
    if (posix_memalign(&host, 64, rounded) != 0) {
        pthread_mutex_unlock(&g_lock);
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    if (g_nblocks == g_capblocks) {
        g_capblocks = g_capblocks ? 2 * g_capblocks : 1024;
        g_blocks = realloc(g_blocks, g_capblocks * sizeof *g_blocks);
    }
    g_blocks[g_nblocks++] = (Block){(uintptr_t)host, rounded, t_device};
    g_current += rounded;
    g_device_bytes[t_device] += rounded;
    if (g_current > g_peak) g_peak = g_current;
    SimMonitor *m = monitor(t_device);
    if (m) m->hbm_used = g_device_bytes[t_device];
    pthread_mutex_unlock(&g_lock);
    *ptr = (void *)((uintptr_t)host | DEVICE_TAG);
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtFree(void *ptr) {
    uintptr_t d = (uintptr_t)ptr;
    if (!ptr || !(d & DEVICE_TAG)) {
        aclsimSetError("aclrtFree: %p is not a device address", ptr);
        return ACL_ERROR_INVALID_PARAM;
    }
    uintptr_t host = d & ~DEVICE_TAG;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nblocks; i++) {
        if (g_blocks[i].host == host) {
            g_current -= g_blocks[i].size;
            g_device_bytes[g_blocks[i].device] -= g_blocks[i].size;
            if (g_monitor[g_blocks[i].device]) g_monitor[g_blocks[i].device]->hbm_used = g_device_bytes[g_blocks[i].device];
            g_frees++;
            g_blocks[i] = g_blocks[--g_nblocks];
            pthread_mutex_unlock(&g_lock);
            free((void *)host);
            return ACL_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    aclsimSetError("aclrtFree: %p was not returned by aclrtMalloc", ptr);
    return ACL_ERROR_INVALID_PARAM;
}

/* ---- streams: one worker thread each, tasks run in order --------------------------------- */

typedef struct Task { void (*fn)(void *); void *ctx; struct Task *next; int eager; } Task;
typedef struct Stream {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    Task *head, *tail;
    int queued, waiters, busy, stop;
    /* Queued tasks that must run without waiting for the host (collectives: other devices'
     * streams wait on them). */
    int eager;
    /* An AI Core exception of a task of this stream, reported by its next synchronisation. */
    char fault[512];
    int has_fault;
} Stream;

/* The stream whose task this worker thread is running. */
static __thread Stream *t_running;

/* The worker runs a task once the host waits on the stream, or once LAZY_DEPTH are queued. */
static void *stream_main(void *arg) {
    Stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!(s->head && (s->waiters || s->stop || s->eager || s->queued >= LAZY_DEPTH)) && !(s->stop && !s->head))
            pthread_cond_wait(&s->wake, &s->lock);
        if (!s->head && s->stop) break;
        Task *t = s->head;
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        s->queued--;
        s->eager -= t->eager;
        s->busy = 1;
        pthread_mutex_unlock(&s->lock);
        t_running = s;
        t->fn(t->ctx);
        t_running = NULL;
        free(t);
        pthread_mutex_lock(&s->lock);
        s->busy = 0;
        if (!s->head) pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static Stream *new_stream(void) {
    Stream *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

SIM_EXPORT aclError aclrtCreateStream(aclrtStream *out) {
    if (!out) return ACL_ERROR_INVALID_PARAM;
    if (t_device < 0) {
        aclsimSetError("aclrtCreateStream: no device set on this thread");
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    Stream *s = new_stream();
    if (!s) return ACL_ERROR_INTERNAL_ERROR;
    *out = s;
    return ACL_SUCCESS;
}

/* ACL: a NULL stream is the device's default stream (of the device bound to this thread). */
static Stream *g_default_streams[MAX_DEVICES];

static Stream *stream_of(aclrtStream stream) {
    if (stream) return stream;
    if (t_device < 0) {
        aclsimSetError("default stream: no device set on this thread");
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    if (!g_default_streams[t_device]) g_default_streams[t_device] = new_stream();
    Stream *s = g_default_streams[t_device];
    pthread_mutex_unlock(&g_lock);
    return s;
}

static void wait_idle(Stream *s) {
    pthread_mutex_lock(&s->lock);
    s->waiters++;
    pthread_cond_signal(&s->wake);
    while (s->head || s->busy) pthread_cond_wait(&s->idle, &s->lock);
    s->waiters--;
    pthread_mutex_unlock(&s->lock);
}

/* A kernel that hit bad input (say an index out of range) records an AI Core exception on its
 * stream; that stream's next synchronisation reports it, as on hardware. */
SIM_EXPORT void aclsimKernelFault(const char *fmt, ...) {
    Stream *s = t_running;
    if (!s) { /* kernels run only on stream workers: anything else is an emulator bug */
        fprintf(stderr, "candle-ascend emulator: a kernel fault outside a stream\n");
        abort();
    }
    pthread_mutex_lock(&g_lock);
    if (!s->has_fault) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->fault, sizeof s->fault, fmt, ap);
        va_end(ap);
        s->has_fault = 1;
    }
    pthread_mutex_unlock(&g_lock);
}

SIM_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
    Stream *s = stream_of(stream);
    if (!s) return ACL_ERROR_RT_PARAM_INVALID;
    wait_idle(s);
    pthread_mutex_lock(&g_lock);
    g_syncs++;
    int fault = s->has_fault;
    s->has_fault = 0;
    char message[sizeof s->fault];
    memcpy(message, s->fault, sizeof message);
    pthread_mutex_unlock(&g_lock);
    if (fault) {
        aclsimSetError("aicore exception: %s", message);
        return ACL_ERROR_RT_AICORE_EXCEPTION;
    }
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtDestroyStream(aclrtStream stream) {
    Stream *s = stream;
    if (!s) return ACL_ERROR_INVALID_PARAM;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    free(s);
    return ACL_SUCCESS;
}

static int enqueue_task(aclrtStream stream, void (*fn)(void *), void *ctx, int eager) {
    Stream *s = stream_of(stream);
    if (!s) return -1;
    Task *t = malloc(sizeof *t);
    if (!t) return -1;
    *t = (Task){fn, ctx, NULL, eager};
    pthread_mutex_lock(&s->lock);
    if (s->tail) s->tail->next = t; else s->head = t;
    s->tail = t;
    s->queued++;
    s->eager += eager;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

SIM_EXPORT int aclsimEnqueue(aclrtStream stream, void (*fn)(void *), void *ctx) {
    return enqueue_task(stream, fn, ctx, 0);
}

/* A task that runs, with everything queued before it, without waiting for the host. */
SIM_EXPORT int aclsimEnqueueEager(aclrtStream stream, void (*fn)(void *), void *ctx) {
    return enqueue_task(stream, fn, ctx, 1);
}

/* ---- events: one stream's point that another stream, or the host, waits for -------------- */

/* `recorded` counts aclrtRecordEvent calls, `completed` the records their streams have reached;
 * a wait takes the latest record at the time it is queued, as acl_rt.h documents. */
typedef struct Event {
    pthread_mutex_t lock;
    pthread_cond_t reached;
    uint64_t recorded, completed;
} Event;
typedef struct { Event *event; uint64_t target; } EventTask;

static void wait_event(Event *e, uint64_t target) {
    pthread_mutex_lock(&e->lock);
    while (e->completed < target) pthread_cond_wait(&e->reached, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

/* Wait until the event's latest record (as of this call) has been reached by its stream. */
static void wait_last_record(Event *e) {
    pthread_mutex_lock(&e->lock);
    uint64_t last = e->recorded;
    pthread_mutex_unlock(&e->lock);
    wait_event(e, last);
}

static void run_record(void *ctx) {
    EventTask *t = ctx;
    pthread_mutex_lock(&t->event->lock);
    if (t->event->completed < t->target) t->event->completed = t->target;
    pthread_cond_broadcast(&t->event->reached);
    pthread_mutex_unlock(&t->event->lock);
    free(t);
}

static void run_wait(void *ctx) {
    EventTask *t = ctx;
    wait_event(t->event, t->target);
    free(t);
}

SIM_EXPORT aclError aclrtCreateEvent(aclrtEvent *event) {
    if (!event) return ACL_ERROR_INVALID_PARAM;
    if (t_device < 0) {
        aclsimSetError("aclrtCreateEvent: no device set on this thread");
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    Event *e = calloc(1, sizeof *e);
    if (!e) return ACL_ERROR_BAD_ALLOC;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->reached, NULL);
    *event = e;
    return ACL_SUCCESS;
}

/* Queued work may still record or wait on the event: destruction waits for its last record. */
SIM_EXPORT aclError aclrtDestroyEvent(aclrtEvent event) {
    Event *e = event;
    if (!e) return ACL_ERROR_INVALID_PARAM;
    wait_last_record(e);
    pthread_cond_destroy(&e->reached);
    pthread_mutex_destroy(&e->lock);
    free(e);
    return ACL_SUCCESS;
}

/* The record runs eagerly: another stream may be waiting for it, and a device does not wait
 * for its host to reach a synchronisation before it runs queued work. */
SIM_EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
    Event *e = event;
    if (!e) return ACL_ERROR_INVALID_PARAM;
    EventTask *t = malloc(sizeof *t);
    if (!t) return ACL_ERROR_BAD_ALLOC;
    pthread_mutex_lock(&e->lock);
    t->event = e;
    t->target = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (aclsimEnqueueEager(stream, run_record, t) != 0) {
        free(t);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    return ACL_SUCCESS;
}

/* Waiting on an event that was never recorded is refused: acl_rt.h does not define it, and on
 * CUDA it silently orders nothing. */
SIM_EXPORT aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
    Event *e = event;
    if (!e) return ACL_ERROR_INVALID_PARAM;
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (target == 0) {
        aclsimSetError("aclrtStreamWaitEvent: the event has not been recorded");
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    EventTask *t = malloc(sizeof *t);
    if (!t) return ACL_ERROR_BAD_ALLOC;
    *t = (EventTask){e, target};
    if (aclsimEnqueue(stream, run_wait, t) != 0) {
        free(t);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtSynchronizeEvent(aclrtEvent event) {
    Event *e = event;
    if (!e) return ACL_ERROR_INVALID_PARAM;
    wait_last_record(e);
    return ACL_SUCCESS;
}

/* ---- pinned host memory --------------------------------------------------------------- */

static Block *g_pinned;
static size_t g_npinned, g_cappinned;

static int is_pinned(const void *p, size_t bytes) {
    uintptr_t h = (uintptr_t)p;
    pthread_mutex_lock(&g_lock);
    int found = 0;
    for (size_t i = 0; i < g_npinned && !found; i++)
        found = h >= g_pinned[i].host && h + bytes <= g_pinned[i].host + g_pinned[i].size;
    pthread_mutex_unlock(&g_lock);
    return found;
}

SIM_EXPORT aclError aclrtMallocHost(void **ptr, size_t size) {
    if (!ptr || size == 0) return ACL_ERROR_INVALID_PARAM;
    void *host = NULL;
    if (posix_memalign(&host, 64, size) != 0) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    pthread_mutex_lock(&g_lock);
    if (g_npinned == g_cappinned) {
        g_cappinned = g_cappinned ? 2 * g_cappinned : 64;
        g_pinned = realloc(g_pinned, g_cappinned * sizeof *g_pinned);
    }
    g_pinned[g_npinned++] = (Block){(uintptr_t)host, size, -1};
    pthread_mutex_unlock(&g_lock);
    *ptr = host;
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtFreeHost(void *ptr) {
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_npinned; i++) {
        if (g_pinned[i].host == (uintptr_t)ptr) {
            g_pinned[i] = g_pinned[--g_npinned];
            pthread_mutex_unlock(&g_lock);
            free(ptr);
            return ACL_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    aclsimSetError("aclrtFreeHost: %p was not returned by aclrtMallocHost", ptr);
    return ACL_ERROR_INVALID_PARAM;
}

/* ---- copies ----------------------------------------------------------------------------- */

static aclError resolve(void **dst, const void **src, size_t count, int kind) {
    void *d = *dst;
    const void *s = *src;
    if (kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE) d = aclsimHostPtr(*dst, count);
    if (kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE) s = aclsimHostPtr(*src, count);
    if (kind < 0 || kind > ACL_MEMCPY_DEVICE_TO_DEVICE || !d || !s) {
        aclsimSetError("aclrtMemcpy: kind %d does not match the addresses %p <- %p (%zu bytes)", kind, *dst, *src, count);
        return ACL_ERROR_INVALID_PARAM;
    }
    *dst = d;
    *src = s;
    return ACL_SUCCESS;
}

static void count_copy(int kind, size_t count) {
    pthread_mutex_lock(&g_lock);
    if (kind == ACL_MEMCPY_HOST_TO_DEVICE) { g_h2d++; g_h2d_bytes += count; }
    if (kind == ACL_MEMCPY_DEVICE_TO_HOST) { g_d2h++; g_d2h_bytes += count; }
    if (kind == ACL_MEMCPY_DEVICE_TO_DEVICE) g_d2d++;
    pthread_mutex_unlock(&g_lock);
}

/* Synchronous for the host, and ordered with no stream: copying results the stream has not yet
 * produced reads stale memory, as on hardware. torch_npu synchronises the stream first. */
SIM_EXPORT aclError aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, int kind) {
    if (count == 0) return ACL_SUCCESS;
    if (count > dest_max) return ACL_ERROR_INVALID_PARAM;
    aclError e = resolve(&dst, &src, count, kind);
    if (e) return e;
    memmove(dst, src, count);
    count_copy(kind, count);
    return ACL_SUCCESS;
}

typedef struct { void *dst; const void *src; size_t count; } CopyTask;
static void run_copy(void *arg) {
    CopyTask *c = arg;
    memmove(c->dst, c->src, c->count);
    free(c);
}

/* The copy runs on the stream, when the stream gets to it; the call returns at once. Host
 * memory must come from aclrtMallocHost: CANN 8.0's aclrtMemcpyAsync documentation promises
 * "unpredictable errors" for other host memory on Atlas training and A2 parts, so it is
 * refused here. */
SIM_EXPORT aclError aclrtMemcpyAsync(void *dst, size_t dest_max, const void *src, size_t count, int kind,
                                     aclrtStream stream) {
    if (count == 0) return ACL_SUCCESS;
    if (count > dest_max) return ACL_ERROR_INVALID_PARAM;
    const void *host = kind == ACL_MEMCPY_HOST_TO_DEVICE ? src : kind == ACL_MEMCPY_DEVICE_TO_HOST ? dst : NULL;
    if (host && !is_pinned(host, count)) {
        aclsimSetError("aclrtMemcpyAsync: host memory %p (%zu bytes) was not allocated with aclrtMallocHost; CANN 8.0 "
                       "gives unpredictable errors for pageable memory on Atlas training and A2 parts", host, count);
        return ACL_ERROR_INVALID_PARAM;
    }
    aclError e = resolve(&dst, &src, count, kind);
    if (e) return e;
    CopyTask *c = malloc(sizeof *c);
    *c = (CopyTask){dst, src, count};
    if (aclsimEnqueue(stream, run_copy, c) != 0) {
        free(c);
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    count_copy(kind, count);
    return ACL_SUCCESS;
}

SIM_EXPORT aclError aclrtMemset(void *dev, size_t max, int32_t value, size_t count) {
    if (count == 0) return ACL_SUCCESS;
    void *h = aclsimHostPtr(dev, count);
    if (!h || count > max) return ACL_ERROR_INVALID_PARAM;
    memset(h, value, count);
    return ACL_SUCCESS;
}
