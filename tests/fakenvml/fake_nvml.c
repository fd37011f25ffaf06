/*
 * fake_nvml.c - a tiny stand-in for NVIDIA's libnvidia-ml.so.1, used by the
 * gpuyard test suite so that the real nvidia-ml-py (pynvml) code path runs on
 * machines without a GPU.
 *
 * Build:  gcc -shared -fPIC -O1 -Wl,-soname,libnvidia-ml.so.1 \
 *             -o libnvidia-ml.so.1 fake_nvml.c
 * Use:    LD_LIBRARY_PATH=<dir with the .so>:$LD_LIBRARY_PATH python ...
 *
 * Signatures, struct layouts and return codes follow NVIDIA's nvml.h.  Any
 * NVML entry point not defined here is simply absent from the library, so
 * pynvml raises NVMLError_FunctionNotFound for it, as with an old driver.
 *
 * Configuration is read from the environment when nvmlInit* takes the
 * reference count from 0 to 1:
 *
 *   FAKE_NVML_GPUS            "name|memory_total_mib|uuid[|cc]" separated by
 *                             ';' (cc = compute capability "major.minor",
 *                             default "9.0").  Unset: two "NVIDIA Fake GPU"
 *                             with 16384 MiB, UUIDs GPU-fake-0000/0001.
 *                             Set but empty: zero GPUs.
 *   FAKE_NVML_DRIVER_VERSION  default "560.35.03"
 *   FAKE_NVML_CUDA_VERSION    int, default 12060
 *   FAKE_NVML_FAIL_INIT       "1": nvmlInit* returns
 *                             NVML_ERROR_DRIVER_NOT_LOADED; any other
 *                             positive integer N: nvmlInit* returns N.
 *                             Unset, empty or "0": no failure.
 *   FAKE_NVML_STATE           optional path of a text file re-read on every
 *                             per-device telemetry call; lines
 *                             "index key value" ('#' starts a comment), keys:
 *                               util_gpu util_mem        (percent)
 *                               mem_used_mib             (MiB)
 *                               temp_c                   (degrees C)
 *                               power_mw power_limit_mw  (milliwatts)
 *                               lost   (non-zero: every call on that GPU
 *                                       returns NVML_ERROR_GPU_IS_LOST)
 *                               sm_clock_mhz mem_clock_mhz  (default 1980, 2619)
 *                               throttle  (clocks event reasons bitmask, 0)
 *                               ecc_corrected ecc_uncorrected  (counts, 0)
 *                               xid xid_events  (last XID code; how many XID
 *                                       events were raised: each one above
 *                                       the count at registration is handed
 *                                       out once by nvmlEventSetWait_v2)
 *                               persistence  (nvmlDeviceGetPersistenceMode:
 *                                       0 disabled, non-zero enabled; 1)
 *                             dcgm-exporter's counters (issue 24; see
 *                             tests/fakenvml/__init__.py): mem_temp_c
 *                             mem_reserved_mib enc_util dec_util energy_mj
 *                             pcie_tx_bytes pcie_rx_bytes pcie_replay
 *                             nvlink_links nvlink_tx_kib nvlink_rx_kib
 *                             remap_corr remap_unc remap_pending
 *                             remap_failure gpm tensor_pct gr_engine_pct
 *                             dram_pct
 *                             and "index proc PID MEM_MIB" lines: a compute
 *                             process on that GPU (at most 32 per GPU).
 *                             Defaults: util 0, memory used 0, 35 C, 60 W of
 *                             700 W.  A missing file means "all defaults".
 *   FAKE_NVML_MISSING         comma-separated NVML function names (telemetry,
 *                             process, clock, ECC and event functions,
 *                             nvmlDeviceGetPersistenceMode,
 *                             nvmlDeviceGetCudaComputeCapability and
 *                             nvmlSystemGetCudaDriverVersion[_v2]) that
 *                             answer NVML_ERROR_FUNCTION_NOT_FOUND, as if the
 *                             driver were too old to have them.
 *
 * Deliberately absent (always NVML_ERROR_FUNCTION_NOT_FOUND through pynvml):
 * serial numbers, fan speed, graphics processes, nvmlEventSetWait_v3 and most
 * of the rest of NVML.  nvmlEventSetWait_v2 never sleeps: it hands out one
 * pending XID event or returns NVML_ERROR_TIMEOUT at once.
 *
 * fake_nvml_call_count() (not an NVML function) returns how many per-device
 * calls the library has answered, for benchmarks.
 *
 * Thread safety: init/shutdown are serialised by a mutex; the device table is
 * only written while going from 0 to 1 references, and the state file is
 * parsed into stack memory, so concurrent readers are fine.
 */

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- nvml.h subset ---------------------------------------------------- */

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum nvmlTemperatureSensors_enum {
    NVML_TEMPERATURE_GPU = 0,
    NVML_TEMPERATURE_COUNT
} nvmlTemperatureSensors_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2) /* 0x02000028 */

