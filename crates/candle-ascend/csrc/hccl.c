/* Emulated libhccl.so: communicators over several emulated devices, in one process
 * (HcclCommInitAll) or across processes of one machine (HcclGetRootInfo + HcclCommInitRootInfo,
 * the root info naming a shared-memory rendezvous). Prototypes, enum values and result codes
 * follow the vendor's hccl.h and hccl_types.h (torch-npu 2.14.0 wheel).
 *
 * A collective is a task on the calling rank's stream, so it runs in stream order. When it runs,
 * the rank copies its data (in chunks) into its slot of the communicator's shared buffer and
 * waits for every rank; then each rank computes its own result from the slots, and the next
 * collective starts once every rank has read. Ranks whose calls differ (kind, count, dtype, op
 * or root) fail, as HCCL does; a rank that never arrives makes the others fail with
 * HCCL_E_TIMEOUT after HCCL_EXEC_TIMEOUT. Failures are reported by the stream's next
 * synchronisation. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "half.h"
#include "sim.h"

typedef int32_t HcclResult;
enum { HCCL_SUCCESS = 0, HCCL_E_PARA = 1, HCCL_E_PTR = 2, HCCL_E_MEMORY = 3, HCCL_E_INTERNAL = 4,
       HCCL_E_NOT_SUPPORT = 5, HCCL_E_NOT_FOUND = 6, HCCL_E_UNAVAIL = 7, HCCL_E_SYSCALL = 8,
       HCCL_E_TIMEOUT = 9, HCCL_E_RUNTIME = 15, HCCL_E_AGAIN = 20, HCCL_E_REMOTE = 21 };
enum { HCCL_DATA_TYPE_INT8 = 0, HCCL_DATA_TYPE_INT16 = 1, HCCL_DATA_TYPE_INT32 = 2, HCCL_DATA_TYPE_FP16 = 3,
       HCCL_DATA_TYPE_FP32 = 4, HCCL_DATA_TYPE_INT64 = 5, HCCL_DATA_TYPE_UINT64 = 6, HCCL_DATA_TYPE_UINT8 = 7,
       HCCL_DATA_TYPE_UINT16 = 8, HCCL_DATA_TYPE_UINT32 = 9, HCCL_DATA_TYPE_FP64 = 10, HCCL_DATA_TYPE_BFP16 = 11 };
enum { HCCL_REDUCE_SUM = 0, HCCL_REDUCE_PROD = 1, HCCL_REDUCE_MAX = 2, HCCL_REDUCE_MIN = 3 };

#define HCCL_ROOT_INFO_BYTES 4108
typedef struct { char internal[HCCL_ROOT_INFO_BYTES]; } HcclRootInfo;
typedef void *HcclComm;

#define MAX_RANKS 16
/* Bytes a rank moves per round; larger calls go in several rounds. */
#define SLOT_BYTES (4u << 20)
#define ROOT_MAGIC "candle-ascend-sim-hccl-root"
#define CLIQUE_MAGIC 0xcc11c0deu

enum { KIND_ALL_REDUCE = 1, KIND_BROADCAST = 2, KIND_BARRIER = 3 };

typedef struct { int32_t kind, dtype, op; uint32_t root; uint64_t count; } CallDesc;

/* The shared state of a communicator: a header, then one data slot per rank. */
typedef struct {
    uint32_t magic, nranks;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t joined;      /* ranks that have initialised; never decreases once the communicator forms */
    uint32_t alive;       /* ranks not yet destroyed (a fast rank may destroy before a slow one wakes) */
    uint32_t joined_mask; /* which ranks: a rank that joins twice is refused */
    int ready;            /* sized for nranks (root-info communicators) */
    uint32_t arrived;     /* ranks in the current round */
    uint32_t departed;    /* ranks done reading the current round */
    int draining;         /* every rank arrived; slots are being read */
    uint64_t round;
    HcclResult failed;    /* sticky: a mismatch or a timeout poisons the communicator */
    char failure[256];
    CallDesc desc[MAX_RANKS];
} Clique;

typedef struct { Clique *clique; size_t bytes; uint32_t rank; int32_t device; int shared; } Comm;

static __thread char t_hccl_error[512];

