// The emulated device's memory; see emulated_allocator.h.
#include "sweeps/measure/emulated_allocator.h"

#include <algorithm>
#include <unordered_map>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {
namespace {

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

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(const EmulatedCard& card,
                                                 const std::string& alloc_conf) {
  (void)alloc_conf;
  if (card.cpu) return std::make_unique<ExactMemory>();
  return std::make_unique<ExactMemory>();  // replaced by the caching allocator model
}

}  // namespace sweep::emu
