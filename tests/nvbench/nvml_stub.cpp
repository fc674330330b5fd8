// SPDX-License-Identifier: Apache-2.0
// A link-time stand-in for NVML (libnvidia-ml.so.1), built by
// cmake/krexNvbench.cmake only where the CUDA toolkit has no NVML (a machine
// without the NVIDIA driver, such as CI): libnvbench.so needs these symbols to
// link and load. Every call fails as NVML does without a driver
// (NVML_ERROR_DRIVER_NOT_LOADED); nvbench then runs without NVML, as it does
// on such a machine. Never used where a real NVML is found.

extern "C" {
typedef struct nvml_device_st* nvml_device_t;
static const int driver_not_loaded = 9;  // NVML_ERROR_DRIVER_NOT_LOADED

int nvmlInit_v2(void) { return driver_not_loaded; }
int nvmlShutdown(void) { return driver_not_loaded; }
const char* nvmlErrorString(int) { return "Driver Not Loaded (krex's NVML stand-in: no NVIDIA driver here)"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char*, nvml_device_t*) { return driver_not_loaded; }
int nvmlDeviceSetGpuLockedClocks(nvml_device_t, unsigned, unsigned) { return driver_not_loaded; }
int nvmlDeviceResetGpuLockedClocks(nvml_device_t) { return driver_not_loaded; }
int nvmlDeviceSetPersistenceMode(nvml_device_t, int) { return driver_not_loaded; }
}
