/* Emulated CANN toolkit: definitions shared by the three libraries.
 * The public types, enum values and error codes follow CANN's acl_base_rt.h, acl_meta.h and
 * aclnn_base.h; everything named aclsim* is private to the emulator. */
#ifndef CANDLE_ASCEND_SIM_H
#define CANDLE_ASCEND_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DIMS 8

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef void *aclrtEvent;

enum { ACL_SUCCESS = 0, ACL_ERROR_INVALID_PARAM = 100000, ACL_ERROR_UNINITIALIZE = 100001,
       ACL_ERROR_REPEAT_INITIALIZE = 100002, ACL_ERROR_BAD_ALLOC = 200000,
       ACL_ERROR_INVALID_DEVICE = 200002, ACL_ERROR_RT_AICORE_EXCEPTION = 507015, ACL_ERROR_RT_PARAM_INVALID = 107000,
       ACL_ERROR_RT_INVALID_DEVICEID = 107001, ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
       ACL_ERROR_INTERNAL_ERROR = 500000 };

enum { ACLNN_SUCCESS = 0, ACLNN_ERR_PARAM_NULLPTR = 161001, ACLNN_ERR_PARAM_INVALID = 161002,
       ACLNN_ERR_RUNTIME_ERROR = 361001, ACLNN_ERR_INNER = 561000,
       ACLNN_ERR_INNER_TILING_ERROR = 561002, ACLNN_ERR_INNER_NULLPTR = 561103 };

/* aclDataType values and sizes (generated from soc/acl_dtypes.tsv). */
#include "acl_dtypes.h"

enum { ACL_FORMAT_ND = 2 };

/* SoC families of the emulated parts: Atlas training series (Ascend910A/ProA) and A2 (910B). */
enum { SIM_SOC_910 = 0, SIM_SOC_910B = 1 };

enum { ACL_MEMCPY_HOST_TO_HOST = 0, ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2,
       ACL_MEMCPY_DEVICE_TO_DEVICE = 3 };

/* An aclTensor: a strided view (element strides and offset) over device memory. */
typedef struct aclTensor {
    uint32_t magic;
    int32_t dtype;
    int32_t format;
    uint64_t ndim;
    int64_t dims[SIM_MAX_DIMS];
    int64_t strides[SIM_MAX_DIMS];
    int64_t offset;
    int64_t storage_elems;
    void *data; /* device address of the storage start */
} aclTensor;

typedef struct aclScalar { uint32_t magic; int32_t dtype; double value; } aclScalar;
typedef struct aclIntArray { uint32_t magic; uint64_t size; int64_t values[SIM_MAX_DIMS * 4]; } aclIntArray;
typedef struct aclBoolArray { uint32_t magic; uint64_t size; bool values[SIM_MAX_DIMS * 4]; } aclBoolArray;
typedef struct aclTensorList { uint32_t magic; uint64_t size; aclTensor **values; } aclTensorList;

/* What the emulated runtime of one process publishes about one device, for the emulated DCMI
 * (libdcmi.so) of any process: a file per (device, process) in the monitor folder, mapped
 * shared. */
#define SIM_MONITOR_MAGIC 0x4d4f4e31u
typedef struct {
    uint32_t magic;
    int32_t pid;
    int32_t device;
    int32_t reserved;
    uint64_t hbm_used;  /* bytes this process holds on the device */
    uint64_t launches;  /* kernel launches this process made on the device */
    double busy_us;     /* the backend's modelled device time of those launches */
    double start_s;     /* CLOCK_REALTIME when the process first used the device */
} SimMonitor;

#define SIM_TENSOR_MAGIC 0x7e45011u
#define SIM_SCALAR_MAGIC 0x5ca1a40u
#define SIM_ARRAY_MAGIC 0xa7a7a70u
#define SIM_EXEC_MAGIC 0xe8ec0d0u
#define SIM_EXEC_DEAD 0xdeadbeefu

/* A captured op: phase 1 fills it, phase 2 enqueues it, the stream worker runs and frees it. */
typedef struct aclOpExecutor {
    uint32_t magic;
    const char *op;
    void (*run)(struct aclOpExecutor *);
    uint64_t workspace_size;
    void *workspace; /* host view of the workspace, set by phase 2 */
    int aicpu;       /* the kernel runs on the AI CPU (op_support.h's aicpu mask) */
    aclTensor t[9];
    int nt;
    double f[6];
    int64_t i[4];
    int64_t dims[SIM_MAX_DIMS * 4];
    int ndims;
} aclOpExecutor;

/* Private services (aclsim*) shared by the three libraries: errors, memory, streams and
 * counters live in libascendcl.so; executors in libnnopbase.so. */
SIM_EXPORT void aclsimSetError(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
SIM_EXPORT void *aclsimHostPtr(const void *dev, uint64_t bytes);
SIM_EXPORT int aclsimEnqueue(aclrtStream stream, void (*fn)(void *), void *ctx);
SIM_EXPORT int aclsimEnqueueEager(aclrtStream stream, void (*fn)(void *), void *ctx);
SIM_EXPORT aclError aclrtGetDevice(int32_t *id);
SIM_EXPORT void aclsimCountLaunch(const char *op, int aicpu);
SIM_EXPORT int aclsimFailOp(const char *op);
SIM_EXPORT void aclsimKernelFault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
SIM_EXPORT int aclsimSocFamily(void);
SIM_EXPORT int aclsimNoMath(void);
SIM_EXPORT int aclsimDeviceCount(void);
SIM_EXPORT void aclsimCountCollective(uint64_t bytes);
SIM_EXPORT aclOpExecutor *aclsimNewExecutor(const char *op, void (*run)(aclOpExecutor *), uint64_t workspace_size);
SIM_EXPORT void aclsimTakeExecutor(const char *op, aclOpExecutor *e);
SIM_EXPORT void aclsimRunExecutor(void *arg);
SIM_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *e);
SIM_EXPORT const char *aclrtGetSocName(void);

#endif
