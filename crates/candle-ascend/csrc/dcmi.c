/* Emulated libdcmi.so: the device management interface npu-smi is built on, over what the emulated
 * runtime of every process publishes (sim.h, SimMonitor). Prototypes, return codes and
 * struct layouts follow the driver's dcmi_interface_api.h (CANN 8.1.RC1 mirror,
 * Ascend/driver/include); the emulated parts have one chip per card, so card N, chip 0 is
 * logical device N.
 *
 * What the emulator makes up (docs/ascend.md, "Device monitoring"):
 * - utilisation: the backend's modelled busy time over wall time, since this process last asked;
 * - temperature 40 + 35·u °C and power 70 + 240·u W, u the utilisation over the device's life;
 * - health and error codes: healthy (0), unless CANDLE_ASCEND_SIM_DEVICE_FAULT=DEVICE:CODE[:LAUNCHES]
 *   names the device: from its LAUNCHES-th kernel launch on (0: from the start) it reports
 *   health 3 (critical) and the one error code CODE (hex or decimal). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

#define DCMI_OK 0
#define DCMI_ERR_CODE_INVALID_PARAMETER (-8001)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST (-8008)
#define DCMI_ERR_CODE_NOT_REDAY (-8012)
#define DCMI_ERR_CODE_NOT_SUPPORT (-8255)

/* dcmi_get_device_utilization_rate input types the emulator answers. */
#define DCMI_UTILIZATION_RATE_AICORE 2
#define DCMI_UTILIZATION_RATE_HBM 6
#define DCMI_UTILIZATION_RATE_NPU 13

/* The most processes dcmi_get_device_resource_info reports per device. */
#define SIM_MAX_PROCS 32

struct dcmi_hbm_info {
    unsigned long long memory_size; /* MB */
    unsigned int freq;
    unsigned long long memory_usage; /* MB */
    int temp;
    unsigned int bandwith_util_rate;
};

#define MAX_CHIP_NAME_LEN 32
struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage; /* bytes */
};

/* The driver header's declarations of what follows (generated from soc/cann/runtime_prototypes.tsv). */
#include "dcmi_prototypes.h"

/* From the emulated libascendcl.so. */
int aclsimReadConfig(void);
int aclsimDeviceCount(void);
uint64_t aclsimSocHbm(void);
uint32_t aclsimSocAiCores(void);
int aclsimSocIndex(void);
const char *aclsimSocName(int index);
void aclsimMonitorDir(char *out, size_t len);

static int g_ready;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One device's figures, summed over the live processes that use it. */
typedef struct {
    uint64_t hbm_used, launches;
    double busy_us, start_s;
    int nprocs;
    struct dcmi_proc_mem_info procs[SIM_MAX_PROCS];
} DeviceView;

static int device_of(int card_id, int device_id) {
    if (!g_ready) return DCMI_ERR_CODE_NOT_REDAY;
    if (card_id < 0 || card_id >= aclsimDeviceCount()) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (device_id != 0) return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    return card_id;
}

/* Read every live process's record of `device`. A record whose lock nobody holds is left over
 * from a process that has ended, and is removed. */
static void view(int device, DeviceView *v) {
    memset(v, 0, sizeof *v);
    v->start_s = now_s();
    char dir[512];
    aclsimMonitorDir(dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d) return;
    char prefix[32];
    int plen = snprintf(prefix, sizeof prefix, "dev%d.", device);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (pid <= 0 || *end) continue; /* "dev0.123.new": a record being written */
        char path[800];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            unlink(path);
            close(fd);
            continue;
        }
        SimMonitor m;
        if (pread(fd, &m, sizeof m, 0) == (ssize_t)sizeof m && m.magic == SIM_MONITOR_MAGIC && m.device == device) {
            v->hbm_used += m.hbm_used;
            v->launches += m.launches;
            v->busy_us += m.busy_us;
            if (m.start_s < v->start_s) v->start_s = m.start_s;
            if (v->nprocs < SIM_MAX_PROCS)
                v->procs[v->nprocs++] = (struct dcmi_proc_mem_info){m.pid, (unsigned long)m.hbm_used};
        }
        close(fd);
    }
    closedir(d);
}

/* Utilisation in [0, 1] of `device` since this process last asked (or since the device was
 * first used). */
static double utilisation(int device) {
    static double last_busy[64], last_wall[64];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    DeviceView v;
    view(device, &v);
    pthread_mutex_lock(&lock);
    double wall = now_s();
    double since = last_wall[device] > 0 ? last_wall[device] : v.start_s;
    double busy = v.busy_us - (last_wall[device] > 0 ? last_busy[device] : 0);
    last_busy[device] = v.busy_us;
    last_wall[device] = wall;
    pthread_mutex_unlock(&lock);
    double span_us = (wall - since) * 1e6;
    if (span_us <= 0 || busy <= 0) return 0;
    return busy >= span_us ? 1.0 : busy / span_us;
}

