// Environment queries; see env.h.
#include "sweeps/measure/env.h"

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <torch/headeronly/version.h>

#include <dlfcn.h>

#include <cctype>
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

std::string driver_version_of_procfs(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("NVRM version:", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      // The first word of digits and dots with at least one dot: "580.159.04".
      if (w.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(w[0])) &&
          w.find_first_not_of("0123456789.") == std::string::npos)
        return w;
    }
  }
  return "";
}

std::string nvidia_driver_version() {
  // nvml.h: nvmlReturn_t nvmlInit_v2(void), nvmlSystemGetDriverVersion(char*, unsigned int),
  // nvmlShutdown(void); NVML_SUCCESS is 0, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80.
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using Init = int (*)();
    using Version = int (*)(char*, unsigned int);
    auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
    auto version = reinterpret_cast<Version>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
    auto shutdown = reinterpret_cast<Init>(dlsym(nvml, "nvmlShutdown"));
    char buf[96] = {0};
    std::string v;
    if (init && version && shutdown && init() == 0) {
      if (version(buf, sizeof buf - 1) == 0) v = buf;
      shutdown();
    }
    dlclose(nvml);
    if (!v.empty()) return v;
  }
  std::ifstream procfs("/proc/driver/nvidia/version");
  std::stringstream text;
  text << procfs.rdbuf();
  return driver_version_of_procfs(text.str());
}

int cuda_device_count() {
  // cudaGetDeviceCount initialises the runtime but creates no context on a device.
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_count_error(int code, const std::string& name, const std::string& text,
                             const std::string& driver_version) {
  if (code == cudaSuccess || code == cudaErrorNoDevice || driver_version.empty()) return "";
  std::string s = "CUDA cannot use the GPU: " + text + " (" + name + ") with NVIDIA driver " +
                  driver_version;
  // CUDA 13.0's minimum Linux driver is 580 (the CUDA 13.0 release notes' driver table): an
  // older one is the usual cause of cudaErrorInsufficientDriver.
  if (code == cudaErrorInsufficientDriver)
    s += "; this build's CUDA 13 (torch 2.11.0+cu130) needs driver 580 or newer";
  return s;
}

std::string cuda_unusable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (e == cudaSuccess) return "";
  return cuda_count_error(e, cudaGetErrorName(e), cudaGetErrorString(e), nvidia_driver_version());
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
    d.driver_version = nvidia_driver_version();
    int driver = 0;
    cudaDriverGetVersion(&driver);
    d.cuda_driver_version = cuda_version_string(driver);
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