static double exec_timeout_s(void) {
    /* HCCL_EXEC_TIMEOUT: default 1836 s; on Atlas training parts it is rounded down to a
     * multiple of 68 s (the hiascend CANN environment-variable reference). */
    const char *v = getenv("HCCL_EXEC_TIMEOUT");
    double t = v && *v ? atof(v) : 1836.0;
    if (t <= 0) t = 1836.0;
    if (aclsimSocFamily() == SIM_SOC_910) t = fmax(68.0, floor(t / 68.0) * 68.0);
    return t;
}

static double connect_timeout_s(void) {
    /* HCCL_CONNECT_TIMEOUT: default 120 s, range [120, 7200], effective value + 20 s. */
    const char *v = getenv("HCCL_CONNECT_TIMEOUT");
    double t = v && *v ? atof(v) : 120.0;
    if (t < 120) t = 120;
    if (t > 7200) t = 7200;
    return t + 20;
}

static struct timespec deadline(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(seconds);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return ts;
}

static size_t clique_bytes(uint32_t nranks) { return sizeof(Clique) + (size_t)nranks * SLOT_BYTES; }
static char *slot(Clique *c, uint32_t rank) { return (char *)(c + 1) + (size_t)rank * SLOT_BYTES; }

static void clique_init(Clique *c, uint32_t nranks) {
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&c->lock, &ma);
    pthread_cond_init(&c->cond, &ca);
    c->nranks = nranks;
    c->magic = CLIQUE_MAGIC;
}

static HcclResult fail(HcclResult code, const char *fmt, const char *what) {
    snprintf(t_hccl_error, sizeof t_hccl_error, fmt, what);
    aclsimSetError("%s", t_hccl_error);
    return code;
}

static size_t hccl_dtype_size(int32_t dtype) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16: case HCCL_DATA_TYPE_FP16: case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32: case HCCL_DATA_TYPE_FP32: return 4;
    case HCCL_DATA_TYPE_INT64: case HCCL_DATA_TYPE_UINT64: case HCCL_DATA_TYPE_FP64: return 8;
    default: return 0;
    }
}

/* The dtypes a reduction takes: int8, int16, int32, int64, fp16, fp32 and bfp16 (bfp16 only
 * where the part has BF16: from the A2 on; the Atlas training series has none). */
static int reducible(int32_t dtype) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_INT64:
    case HCCL_DATA_TYPE_FP16: case HCCL_DATA_TYPE_FP32: return 1;
    case HCCL_DATA_TYPE_BFP16: return aclsimSocFamily() != SIM_SOC_910;
    default: return 0;
    }
}

static int64_t load_int(const char *p, int32_t dtype, uint64_t i) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: return ((const int8_t *)p)[i];
    case HCCL_DATA_TYPE_INT16: return ((const int16_t *)p)[i];
    case HCCL_DATA_TYPE_INT32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

/* Integer results wrap to the dtype's width (two's complement), as a device's integer adder. */
static void store_int(char *p, int32_t dtype, uint64_t i, int64_t v) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: ((int8_t *)p)[i] = (int8_t)(uint8_t)v; break;
    case HCCL_DATA_TYPE_INT16: ((int16_t *)p)[i] = (int16_t)(uint16_t)v; break;
    case HCCL_DATA_TYPE_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

