// The emulated device's memory; see emulated_allocator.h.
#include "sweeps/measure/emulated_allocator.h"

#include <c10/util/Exception.h>
#include <c10/util/env.h>

#include <algorithm>
#include <fstream>
#include <unordered_map>
#include <utility>
#include <variant>

#include "sweeps/measure/alloc_conf.h"
#include "sweeps/measure/caching_allocator.h"
#include "sweeps/measure/emulated_card.h"
#include "sweeps/measure/memory_viz.h"

namespace sweep::emu {
namespace {

thread_local int tl_stream = 0;

// The CPU: every byte asked for, nothing cached, a budget as the CPU tracking allocator's
// (cpu_trackers.cc: the allocation that would pass it fails).
class ExactMemory final : public DeviceMemory {
 public:
  std::optional<uint64_t> malloc(std::size_t n) override {
    const auto need = static_cast<int64_t>(n);
    if (budget_ > 0 && current_ + need > budget_) {
      oom_ = "CPU budget exceeded: tried to allocate " + std::to_string(n) + " bytes with " +
             std::to_string(current_) + " bytes allocated and a budget of " +
             std::to_string(budget_) + " bytes";
      return std::nullopt;
    }
    current_ += need;
    peak_ = std::max(peak_, current_);
    sizes_[++next_] = need;
    return next_;
  }
  void free(uint64_t handle) override {
    auto it = sizes_.find(handle);
    if (it == sizes_.end()) return;
    current_ -= it->second;
    sizes_.erase(it);
  }
  int64_t size_of(uint64_t handle) const override {
    auto it = sizes_.find(handle);
    return it == sizes_.end() ? 0 : it->second;
  }
  const std::string& last_oom_message() const override { return oom_; }
  int64_t allocated() const override { return current_; }
  int64_t reserved() const override { return current_; }
  int64_t peak_allocated() const override { return peak_; }
  int64_t peak_reserved() const override { return peak_; }
  void reset_peaks() override { peak_ = current_; }
  void set_budget(int64_t bytes) override { budget_ = bytes; }

 private:
  int64_t current_ = 0, peak_ = 0, budget_ = 0;
  uint64_t next_ = 0;
  std::unordered_map<uint64_t, int64_t> sizes_;
  std::string oom_;
};

// A CUDA card: torch 2.11's caching allocator (caching_allocator.h) over what the driver can
// hand out, the card's memory less its CUDA context.
class CachingMemory final : public DeviceMemory {
 public:
  CachingMemory(const EmulatedCard& card, AllocatorSettings settings)
      : total_(card.memory_bytes),
        model_(card.memory_bytes, card.memory_bytes - card.context_bytes, std::move(settings)) {}
  std::optional<uint64_t> malloc(std::size_t n) override {
    auto h = model_.malloc(n, current_stream());
    if (h) sizes_[*h] = static_cast<int64_t>(n);
    return h;
  }
  void free(uint64_t handle) override {
    sizes_.erase(handle);
    model_.free(handle);
  }
  int64_t size_of(uint64_t handle) const override {
    auto it = sizes_.find(handle);
    return it == sizes_.end() ? 0 : it->second;
  }
  const std::string& last_oom_message() const override { return model_.last_oom_message(); }
  int64_t allocated() const override { return model_.stats().allocated; }
  int64_t reserved() const override { return model_.stats().reserved; }
  int64_t peak_allocated() const override { return model_.stats().peak_allocated; }
  int64_t peak_reserved() const override { return model_.stats().peak_reserved; }
  void reset_peaks() override { model_.reset_peak_stats(); }
  // As the CUDA tracker (cuda_trackers.cc): a memory fraction of the card's total; 1.0 clears it.
  void set_budget(int64_t bytes) override {
    if (bytes <= 0) {
      if (capped_) model_.set_memory_fraction(1.0);
      capped_ = false;
      return;
    }
    TORCH_CHECK(bytes <= total_, "budget of ", bytes, " bytes exceeds the card's memory (", total_,
                " bytes): a cap cannot add memory");
    model_.set_memory_fraction(static_cast<double>(bytes) / static_cast<double>(total_));
    capped_ = true;
  }
  int64_t alloc_retries() const override { return model_.stats().num_alloc_retries; }
  void empty_cache() override { model_.empty_cache(); }
  bool record_history() override { return true; }  // the model keeps its whole trace
  void write_snapshot(const std::string& path) override {
    std::ofstream(path, std::ios::binary) << memory_viz_pickle(model_);
  }

 private:
  int64_t total_;
  CachingAllocatorModel model_;
  std::unordered_map<uint64_t, int64_t> sizes_;
  bool capped_ = false;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(const EmulatedCard& card,
                                                 const std::string& alloc_conf) {
  if (card.cpu) return std::make_unique<ExactMemory>();
  // The point's allocator settings, else the environment's, as a PyTorch process reads them
  // (PYTORCH_ALLOC_CONF first, then PYTORCH_CUDA_ALLOC_CONF).
  std::string conf = alloc_conf;
  if (conf.empty())
    for (const char* var : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"})
      if (auto v = c10::utils::get_env(var); v && !v->empty()) {
        conf = *v;
        break;
      }
  auto parsed = parse_alloc_conf(conf);
  if (auto* error = std::get_if<std::string>(&parsed))
    TORCH_CHECK(false, "alloc_conf '", conf, "': ", *error);
  TORCH_CHECK(std::get<AllocatorSettings>(parsed).backend == "native", "alloc_conf '", conf,
              "': backend:cudaMallocAsync selects CUDA's stream-ordered allocator, which this "
              "model of the native caching allocator does not emulate");
  return std::make_unique<CachingMemory>(card, std::get<AllocatorSettings>(std::move(parsed)));
}

StreamGuard::StreamGuard(int stream) : prev_(std::exchange(tl_stream, stream)) {}
StreamGuard::~StreamGuard() { tl_stream = prev_; }
int current_stream() { return tl_stream; }

}  // namespace sweep::emu
