// Environment queries; see env.h.
#include "sweeps/measure/env.h"

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <torch/headeronly/version.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>
#include <unistd.h>

namespace sweep {
namespace {

std::string cuda_version_string(int v) {
  return v > 0 ? std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) : "";
}

}  // namespace

int cuda_device_count() {
  // cudaGetDeviceCount initialises the runtime but creates no context on a device.
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string visible_device(const char* visible, std::size_t index) {
  if (!visible) return std::to_string(index);
  std::vector<std::string> entries;
  std::stringstream in(visible);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    entries.push_back(item);
  }
  if (index >= entries.size())
    throw std::out_of_range("CUDA_VISIBLE_DEVICES='" + std::string(visible) + "' has no entry " +
                            std::to_string(index));
  return entries[index];
}

DeviceInfo query_device(Device device) {
  DeviceInfo d;
  if (device == Device::kCuda) {
    const auto* prop = at::cuda::getCurrentDeviceProperties();
    d.name = prop->name;
    d.memory_bytes = static_cast<int64_t>(prop->totalGlobalMem);
    int driver = 0;
    cudaDriverGetVersion(&driver);
    d.driver_version = cuda_version_string(driver);
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    d.cuda_version = cuda_version_string(runtime);
    return d;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      d.name = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (d.name.empty()) d.name = "cpu";
  d.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
#ifdef CUDA_VERSION
  d.cuda_version = cuda_version_string(CUDA_VERSION);
#endif
  return d;
}

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string rfc3339_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace sweep