static double load(const char *p, int32_t dtype, uint64_t i) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: return ((const int8_t *)p)[i];
    case HCCL_DATA_TYPE_INT16: return ((const int16_t *)p)[i];
    case HCCL_DATA_TYPE_INT32: return ((const int32_t *)p)[i];
    case HCCL_DATA_TYPE_INT64: return (double)((const int64_t *)p)[i];
    case HCCL_DATA_TYPE_FP16: return f16_to_f32(((const uint16_t *)p)[i]);
    case HCCL_DATA_TYPE_BFP16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store(char *p, int32_t dtype, uint64_t i, double v) {
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case HCCL_DATA_TYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case HCCL_DATA_TYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HCCL_DATA_TYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case HCCL_DATA_TYPE_FP16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
    case HCCL_DATA_TYPE_BFP16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* Integers reduce exactly in int64 (wrapping, never through a double); floats in the rank
 * order, each step rounded to f32 as a device accumulates, and a NaN on any rank stays NaN
 * (fmaxf would drop it and hide a diverged rank). */
static void reduce_into(char *out, Clique *c, int32_t dtype, int32_t op, uint64_t n) {
    int integer = dtype == HCCL_DATA_TYPE_INT8 || dtype == HCCL_DATA_TYPE_INT16 || dtype == HCCL_DATA_TYPE_INT32 ||
                  dtype == HCCL_DATA_TYPE_INT64;
    for (uint64_t i = 0; i < n; i++) {
        if (integer) {
            uint64_t acc = (uint64_t)load_int(slot(c, 0), dtype, i);
            for (uint32_t r = 1; r < c->nranks; r++) {
                int64_t x = load_int(slot(c, r), dtype, i), a = (int64_t)acc;
                acc = op == HCCL_REDUCE_SUM ? acc + (uint64_t)x : op == HCCL_REDUCE_PROD ? acc * (uint64_t)x
                    : (uint64_t)(op == HCCL_REDUCE_MAX ? (x > a ? x : a) : (x < a ? x : a));
            }
            store_int(out, dtype, i, (int64_t)acc);
        } else {
            float acc = (float)load(slot(c, 0), dtype, i);
            for (uint32_t r = 1; r < c->nranks; r++) {
                float x = (float)load(slot(c, r), dtype, i);
                acc = op == HCCL_REDUCE_SUM ? acc + x : op == HCCL_REDUCE_PROD ? acc * x
                    : isnan(acc) || isnan(x) ? NAN : op == HCCL_REDUCE_MAX ? fmaxf(acc, x) : fminf(acc, x);
            }
            store(out, dtype, i, acc);
        }
    }
}

/* Wait on the clique's condition until `done` holds, the clique fails or the deadline passes. */
#define WAIT_UNTIL(c, cond_expr, ts, timed_out)                                                   \
    do {                                                                                          \
        while (!(cond_expr) && !(c)->failed) {                                                    \
            if (pthread_cond_timedwait(&(c)->cond, &(c)->lock, &(ts)) == ETIMEDOUT) {             \
                (timed_out) = !(cond_expr);                                                       \
                break;                                                                            \
            }                                                                                     \
        }                                                                                         \
    } while (0)

static int same_call(const CallDesc *a, const CallDesc *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root && a->count == b->count;
}

static const char *kind_name(int32_t kind) {
    return kind == KIND_ALL_REDUCE ? "HcclAllReduce" : kind == KIND_BROADCAST ? "HcclBroadcast" : "HcclBarrier";
}

/* One round: `bytes` of this rank's data in, this rank's result out. 0 or an HcclResult. */
static HcclResult round_trip(Comm *m, const CallDesc *d, const char *in, char *out, uint64_t n) {
    Clique *c = m->clique;
    size_t esize = d->kind == KIND_BARRIER ? 0 : hccl_dtype_size(d->dtype);
    struct timespec ts = deadline(exec_timeout_s());
    int timed_out = 0;
    pthread_mutex_lock(&c->lock);
    WAIT_UNTIL(c, !c->draining, ts, timed_out);
    if (c->failed || timed_out) goto failed;
    if (in && n) memcpy(slot(c, m->rank), in, n * esize);
    c->desc[m->rank] = *d;
    uint64_t round = c->round;
    if (++c->arrived == c->nranks) {
        for (uint32_t r = 1; r < c->nranks; r++)
            if (!same_call(&c->desc[r], &c->desc[0])) {
                c->failed = HCCL_E_PARA;
                snprintf(c->failure, sizeof c->failure,
                         "ranks disagree: rank 0 called %s(count %llu, dtype %d, op %d, root %u), rank %u %s(count "
                         "%llu, dtype %d, op %d, root %u)",
                         kind_name(c->desc[0].kind), (unsigned long long)c->desc[0].count, c->desc[0].dtype,
                         c->desc[0].op, c->desc[0].root, r, kind_name(c->desc[r].kind),
                         (unsigned long long)c->desc[r].count, c->desc[r].dtype, c->desc[r].op, c->desc[r].root);
                break;
            }
        c->draining = 1;
        pthread_cond_broadcast(&c->cond);
    }
    WAIT_UNTIL(c, c->draining && c->round == round, ts, timed_out);
    if (c->failed || timed_out) goto failed;
    pthread_mutex_unlock(&c->lock);
    /* Every rank has written its slot; nobody writes until all have read. */
    if (d->kind == KIND_ALL_REDUCE) reduce_into(out, c, d->dtype, d->op, n);
    else if (d->kind == KIND_BROADCAST && m->rank != d->root) memcpy(out, slot(c, d->root), n * esize);
    pthread_mutex_lock(&c->lock);
    if (++c->departed == c->nranks) {
        c->arrived = c->departed = 0;
        c->draining = 0;
        c->round++;
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return HCCL_SUCCESS;
failed:
    if (!c->failed) {
        c->failed = HCCL_E_TIMEOUT;
        snprintf(c->failure, sizeof c->failure,
                 "rank %u waited %.0f s (HCCL_EXEC_TIMEOUT) for the other ranks of %s", m->rank, exec_timeout_s(),
                 kind_name(d->kind));
        pthread_cond_broadcast(&c->cond);
    }
    HcclResult code = c->failed;
    pthread_mutex_unlock(&c->lock);
    return code;
}

typedef struct { Comm *comm; CallDesc d; void *send, *recv; } Collective;

static void run_collective(void *arg) {
    Collective *k = arg;
    size_t esize = k->d.kind == KIND_BARRIER ? 1 : hccl_dtype_size(k->d.dtype);
    uint64_t per_round = SLOT_BYTES / esize, done = 0;
    char *send = k->send ? aclsimHostPtr(k->send, k->d.count * esize) : NULL;
    char *recv = k->recv ? aclsimHostPtr(k->recv, k->d.count * esize) : NULL;
    HcclResult code = HCCL_SUCCESS;
    do {
        uint64_t n = k->d.count - done < per_round ? k->d.count - done : per_round;
        CallDesc d = k->d;
        int math = !aclsimNoMath();
        code = round_trip(k->comm, &d, send && math ? send + done * esize : NULL, recv && math ? recv + done * esize : NULL,
                          math ? n : 0);
        done += n;
    } while (code == HCCL_SUCCESS && done < k->d.count);
    if (code == HCCL_SUCCESS) aclsimCountCollective(k->d.kind == KIND_BARRIER ? 0 : k->d.count * esize);
    if (code != HCCL_SUCCESS) {
        Clique *c = k->comm->clique;
        pthread_mutex_lock(&c->lock);
        char why[256];
        snprintf(why, sizeof why, "%s", c->failure);
        pthread_mutex_unlock(&c->lock);
        aclsimKernelFault("%s failed with HcclResult %d on rank %u: %s", kind_name(k->d.kind), code, k->comm->rank, why);
    }
    free(k);
}

static HcclResult enqueue(HcclComm comm, CallDesc d, void *send, void *recv, aclrtStream stream) {
    Comm *m = comm;
    if (!m || !m->clique || m->clique->magic != CLIQUE_MAGIC) return fail(HCCL_E_PTR, "%s: comm is not a live communicator", kind_name(d.kind));
    Collective *k = malloc(sizeof *k);
    if (!k) return HCCL_E_MEMORY;
    *k = (Collective){m, d, send, recv};
    if (aclsimEnqueueEager(stream, run_collective, k) != 0) {
        free(k);
        return fail(HCCL_E_RUNTIME, "%s: the stream is not valid on this thread", kind_name(d.kind));
    }
    return HCCL_SUCCESS;
}

SIM_EXPORT HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, int32_t dataType, int32_t op,
                                    HcclComm comm, aclrtStream stream) {
    if (!sendBuf || !recvBuf) return fail(HCCL_E_PTR, "%s: sendBuf and recvBuf must not be null", "HcclAllReduce");
    if (!reducible(dataType)) return fail(HCCL_E_NOT_SUPPORT, "%s: dataType not supported for a reduction on this part", "HcclAllReduce");
    if (op < HCCL_REDUCE_SUM || op > HCCL_REDUCE_MIN) return fail(HCCL_E_PARA, "%s: op must be SUM, PROD, MAX or MIN", "HcclAllReduce");
    if (count > SIZE_MAX / hccl_dtype_size(dataType))
        return fail(HCCL_E_PARA, "%s: count elements overflow the address space", "HcclAllReduce");
    size_t bytes = count * hccl_dtype_size(dataType);
    if (count && (!aclsimHostPtr(sendBuf, bytes) || !aclsimHostPtr(recvBuf, bytes)))
        return fail(HCCL_E_PTR, "%s: sendBuf or recvBuf is not count elements of device memory", "HcclAllReduce");
    return enqueue(comm, (CallDesc){KIND_ALL_REDUCE, dataType, op, 0, count}, sendBuf, recvBuf, stream);
}

SIM_EXPORT HcclResult HcclBroadcast(void *buf, uint64_t count, int32_t dataType, uint32_t root, HcclComm comm,
                                    aclrtStream stream) {
    Comm *m = comm;
    if (!buf) return fail(HCCL_E_PTR, "%s: buf must not be null", "HcclBroadcast");
    size_t esize = hccl_dtype_size(dataType);
    if (!esize || (dataType == HCCL_DATA_TYPE_BFP16 && aclsimSocFamily() == SIM_SOC_910))
        return fail(HCCL_E_NOT_SUPPORT, "%s: dataType not supported on this part", "HcclBroadcast");
    if (m && m->clique && root >= m->clique->nranks) return fail(HCCL_E_PARA, "%s: root is not a rank of comm", "HcclBroadcast");
    if (count > SIZE_MAX / esize) return fail(HCCL_E_PARA, "%s: count elements overflow the address space", "HcclBroadcast");
    if (count && !aclsimHostPtr(buf, count * esize))
        return fail(HCCL_E_PTR, "%s: buf is not count elements of device memory", "HcclBroadcast");
    return enqueue(comm, (CallDesc){KIND_BROADCAST, dataType, 0, root, count}, buf, buf, stream);
}

SIM_EXPORT HcclResult HcclBarrier(HcclComm comm, aclrtStream stream) {
    return enqueue(comm, (CallDesc){KIND_BARRIER, 0, 0, 0, 0}, NULL, NULL, stream);
}

SIM_EXPORT HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms) {
    if (!devices || !comms) return fail(HCCL_E_PTR, "%s: devices and comms must not be null", "HcclCommInitAll");
    if (ndev == 0 || ndev > MAX_RANKS) return fail(HCCL_E_PARA, "%s: ndev must be 1..16", "HcclCommInitAll");
    for (uint32_t i = 0; i < ndev; i++) {
        if (devices[i] < 0 || devices[i] >= aclsimDeviceCount())
            return fail(HCCL_E_PARA, "%s: a device id is not a device of this machine", "HcclCommInitAll");
        for (uint32_t j = 0; j < i; j++)
            if (devices[j] == devices[i]) return fail(HCCL_E_PARA, "%s: a device appears twice", "HcclCommInitAll");
    }
    size_t bytes = clique_bytes(ndev);
    Clique *c = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) return fail(HCCL_E_MEMORY, "%s: no memory for the communicator", "HcclCommInitAll");
    clique_init(c, ndev);
    c->joined = c->alive = ndev;
    c->ready = 1;
    for (uint32_t i = 0; i < ndev; i++) {
        Comm *m = calloc(1, sizeof *m);
        *m = (Comm){c, bytes, i, devices[i], 0};
        comms[i] = m;
    }
    return HCCL_SUCCESS;
}