/* nvmlPciInfo_t as of NVML 9.0+ (used by nvmlDeviceGetPciInfo_v3). */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* Legacy layout used by nvmlDeviceGetPciInfo (v1) and _v2. */
typedef struct nvmlPciInfoLegacy_st {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfoLegacy_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlTemperature_v1_st {
    unsigned int version;
    nvmlTemperatureSensors_t sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(Temperature, 1) /* 0x0100000C */

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2 version");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlPciInfoLegacy_t) == 52, "legacy nvmlPciInfo_t layout");
_Static_assert(nvmlTemperature_v1 == 0x0100000C, "nvmlTemperature_v1 version");

/* ---- fake device table ------------------------------------------------- */

#define FAKE_MAX_GPUS 64
#define FAKE_NAME_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define FAKE_UUID_LEN 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define FAKE_VERSION_LEN 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */

struct nvmlDevice_st {
    unsigned int index;
    char name[FAKE_NAME_LEN];
    char uuid[FAKE_UUID_LEN];
    unsigned long long memory_total; /* bytes */
    int cc_major, cc_minor;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

#define FAKE_MAX_PROCS 32

struct fake_proc {
    unsigned int pid;
    unsigned long long mem_mib;
};

struct fake_dyn {
    unsigned long long util_gpu, util_mem, mem_used_mib, temp_c;
    unsigned long long power_mw, power_limit_mw, lost;
    unsigned long long sm_clock_mhz, mem_clock_mhz, throttle;
    unsigned long long ecc_corrected, ecc_uncorrected, xid, xid_events;
    unsigned long long persistence;
    /* dcgm-exporter's default counters (issue 24) */
    unsigned long long mem_temp_c, mem_reserved_mib, enc_util, dec_util;
    unsigned long long energy_mj, energy_set; /* energy_set: 0 = derived from power x time */
    unsigned long long pcie_tx_bytes, pcie_rx_bytes, pcie_replay;
    unsigned long long nvlink_links, nvlink_tx_kib, nvlink_rx_kib;
    unsigned long long remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned long long gpm, tensor_pct, gr_engine_pct, dram_pct;
    unsigned int nprocs;
    struct fake_proc procs[FAKE_MAX_PROCS];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_refcount;
static struct nvmlDevice_st g_devs[FAKE_MAX_GPUS];
static unsigned int g_count;
static char g_driver_version[FAKE_VERSION_LEN];
static int g_cuda_version;

#define MIB (1024ULL * 1024ULL)

static void fake_complain(const char *what, const char *detail)
{
    fprintf(stderr, "fake libnvidia-ml: %s: %s\n", what, detail);
}

static int copy_field(char *dst, size_t cap, const char *src, size_t len)
{
    if (len == 0 || len >= cap)
        return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

/* Parse one "name|mib|uuid[|cc]" entry of length len. */
static int parse_gpu(struct nvmlDevice_st *d, const char *s, size_t len)
{
    const char *end = s + len;
    const char *fields[4];
    size_t lens[4];
    int n = 0;
    const char *p = s;

    while (n < 4) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        const char *stop = bar ? bar : end;
        fields[n] = p;
        lens[n] = (size_t)(stop - p);
        n++;
        if (!bar)
            break;
        p = bar + 1;
    }
    if (n < 3 || (n == 4 && fields[3] + lens[3] != end)) /* 3 or 4 fields */
        return -1;

    if (copy_field(d->name, sizeof d->name, fields[0], lens[0]) != 0)
        return -1;
    if (copy_field(d->uuid, sizeof d->uuid, fields[2], lens[2]) != 0)
        return -1;

    char num[32];
    if (copy_field(num, sizeof num, fields[1], lens[1]) != 0 || !isdigit((unsigned char)num[0]))
        return -1;
    char *stop;
    errno = 0;
    unsigned long long mib = strtoull(num, &stop, 10);
    if (errno || *stop != '\0')
        return -1;
    d->memory_total = mib * MIB;

    d->cc_major = 9;
    d->cc_minor = 0;
    if (n == 4) {
        int maj, min;
        char extra;
        if (copy_field(num, sizeof num, fields[3], lens[3]) != 0 ||
            sscanf(num, "%d.%d%c", &maj, &min, &extra) != 2 || maj < 0 || min < 0)
            return -1;
        d->cc_major = maj;
        d->cc_minor = min;
    }
    return 0;
}

static nvmlReturn_t load_config(void)
{
    const char *gpus = getenv("FAKE_NVML_GPUS");
    unsigned int count = 0;

    if (!gpus) {
        for (count = 0; count < 2; count++) {
            struct nvmlDevice_st *d = &g_devs[count];
            snprintf(d->name, sizeof d->name, "NVIDIA Fake GPU");
            snprintf(d->uuid, sizeof d->uuid, "GPU-fake-%04u", count);
            d->memory_total = 16384ULL * MIB;
            d->cc_major = 9;
            d->cc_minor = 0;
        }
    } else {
        const char *p = gpus;
        while (*p) {
            const char *semi = strchr(p, ';');
            size_t len = semi ? (size_t)(semi - p) : strlen(p);
            if (len > 0) { /* tolerate empty entries, e.g. a trailing ';' */
                if (count >= FAKE_MAX_GPUS) {
                    fake_complain("too many GPUs in FAKE_NVML_GPUS", gpus);
                    return NVML_ERROR_UNKNOWN;
                }
                if (parse_gpu(&g_devs[count], p, len) != 0) {
                    fake_complain("bad FAKE_NVML_GPUS entry (want name|mib|uuid[|cc])", p);
                    return NVML_ERROR_UNKNOWN;
                }
                count++;
            }
            if (!semi)
                break;
            p = semi + 1;
        }
    }
    for (unsigned int i = 0; i < count; i++)
        g_devs[i].index = i;

    const char *drv = getenv("FAKE_NVML_DRIVER_VERSION");
    if (!drv || !*drv)
        drv = "560.35.03";
    if (strlen(drv) >= sizeof g_driver_version) {
        fake_complain("FAKE_NVML_DRIVER_VERSION too long", drv);
        return NVML_ERROR_UNKNOWN;
    }
    snprintf(g_driver_version, sizeof g_driver_version, "%s", drv);

    const char *cuda = getenv("FAKE_NVML_CUDA_VERSION");
    g_cuda_version = 12060;
    if (cuda && *cuda) {
        char *stop;
        long v = strtol(cuda, &stop, 10);
        if (*stop != '\0' || v < 0 || v > 1000000) {
            fake_complain("bad FAKE_NVML_CUDA_VERSION", cuda);
            return NVML_ERROR_UNKNOWN;
        }
        g_cuda_version = (int)v;
    }

    g_count = count;
    return NVML_SUCCESS;
}

static nvmlReturn_t fail_init_code(void)
{
    const char *f = getenv("FAKE_NVML_FAIL_INIT");
    if (!f || !*f || strcmp(f, "0") == 0)
        return NVML_SUCCESS;
    long v = strtol(f, NULL, 10);
    if (v <= 1)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    return (nvmlReturn_t)v;
}

/* The state key of one of dcgm-exporter's counters, or NULL. */
static unsigned long long *dcgm_slot(struct fake_dyn *d, const char *key)
{
    const struct { const char *key; unsigned long long *slot; } keys[] = {
        {"mem_temp_c", &d->mem_temp_c}, {"mem_reserved_mib", &d->mem_reserved_mib},
        {"enc_util", &d->enc_util}, {"dec_util", &d->dec_util},
        {"pcie_tx_bytes", &d->pcie_tx_bytes}, {"pcie_rx_bytes", &d->pcie_rx_bytes},
        {"pcie_replay", &d->pcie_replay}, {"nvlink_links", &d->nvlink_links},
        {"nvlink_tx_kib", &d->nvlink_tx_kib}, {"nvlink_rx_kib", &d->nvlink_rx_kib},
        {"remap_corr", &d->remap_corr}, {"remap_unc", &d->remap_unc},
        {"remap_pending", &d->remap_pending}, {"remap_failure", &d->remap_failure},
        {"gpm", &d->gpm}, {"tensor_pct", &d->tensor_pct},
        {"gr_engine_pct", &d->gr_engine_pct}, {"dram_pct", &d->dram_pct},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i].key))
            return keys[i].slot;
    return NULL;
}

/* Read FAKE_NVML_STATE for GPU `index` into *out (defaults first). */
static void read_dyn(unsigned int index, struct fake_dyn *out)
{
    out->util_gpu = 0;
    out->util_mem = 0;
    out->mem_used_mib = 0;
    out->temp_c = 35;
    out->power_mw = 60000;
    out->power_limit_mw = 700000;
    out->lost = 0;
    out->sm_clock_mhz = 1980;
    out->mem_clock_mhz = 2619;
    out->throttle = 0;
    out->ecc_corrected = 0;
    out->ecc_uncorrected = 0;
    out->xid = 0;
    out->xid_events = 0;
    out->persistence = 1;
    out->mem_temp_c = 45;
    out->mem_reserved_mib = 0;
    out->enc_util = 0;
    out->dec_util = 0;
    out->energy_mj = 0;
    out->energy_set = 0;
    out->pcie_tx_bytes = 0;
    out->pcie_rx_bytes = 0;
    out->pcie_replay = 0;
    out->nvlink_links = 0;
    out->nvlink_tx_kib = 0;
    out->nvlink_rx_kib = 0;
    out->remap_corr = 0;
    out->remap_unc = 0;
    out->remap_pending = 0;
    out->remap_failure = 0;
    out->gpm = 1;
    out->tensor_pct = 0;
    out->gr_engine_pct = 0;
    out->dram_pct = 0;
    out->nprocs = 0;

    const char *path = getenv("FAKE_NVML_STATE");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        unsigned int idx;
        char key[32];
        unsigned long long val, mem;
        int n = sscanf(line, "%u %31s %llu %llu", &idx, key, &val, &mem);
        if (n < 3 || idx != index)
            continue;
        if (!strcmp(key, "proc")) { /* "index proc PID MEM_MIB" */
            if (n == 4 && out->nprocs < FAKE_MAX_PROCS) {
                out->procs[out->nprocs].pid = (unsigned int)val;
                out->procs[out->nprocs].mem_mib = mem;
                out->nprocs++;
            }
            continue;
        }
        if (!strcmp(key, "util_gpu"))
            out->util_gpu = val;
        else if (!strcmp(key, "util_mem"))
            out->util_mem = val;
        else if (!strcmp(key, "mem_used_mib"))
            out->mem_used_mib = val;
        else if (!strcmp(key, "temp_c"))
            out->temp_c = val;
        else if (!strcmp(key, "power_mw"))
            out->power_mw = val;
        else if (!strcmp(key, "power_limit_mw"))
            out->power_limit_mw = val;
        else if (!strcmp(key, "lost"))
            out->lost = val;
        else if (!strcmp(key, "sm_clock_mhz"))
            out->sm_clock_mhz = val;
        else if (!strcmp(key, "mem_clock_mhz"))
            out->mem_clock_mhz = val;
        else if (!strcmp(key, "throttle"))
            out->throttle = val;
        else if (!strcmp(key, "ecc_corrected"))
            out->ecc_corrected = val;
        else if (!strcmp(key, "ecc_uncorrected"))
            out->ecc_uncorrected = val;
        else if (!strcmp(key, "xid"))
            out->xid = val;
        else if (!strcmp(key, "xid_events"))
            out->xid_events = val;
        else if (!strcmp(key, "persistence"))
            out->persistence = val;
        else if (!strcmp(key, "energy_mj")) {
            out->energy_mj = val;
            out->energy_set = 1;
        } else {
            unsigned long long *slot = dcgm_slot(out, key);
            if (slot)
                *slot = val;
        }
    }
    fclose(f);
}

static int initialized(void)
{
    return __atomic_load_n(&g_refcount, __ATOMIC_ACQUIRE) > 0;
}

static unsigned long long g_calls;

/* Not an NVML function: per-device calls answered since load (benchmarks count them). */
EXPORT unsigned long long fake_nvml_call_count(void)
{
    return __atomic_load_n(&g_calls, __ATOMIC_RELAXED);
}

/* Is `fn` listed in FAKE_NVML_MISSING (comma-separated)?  Then it answers
 * NVML_ERROR_FUNCTION_NOT_FOUND, as pynvml does for a symbol an old driver lacks. */
static int missing(const char *fn)
{
    const char *list = getenv("FAKE_NVML_MISSING");
    size_t len = strlen(fn);
    while (list && *list) {
        const char *comma = strchr(list, ',');
        size_t n = comma ? (size_t)(comma - list) : strlen(list);
        if (n == len && strncmp(list, fn, len) == 0)
            return 1;
        list = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Common prologue for per-device calls. */
static nvmlReturn_t check_device(nvmlDevice_t device, struct fake_dyn *dyn)
{
    __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)device;
    uintptr_t base = (uintptr_t)&g_devs[0];
    if (!device || p < base || p >= (uintptr_t)&g_devs[g_count] ||
        (p - base) % sizeof(struct nvmlDevice_st) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_dyn local;
    if (!dyn)
        dyn = &local;
    read_dyn(device->index, dyn);
    if (dyn->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *value)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t need = strlen(value) + 1;
    if (length < need)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, need);
    return NVML_SUCCESS;
}

/* ---- init / shutdown ------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    nvmlReturn_t ret = fail_init_code();
    if (ret != NVML_SUCCESS)
        return ret;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        ret = load_config();
    if (ret == NVML_SUCCESS)
        __atomic_add_fetch(&g_refcount, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        __atomic_sub_fetch(&g_refcount, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
    return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system queries -------------------------------------------------- */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, g_driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    /* Real NVML reports "<cuda major>.<driver version>", e.g. "12.560.35.03". */
    char buf[FAKE_VERSION_LEN + 16];
    snprintf(buf, sizeof buf, "%d.%s", g_cuda_version / 1000, g_driver_version);
    return copy_out(version, length, buf);
}

/* Both versions of the call answer the same; each can be made absent on its own. */
static nvmlReturn_t cuda_driver_version(const char *name, int *cudaDriverVersion)
{
    if (missing(name))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = g_cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_driver_version("nvmlSystemGetCudaDriverVersion", cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_driver_version("nvmlSystemGetCudaDriverVersion_v2", cudaDriverVersion);
}

/* ---- device enumeration ---------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = g_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= g_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_dyn dyn;
    read_dyn(index, &dyn);
    if (dyn.lost)
        return NVML_ERROR_GPU_IS_LOST;
    *device = &g_devs[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_count; i++) {
        if (strcmp(g_devs[i].uuid, uuid) == 0) {
            struct fake_dyn dyn;
            read_dyn(i, &dyn);
            if (dyn.lost)
                return NVML_ERROR_GPU_IS_LOST;
            *device = &g_devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---- per-device static info ------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    return copy_out(name, length, device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    return copy_out(uuid, length, device->uuid);
}

static void fill_pci(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = 0x18 + device->index; /* arbitrary but stable and unique */
    pci->device = 0;
    pci->pciDeviceId = 0x233510DE; /* device 0x2335, vendor 0x10DE (NVIDIA) */
    pci->pciSubSystemId = 0x18BE10DE;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0",
             pci->domain, pci->bus, pci->device);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0",
             pci->domain, pci->bus, pci->device);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(device, pci);
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_legacy(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlPciInfo_t full;
    fill_pci(device, &full);
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busId, full.busIdLegacy, sizeof pci->busId);
    pci->domain = full.domain;
    pci->bus = full.bus;
    pci->device = full.device;
    pci->pciDeviceId = full.pciDeviceId;
    pci->pciSubSystemId = full.pciSubSystemId;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    return pci_legacy(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    return pci_legacy(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    if (missing("nvmlDeviceGetCudaComputeCapability"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = check_device(device, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;


/* The start of every per-device telemetry call: absent when FAKE_NVML_MISSING names it, else
 * the device is checked and its current values read into `dyn` (returns on error). */
#define DEVICE_CALL(name)                                  \
    if (missing(name))                                     \
        return NVML_ERROR_FUNCTION_NOT_FOUND;              \
    struct fake_dyn dyn;                                   \
    nvmlReturn_t r = check_device(device, &dyn);           \
    if (r != NVML_SUCCESS)                                 \
        return r

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEVICE_CALL("nvmlDeviceGetPersistenceMode");
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = dyn.persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* ---- per-device telemetry (FAKE_NVML_STATE) --------------------------- */

static void memory_numbers(nvmlDevice_t device, const struct fake_dyn *dyn,
                           unsigned long long *used, unsigned long long *free_)
{
    unsigned long long u = dyn->mem_used_mib * MIB;
    if (u > device->memory_total)
        u = device->memory_total;
    *used = u;
    *free_ = device->memory_total - u;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_CALL("nvmlDeviceGetMemoryInfo");
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->memory_total;
    memory_numbers(device, &dyn, &memory->used, &memory->free);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_CALL("nvmlDeviceGetMemoryInfo_v2");
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = device->memory_total;
    memory_numbers(device, &dyn, &memory->used, &memory->free);
    /* v2 counts the driver's reservation apart: used + reserved + free = total */
    unsigned long long reserved = dyn.mem_reserved_mib * MIB;
    memory->reserved = reserved < memory->free ? reserved : memory->free;
    memory->free -= memory->reserved;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    DEVICE_CALL("nvmlDeviceGetUtilizationRates");
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = (unsigned int)dyn.util_gpu;
    utilization->memory = (unsigned int)dyn.util_mem;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                             unsigned int *temp)
{
    DEVICE_CALL("nvmlDeviceGetTemperature");
    if (!temp || sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)dyn.temp_c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    DEVICE_CALL("nvmlDeviceGetTemperatureV");
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = (int)dyn.temp_c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEVICE_CALL("nvmlDeviceGetPowerUsage");
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = (unsigned int)dyn.power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_CALL("nvmlDeviceGetEnforcedPowerLimit");
    if (!limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    *limit = (unsigned int)dyn.power_limit_mw;
    return NVML_SUCCESS;
}

/* ---- clocks, throttle reasons, ECC ------------------------------------ */

typedef enum nvmlClockType_enum {
    NVML_CLOCK_GRAPHICS = 0,
    NVML_CLOCK_SM = 1,
    NVML_CLOCK_MEM = 2,
    NVML_CLOCK_VIDEO = 3
} nvmlClockType_t;

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                           unsigned int *clock)
{
    DEVICE_CALL("nvmlDeviceGetClockInfo");
    if (!clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *clock = (unsigned int)dyn.sm_clock_mhz; return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *clock = (unsigned int)dyn.mem_clock_mhz; return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

static nvmlReturn_t throttle(const char *fn, nvmlDevice_t device, unsigned long long *reasons)
{
    if (missing(fn))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct fake_dyn dyn;
    nvmlReturn_t r = check_device(device, &dyn);
    if (r != NVML_SUCCESS)
        return r;
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = dyn.throttle;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                           unsigned long long *reasons)
{
    return throttle("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons)
{
    return throttle("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

typedef enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 }
    nvmlMemoryErrorType_t;
typedef enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 } nvmlEccCounterType_t;

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t type,
                                                nvmlEccCounterType_t counter,
                                                unsigned long long *count)
{
    DEVICE_CALL("nvmlDeviceGetTotalEccErrors");
    if (!count || (counter != NVML_VOLATILE_ECC && counter != NVML_AGGREGATE_ECC))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *count = dyn.ecc_corrected;
    else if (type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *count = dyn.ecc_uncorrected;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* ---- processes ("index proc PID MEM_MIB" lines) ------------------------ */

typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes */
    unsigned int gpuInstanceId;       /* 0xFFFFFFFF: not MIG */
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout (v2 == v3)");

static nvmlReturn_t processes(const char *fn, nvmlDevice_t device, unsigned int *count,
                              nvmlProcessInfo_t *infos)
{
    if (missing(fn))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    struct fake_dyn dyn;
    nvmlReturn_t r = check_device(device, &dyn);
    if (r != NVML_SUCCESS)
        return r;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < dyn.nprocs || (dyn.nprocs > 0 && !infos)) {
        *count = dyn.nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < dyn.nprocs; i++) {
        infos[i].pid = dyn.procs[i].pid;
        infos[i].usedGpuMemory = dyn.procs[i].mem_mib * MIB;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = dyn.nprocs;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return processes("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    return processes("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos);
}

/* ---- XID events ("index xid CODE" and "index xid_events N" lines) ------ */

#define NVML_EVENT_TYPE_XID_CRITICAL 0x0000000000000008ULL

struct nvmlEventSet_st {
    unsigned long long registered[FAKE_MAX_GPUS]; /* event mask per device */
    unsigned long long delivered[FAKE_MAX_GPUS];  /* XID events handed out per device */
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (missing("nvmlEventSetCreate"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t set)
{
    struct fake_dyn dyn;
    nvmlReturn_t r = check_device(device, &dyn);
    if (r != NVML_SUCCESS)
        return r;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~NVML_EVENT_TYPE_XID_CRITICAL)
        return NVML_ERROR_NOT_SUPPORTED;
    set->registered[device->index] |= types;
    set->delivered[device->index] = dyn.xid_events; /* only events raised from now on */
    return NVML_SUCCESS;
}

/* Never sleeps: an event raised since the last call, else NVML_ERROR_TIMEOUT at once. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeoutms)
{
    (void)timeoutms;
    __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_count; i++) {
        if (!(set->registered[i] & NVML_EVENT_TYPE_XID_CRITICAL))
            continue;
        struct fake_dyn dyn;
        read_dyn(i, &dyn);
        if (dyn.xid_events > set->delivered[i]) {
            set->delivered[i]++;
            data->device = &g_devs[i];
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL;
            data->eventData = dyn.xid;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set);
    return NVML_SUCCESS;
}

/* ---- dcgm-exporter's default counters (issue 24) ---------------------- */

#include <time.h>

/* Seconds since the library was first initialised: the default energy counter grows with it
 * (power x time), as the driver's does. */
static double g_loaded_at = -1;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long energy_of(const struct fake_dyn *dyn)
{
    if (dyn->energy_set)
        return dyn->energy_mj;
    if (g_loaded_at < 0)
        g_loaded_at = now_s();
    return (unsigned long long)((double)dyn->power_mw * (now_s() - g_loaded_at));
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long *energy)
{
    DEVICE_CALL("nvmlDeviceGetTotalEnergyConsumption");
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    *energy = energy_of(&dyn);
    return NVML_SUCCESS;
}

static nvmlReturn_t codec_util(unsigned long long value, unsigned int *util, unsigned int *period)
{
    if (!util || !period)
        return NVML_ERROR_INVALID_ARGUMENT;
    *util = (unsigned int)value;
    *period = 167000; /* microseconds, as a real board's sampling window */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *samplingPeriodUs)
{
    DEVICE_CALL("nvmlDeviceGetEncoderUtilization");
    return codec_util(dyn.enc_util, util, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *samplingPeriodUs)
{
    DEVICE_CALL("nvmlDeviceGetDecoderUtilization");
    return codec_util(dyn.dec_util, util, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    DEVICE_CALL("nvmlDeviceGetPcieReplayCounter");
    if (!value)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = (unsigned int)dyn.pcie_replay;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                              unsigned int *uncRows, unsigned int *isPending,
                                              unsigned int *failureOccurred)
{
    DEVICE_CALL("nvmlDeviceGetRemappedRows");
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = (unsigned int)dyn.remap_corr;
    *uncRows = (unsigned int)dyn.remap_unc;
    *isPending = (unsigned int)dyn.remap_pending;
    *failureOccurred = (unsigned int)dyn.remap_failure;
    return NVML_SUCCESS;
}

/* nvmlDeviceGetFieldValues: the fields gpuyard reads; any other answers NOT_SUPPORTED in its
 * own nvmlReturn, as a real driver does per field. */
typedef enum {
    NVML_VALUE_TYPE_DOUBLE = 0, NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
} nvmlValueType_t;

typedef union nvmlValue_st {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");

#define NVML_FI_DEV_MEMORY_TEMP 82
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION 83
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_PCIE_REPLAY_COUNTER 94
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139
#define NVML_FI_DEV_PCIE_COUNT_TX_BYTES 197
#define NVML_FI_DEV_PCIE_COUNT_RX_BYTES 198

static void field_value(const struct fake_dyn *dyn, nvmlFieldValue_t *v)
{
    v->nvmlReturn = NVML_SUCCESS;
    v->timestamp = (long long)(now_s() * 1e6);
    v->latencyUsec = 0;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = (unsigned int)dyn->mem_temp_c;
        return;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = (unsigned int)dyn->nvlink_links;
        return;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: v->value.ullVal = energy_of(dyn); return;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER: v->value.ullVal = dyn->pcie_replay; return;
    case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: v->value.ullVal = dyn->pcie_tx_bytes; return;
    case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: v->value.ullVal = dyn->pcie_rx_bytes; return;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
        if (v->scopeId >= dyn->nvlink_links) { /* a link this GPU does not have */
            v->nvmlReturn = dyn->nvlink_links ? NVML_ERROR_INVALID_ARGUMENT
                                              : NVML_ERROR_NOT_SUPPORTED;
            return;
        }
        v->value.ullVal = v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                              ? dyn->nvlink_tx_kib : dyn->nvlink_rx_kib;
        return;
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                             nvmlFieldValue_t *values)
{
    DEVICE_CALL("nvmlDeviceGetFieldValues");
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++)
        field_value(&dyn, &values[i]);
    return NVML_SUCCESS;
}

/* ---- GPM (Hopper's GPU performance metrics: tensor, graphics, DRAM activity) ---------- */

#define NVML_GPM_METRIC_GRAPHICS_UTIL 1
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL 5
#define NVML_GPM_METRIC_DRAM_BW_UTIL 10
#define NVML_GPM_METRIC_MAX 477

struct nvmlGpmSample_st {
    unsigned int index; /* FAKE_MAX_GPUS: not taken yet */
    double tensor_pct, gr_engine_pct, dram_pct;
};
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef struct {
    char *shortName;
    char *longName;
    char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support)
{
    DEVICE_CALL("nvmlGpmQueryDeviceSupport");
    if (!support)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != 1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = dyn.gpm ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    if (missing("nvmlGpmSampleAlloc"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!sample)
        return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    if (!*sample)
        return NVML_ERROR_MEMORY;
    (*sample)->index = FAKE_MAX_GPUS;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    free(sample);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample)
{
    DEVICE_CALL("nvmlGpmSampleGet");
    if (!sample)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dyn.gpm)
        return NVML_ERROR_NOT_SUPPORTED;
    sample->index = device->index;
    sample->tensor_pct = (double)dyn.tensor_pct;
    sample->gr_engine_pct = (double)dyn.gr_engine_pct;
    sample->dram_pct = (double)dyn.dram_pct;
    return NVML_SUCCESS;
}

/* The activity between two samples of one GPU: the fake's state at the second one. */
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get)
{
    if (missing("nvmlGpmMetricsGet"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!get || !get->sample1 || !get->sample2 || get->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != 1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (get->sample1->index != get->sample2->index || get->sample2->index >= FAKE_MAX_GPUS)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *m = &get->metrics[i];
        m->nvmlReturn = NVML_SUCCESS;
        switch (m->metricId) {
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: m->value = get->sample2->tensor_pct; break;
        case NVML_GPM_METRIC_GRAPHICS_UTIL: m->value = get->sample2->gr_engine_pct; break;
        case NVML_GPM_METRIC_DRAM_BW_UTIL: m->value = get->sample2->dram_pct; break;
        default: m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