/* CANDLE_ASCEND_SIM_DEVICE_FAULT=DEVICE:CODE[:LAUNCHES]: the error code of `device` now, or 0. */
static unsigned int fault_code(int device) {
    const char *f = getenv("CANDLE_ASCEND_SIM_DEVICE_FAULT");
    if (!f || !*f) return 0;
    char *end;
    long dev = strtol(f, &end, 10);
    if (*end != ':' || dev != device) return 0;
    unsigned long code = strtoul(end + 1, &end, 0);
    unsigned long long after = 0;
    if (*end == ':') after = strtoull(end + 1, &end, 10);
    if (code == 0) return 0;
    if (after > 0) {
        DeviceView v;
        view(device, &v);
        if (v.launches < after) return 0;
    }
    return (unsigned int)code;
}

SIM_EXPORT int dcmi_init(void) {
    if (!aclsimReadConfig()) return DCMI_ERR_CODE_INVALID_PARAMETER;
    g_ready = 1;
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len) {
    if (!g_ready) return DCMI_ERR_CODE_NOT_REDAY;
    if (!card_num || !card_list || list_len < aclsimDeviceCount()) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *card_num = aclsimDeviceCount();
    for (int i = 0; i < *card_num; i++) card_list[i] = i;
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int device_logic_id) {
    if (!g_ready) return DCMI_ERR_CODE_NOT_REDAY;
    if (!card_id || !device_id) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (device_logic_id >= (unsigned int)aclsimDeviceCount()) return DCMI_ERR_CODE_DEVICE_NOT_EXIST;
    *card_id = (int)device_logic_id;
    *device_id = 0;
    return DCMI_OK;
}

/* The part as npu-smi names it: chip_type "Ascend", chip_name "910B3". */
SIM_EXPORT int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!chip_info) return DCMI_ERR_CODE_INVALID_PARAMETER;
    memset(chip_info, 0, sizeof *chip_info);
    const char *soc = aclsimSocName(aclsimSocIndex());
    snprintf((char *)chip_info->chip_type, MAX_CHIP_NAME_LEN, "Ascend");
    snprintf((char *)chip_info->chip_name, MAX_CHIP_NAME_LEN, "%s", strncmp(soc, "Ascend", 6) == 0 ? soc + 6 : soc);
    snprintf((char *)chip_info->chip_ver, MAX_CHIP_NAME_LEN, "V1");
    chip_info->aicore_cnt = aclsimSocAiCores();
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                                unsigned int *utilization_rate) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!utilization_rate) return DCMI_ERR_CODE_INVALID_PARAMETER;
    switch (input_type) {
    case DCMI_UTILIZATION_RATE_AICORE:
    case DCMI_UTILIZATION_RATE_NPU:
        *utilization_rate = (unsigned int)(utilisation(dev) * 100.0 + 0.5);
        return DCMI_OK;
    case DCMI_UTILIZATION_RATE_HBM: {
        DeviceView v;
        view(dev, &v);
        *utilization_rate = (unsigned int)(v.hbm_used * 100 / aclsimSocHbm());
        return DCMI_OK;
    }
    default:
        return DCMI_ERR_CODE_NOT_SUPPORT;
    }
}

SIM_EXPORT int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!hbm_info) return DCMI_ERR_CODE_INVALID_PARAMETER;
    DeviceView v;
    view(dev, &v);
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = aclsimSocHbm() >> 20;
    hbm_info->memory_usage = v.hbm_used >> 20;
    hbm_info->temp = 40;
    return DCMI_OK;
}

/* Utilisation without moving this process's sampling window. */
static double current_load(int dev) {
    DeviceView v;
    view(dev, &v);
    double span_us = (now_s() - v.start_s) * 1e6;
    return span_us > 0 && v.busy_us > 0 ? (v.busy_us >= span_us ? 1.0 : v.busy_us / span_us) : 0;
}

SIM_EXPORT int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!temperature) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *temperature = (int)(40.0 + 35.0 * current_load(dev) + 0.5);
    return DCMI_OK;
}

/* Power in units of 0.1 W, as the DCMI reference gives it. */
SIM_EXPORT int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!power) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *power = (int)((70.0 + 240.0 * current_load(dev)) * 10.0 + 0.5);
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!health) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *health = fault_code(dev) ? 3 : 0;
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count,
                                            unsigned int *error_code_list, unsigned int list_len) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!error_count || (!error_code_list && list_len > 0)) return DCMI_ERR_CODE_INVALID_PARAMETER;
    unsigned int code = fault_code(dev);
    *error_count = code ? 1 : 0;
    if (code && list_len > 0) error_code_list[0] = code;
    return DCMI_OK;
}

SIM_EXPORT int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info,
                                             int *proc_num) {
    int dev = device_of(card_id, device_id);
    if (dev < 0) return dev;
    if (!proc_info || !proc_num) return DCMI_ERR_CODE_INVALID_PARAMETER;
    DeviceView v;
    view(dev, &v);
    memcpy(proc_info, v.procs, (size_t)v.nprocs * sizeof *proc_info);
    *proc_num = v.nprocs;
    return DCMI_OK;
}
