// The environment a row was measured in: device, versions, host, time. Versioned output
// (STYLE.md): every row says where and with what it was measured.
#pragma once

#include <cstdint>
#include <string>

namespace sweep {

struct DeviceInfo {
  std::string device;  // cpu | cuda
  std::string name;    // "NVIDIA H100 80GB HBM3" | CPU model name
  int64_t memory_bytes = 0;
  std::string driver_version;  // CUDA driver API version, "13.0"; empty on the CPU
  std::string cuda_version;    // CUDA runtime torch was built with
};

// Queries the current device (initialises CUDA when device == "cuda").
DeviceInfo query_device(const std::string& device);
// Number of CUDA devices without creating a context on them (0 when no driver/GPU).
int cuda_device_count();
std::string torch_version();
std::string host_name();
std::string rfc3339_now();  // "2026-11-22T12:34:56Z"

}  // namespace sweep