/* The root info names a POSIX shared-memory object: magic, then the name. */
SIM_EXPORT HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo) {
    if (!rootInfo) return fail(HCCL_E_PTR, "%s: rootInfo must not be null", "HcclGetRootInfo");
    static int counter;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char name[128];
    snprintf(name, sizeof name, "/candle-sim-hccl-%d-%d-%ld", (int)getpid(), __sync_add_and_fetch(&counter, 1),
             (long)now.tv_nsec);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return fail(HCCL_E_SYSCALL, "%s: cannot create the rendezvous", "HcclGetRootInfo");
    if (ftruncate(fd, (off_t)sizeof(Clique)) != 0) { close(fd); shm_unlink(name); return HCCL_E_SYSCALL; }
    Clique *c = mmap(NULL, sizeof(Clique), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) { shm_unlink(name); return HCCL_E_SYSCALL; }
    clique_init(c, 0);
    munmap(c, sizeof(Clique));
    memset(rootInfo, 0, sizeof *rootInfo);
    snprintf(rootInfo->internal, sizeof rootInfo->internal, "%s %s", ROOT_MAGIC, name);
    return HCCL_SUCCESS;
}

SIM_EXPORT HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                           HcclComm *comm) {
    if (!rootInfo || !comm) return fail(HCCL_E_PTR, "%s: rootInfo and comm must not be null", "HcclCommInitRootInfo");
    if (nRanks == 0 || nRanks > MAX_RANKS || rank >= nRanks)
        return fail(HCCL_E_PARA, "%s: rank must be below nRanks, nRanks 1..16", "HcclCommInitRootInfo");
    char magic[64], name[128];
    if (sscanf(rootInfo->internal, "%63s %127s", magic, name) != 2 || strcmp(magic, ROOT_MAGIC) != 0)
        return fail(HCCL_E_PARA, "%s: rootInfo did not come from HcclGetRootInfo", "HcclCommInitRootInfo");
    struct timespec ts = deadline(connect_timeout_s());
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return fail(HCCL_E_NOT_FOUND, "%s: the rendezvous is gone (every rank has joined, or the root exited)", "HcclCommInitRootInfo");
    size_t bytes = clique_bytes(nRanks);
    Clique *head = mmap(NULL, sizeof(Clique), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (head == MAP_FAILED) { close(fd); return HCCL_E_SYSCALL; }
    pthread_mutex_lock(&head->lock);
    if (!head->ready) {
        if (ftruncate(fd, (off_t)bytes) != 0) { pthread_mutex_unlock(&head->lock); close(fd); return HCCL_E_SYSCALL; }
        head->nranks = nRanks;
        head->ready = 1;
    }
    int mismatch = head->nranks != nRanks;
    pthread_mutex_unlock(&head->lock);
    munmap(head, sizeof(Clique));
    if (mismatch) { close(fd); return fail(HCCL_E_PARA, "%s: ranks disagree on nRanks", "HcclCommInitRootInfo"); }
    Clique *c = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) return HCCL_E_SYSCALL;
    int timed_out = 0;
    pthread_mutex_lock(&c->lock);
    if (c->joined_mask & (1u << rank)) {
        pthread_mutex_unlock(&c->lock);
        munmap(c, bytes);
        return fail(HCCL_E_PARA, "%s: this rank has already joined the communicator", "HcclCommInitRootInfo");
    }
    c->joined_mask |= 1u << rank;
    c->joined++;
    c->alive++;
    pthread_cond_broadcast(&c->cond);
    WAIT_UNTIL(c, c->joined >= c->nranks, ts, timed_out);
    int last = !timed_out && c->joined == c->nranks;
    if (timed_out) {
        c->joined--;
        c->alive--;
        c->joined_mask &= ~(1u << rank);
    }
    pthread_mutex_unlock(&c->lock);
    if (timed_out) {
        munmap(c, bytes);
        shm_unlink(name); /* the communicator is dead: late ranks find it gone */
        return fail(HCCL_E_TIMEOUT, "%s: not every rank joined within HCCL_CONNECT_TIMEOUT", "HcclCommInitRootInfo");
    }
    if (last) shm_unlink(name); /* every rank has it mapped */
    Comm *m = calloc(1, sizeof *m);
    int32_t device = 0;
    aclrtGetDevice(&device);
    *m = (Comm){c, bytes, rank, device, 1};
    *comm = m;
    return HCCL_SUCCESS;
}

