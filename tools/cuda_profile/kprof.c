/* A kernel profile of any CUDA program, without Nsight Systems: a CUPTI injection library that
 * records every kernel, copy and memset the program runs and, at exit, prints the kernels by
 * total device time (like `nsys stats`' cuda_gpu_kern_sum) with the copies and the share of
 * the run the device was busy.
 *
 *   cc -O2 -shared -fPIC -I"$CUPTI/include" -I"$CUDA/include" tools/cuda_profile/kprof.c \
 *      -o libkprof.so -L"$CUPTI/lib" -l:libcupti.so.13
 *   CUDA_INJECTION64_PATH=$PWD/libkprof.so KPROF_OUT=profile.txt ./program ...
 *
 * The driver loads the library at cuInit and calls InitializeInjection. KPROF_OUT names the
 * report (stderr without it); KPROF_TIMELINE, if set, names a file that gets every activity in
 * start order (start and duration in µs from the first, and its name), to find the gaps where
 * the device waited for the host. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 4096
#define MAX_SPANS (1 << 22)

typedef struct {
    char *name;
    uint64_t count, total_ns, max_ns;
} Entry;

static Entry entries[MAX_NAMES];
static int n_entries;
/* Every activity's [start, end) and entry, for the busy time (the union of the intervals) and
 * the timeline. */
static uint64_t (*spans)[3];
static size_t n_spans;
static uint64_t copy_bytes[2], copy_ns[2], copy_count[2]; /* host to device, device to host */

static void add(const char *name, uint64_t start, uint64_t end) {
    uint64_t ns = end > start ? end - start : 0;
    int i;
    for (i = 0; i < n_entries; i++)
        if (strcmp(entries[i].name, name) == 0) break;
    if (i == n_entries) {
        if (n_entries == MAX_NAMES) i = MAX_NAMES - 1; /* the last slot takes the overflow */
        else entries[n_entries++].name = strdup(name);
    }
    entries[i].count++;
    entries[i].total_ns += ns;
    if (ns > entries[i].max_ns) entries[i].max_ns = ns;
    if (n_spans < MAX_SPANS) {
        spans[n_spans][0] = start;
        spans[n_spans][1] = end;
        spans[n_spans][2] = (uint64_t)i;
        n_spans++;
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 16 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    CUpti_Activity *record = NULL;
    (void)ctx, (void)stream, (void)size;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)record;
            add(k->name ? k->name : "?", k->start, k->end);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)record;
            int d = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? 0 : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? 1 : -1;
            if (d >= 0) {
                copy_bytes[d] += m->bytes;
                copy_ns[d] += m->end - m->start;
                copy_count[d]++;
            }
            add(d == 0 ? "[memcpy host to device]" : d == 1 ? "[memcpy device to host]" : "[memcpy other]", m->start, m->end);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)record;
            add("[memset]", m->start, m->end);
        }
    }
    free(buffer);
}

static int by_total(const void *a, const void *b) {
    uint64_t x = ((const Entry *)a)->total_ns, y = ((const Entry *)b)->total_ns;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int by_start(const void *a, const void *b) {
    uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
    return x < y ? -1 : x > y ? 1 : 0;
}

static void report(void) {
    cuptiActivityFlushAll(1);
    const char *path = getenv("KPROF_OUT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) out = stderr;
    uint64_t total = 0, busy = 0, first = UINT64_MAX, last = 0, launches = 0;
    for (int i = 0; i < n_entries; i++) total += entries[i].total_ns, launches += entries[i].count;
    qsort(spans, n_spans, sizeof *spans, by_start);
    uint64_t lo = 0, hi = 0;
    for (size_t i = 0; i < n_spans; i++) {
        if (spans[i][0] < first) first = spans[i][0];
        if (spans[i][1] > last) last = spans[i][1];
        if (i == 0 || spans[i][0] > hi) {
            busy += hi - lo;
            lo = spans[i][0], hi = spans[i][1];
        } else if (spans[i][1] > hi) hi = spans[i][1];
    }
    busy += hi - lo;
    const char *timeline = getenv("KPROF_TIMELINE");
    FILE *tl = timeline ? fopen(timeline, "w") : NULL;
    if (tl) {
        for (size_t i = 0; i < n_spans; i++)
            fprintf(tl, "%.1f %.1f %.120s\n", (spans[i][0] - first) / 1e3, (spans[i][1] - spans[i][0]) / 1e3,
                    entries[spans[i][2]].name);
        fclose(tl);
    }
    qsort(entries, n_entries, sizeof *entries, by_total);
    fprintf(out, "activities %llu, device time %.3f ms, busy %.3f ms of a %.3f ms span\n",
            (unsigned long long)launches, total / 1e6, busy / 1e6, n_spans ? (last - first) / 1e6 : 0.0);
    fprintf(out, "copies host->device %llu (%.1f MB, %.3f ms), device->host %llu (%.1f MB, %.3f ms)\n",
            (unsigned long long)copy_count[0], copy_bytes[0] / 1e6, copy_ns[0] / 1e6,
            (unsigned long long)copy_count[1], copy_bytes[1] / 1e6, copy_ns[1] / 1e6);
    fprintf(out, "%7s %7s %10s %9s %9s  %s\n", "share%", "count", "total_ms", "avg_us", "max_us", "name");
    for (int i = 0; i < n_entries; i++) {
        Entry *e = &entries[i];
        fprintf(out, "%7.2f %7llu %10.3f %9.1f %9.1f  %.150s\n", total ? 100.0 * e->total_ns / total : 0.0,
                (unsigned long long)e->count, e->total_ns / 1e6, e->total_ns / 1e3 / e->count, e->max_ns / 1e3, e->name);
    }
    if (out != stderr) fclose(out);
}

int InitializeInjection(void) {
    spans = malloc(sizeof *spans * MAX_SPANS);
    if (!spans) return 0;
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    atexit(report);
    return 1;
}
