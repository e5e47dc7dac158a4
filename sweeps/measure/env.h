// The environment a row was measured in: device, versions, host, time. Versioned output
// (STYLE.md): every row says where and with what it was measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "reports/results/vocab.h"

namespace sweep {

struct DeviceInfo {
  std::string name;    // "NVIDIA H100 80GB HBM3" | CPU model name
  int64_t memory_bytes = 0;
  std::string driver_version;       // the NVIDIA driver, "580.159.04"; empty on the CPU
  std::string cuda_version;         // CUDA runtime torch was built with
  std::string cuda_driver_version;  // the CUDA version the driver supports, "13.0"
};

// The NVIDIA driver's version: NVML's nvmlSystemGetDriverVersion (libnvidia-ml.so.1, loaded
// at run time: the wheel ships no NVML header or library), else /proc/driver/nvidia/version;
// "" where neither answers (no driver).
std::string nvidia_driver_version();
// The version in /proc/driver/nvidia/version's text ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  580.159.04  ..." or "... Open Kernel Module for x86_64  580.65.06  Release Build
// ..."); "" when it names none.
std::string driver_version_of_procfs(const std::string& text);

// Queries the current device (initialises CUDA when device is kCuda).
DeviceInfo query_device(Device device);
// Number of CUDA devices without creating a context on them (0 when no driver/GPU, or when
// CUDA cannot use the driver: cuda_unusable_reason says why).
int cuda_device_count();
// Why CUDA counts no GPU although an NVIDIA driver is installed (a driver too old for CUDA 13
// reads as "0 GPUs" otherwise): cudaGetDeviceCount's error, named, with the driver's version;
// "" when CUDA counted the GPUs, found none (cudaErrorNoDevice), or no driver is installed.
std::string cuda_unusable_reason();
// The rule of cuda_unusable_reason, for a given error code (cudaError_t), its name and text,
// and the installed driver's version ("" = none).
std::string cuda_count_error(int code, const std::string& name, const std::string& text,
                             const std::string& driver_version);
// The CUDA_VISIBLE_DEVICES entry that names this process's GPU `index` (what a child must be
// given to see that GPU as its device 0): the index-th entry of `visible` (this process's
// CUDA_VISIBLE_DEVICES: indices, UUIDs or MIG ids), or the index itself when `visible` is
// unset. Throws std::out_of_range past the list.
std::string visible_device(const char* visible, std::size_t index);
std::string torch_version();
std::string host_name();
std::string rfc3339_now();  // "2026-11-22T12:34:56Z"

}  // namespace sweep