SIM_EXPORT HcclResult HcclCommDestroy(HcclComm comm) {
    Comm *m = comm;
    if (!m) return fail(HCCL_E_PTR, "%s: comm must not be null", "HcclCommDestroy");
    Clique *c = m->clique;
    pthread_mutex_lock(&c->lock);
    uint32_t left = --c->alive;
    pthread_mutex_unlock(&c->lock);
    if (m->shared || left == 0) munmap(c, m->bytes);
    free(m);
    return HCCL_SUCCESS;
}

SIM_EXPORT const char *HcclGetErrorString(HcclResult code) {
    switch (code) {
    case HCCL_SUCCESS: return "success";
    case HCCL_E_PARA: return "parameter error";
    case HCCL_E_PTR: return "empty pointer";
    case HCCL_E_MEMORY: return "memory error";
    case HCCL_E_INTERNAL: return "internal error";
    case HCCL_E_NOT_SUPPORT: return "not support feature";
    case HCCL_E_NOT_FOUND: return "not found specific resource";
    case HCCL_E_UNAVAIL: return "resource unavailable";
    case HCCL_E_SYSCALL: return "call system interface error";
    case HCCL_E_TIMEOUT: return "timeout";
    case HCCL_E_RUNTIME: return "call runtime api fail";
    case HCCL_E_AGAIN: return "try again";
    case HCCL_E_REMOTE: return "error cqe";
    default: return "unknown error";
    }
}
