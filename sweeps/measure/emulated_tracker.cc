// The emulated device's tracker; see trackers.h. Every Meta storage is one allocation of the
// emulated device, in the order and at the moment PyTorch makes it (the note in
// shared/notes/meta-device-in-libtorch.md: an allocator registered for Meta sees every
// storage, and its deleter runs when the last tensor holding the storage dies). The tracker
// replays them through DeviceMemory: the card's caching allocator (emulated_allocator.h), or
// exact counting for the CPU. Its data pointers are null (Meta storages hold no data); the
// context carries the allocation's handle for the free.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "sweeps/measure/emulated_allocator.h"
#include "sweeps/measure/emulated_card.h"
#include "sweeps/measure/trackers.h"

namespace sweep {
namespace {

class EmulatedAllocator final : public c10::Allocator {
 public:
  static EmulatedAllocator& instance() {
    // Never destroyed: storages that live to the process's end (cuBLAS's workspaces) are freed
    // into it during static destruction, or never.
    static auto* a = new EmulatedAllocator;
    return *a;
  }
  // A new device for a new burst (one per worker process; tests run several in one process).
  void reset(std::unique_ptr<emu::DeviceMemory> mem) {
    std::lock_guard lock(mu_);
    mem_ = std::move(mem);
    extra_owners_.clear();
    peak_seen_ = 0;
    gap_at_oom_ = -1;
    oom_snapshot_written_ = false;
  }

  c10::DataPtr allocate(size_t n) override {
    // Zero bytes: no block (CUDACachingAllocator allocates nothing for size 0).
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::kMeta)};
    if (auto reused = take_reuse(n)) return std::move(*reused);
    // Host scope: host memory on a real GPU (the model's build before it moves, an offloaded
    // optimizer's state), counted as the host's, never the device's. Unified scope: a paged
    // optimizer's state, outside the card's allocator. The context carries the size, tagged in
    // its two lowest bits; a device allocation's carries its handle shifted.
    if (in_host_scope()) {
      count_host_bytes(static_cast<int64_t>(n));
      return {nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(n) << 2 | kHostTag),
              &release, c10::Device(c10::kMeta)};
    }
    if (in_unified_scope()) {
      unified_ += static_cast<int64_t>(n);
      return {nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(n) << 2 | kUnifiedTag),
              &release, c10::Device(c10::kMeta)};
    }
    std::lock_guard lock(mu_);
    TORCH_CHECK(mem_, "the emulated device is not set up (make_emulated_tracker)");
    const auto handle = mem_->malloc(n);
    if (!handle) {
      gap_at_oom_ = mem_->reserved() - mem_->allocated();
      // As the CUDA tracker's out-of-memory observer: the segments that filled the card, taken
      // before the exception unwinds the step.
      if (!oom_snapshot_.empty()) {
        mem_->write_snapshot(oom_snapshot_);
        oom_snapshot_written_ = true;
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, mem_->last_oom_message());
    }
    if (FILE* t = trace()) std::fprintf(t, "%zu\n", n);
    if (mem_->allocated() > peak_seen_) {
      peak_seen_ = mem_->allocated();
      if (ledger_) at_peak_ = {ledger_->weights.load(), ledger_->grads.load(), ledger_->optimizer.load()};
    }
    return {nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(*handle) << 2), &release,
            c10::Device(c10::kMeta)};
  }
  // reuse_for_next_allocation: a device block taken over by the next allocation of its size
  // on this thread (one owner more), or nothing.
  std::optional<c10::DataPtr> take_reuse(size_t n) {
    const auto [ctx, bytes] = std::exchange(t_reuse, Reuse{});
    const auto tagged = reinterpret_cast<uintptr_t>(ctx);
    if (!ctx || (tagged & 3) != 0 || bytes != static_cast<int64_t>(n)) return std::nullopt;
    std::lock_guard lock(mu_);
    ++extra_owners_[tagged >> 2];
    return c10::DataPtr{nullptr, ctx, &release, c10::Device(c10::kMeta)};
  }
  static void release(void* ctx) {
    if (!ctx) return;
    const auto tagged = reinterpret_cast<uintptr_t>(ctx);
    const auto value = tagged >> 2;
    auto& a = instance();
    switch (tagged & 3) {
      case kHostTag: count_host_bytes(-static_cast<int64_t>(value)); return;
      case kUnifiedTag: a.unified_ -= static_cast<int64_t>(value); return;
      default: break;
    }
    std::lock_guard lock(a.mu_);
    const auto handle = static_cast<uint64_t>(value);
    if (auto it = a.extra_owners_.find(handle); it != a.extra_owners_.end()) {
      if (--it->second == 0) a.extra_owners_.erase(it);
      return;  // the block lives on in the storage that took it over
    }
    if (FILE* t = trace()) std::fprintf(t, "-%lld\n", static_cast<long long>(a.mem_->size_of(handle)));
    a.mem_->free(handle);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {}

  // SWEEP_TRACE_ALLOC=FILE, as on the CPU (cpu_trackers.cc): each allocation and free.
  static FILE* trace() {
    static FILE* f = [] {
      const char* path = std::getenv("SWEEP_TRACE_ALLOC");
      return path && *path ? std::fopen(path, "w") : nullptr;
    }();
    return f;
  }

  static constexpr uintptr_t kHostTag = 1, kUnifiedTag = 2;
  struct Reuse {
    void* ctx = nullptr;  // the storage's context: its block's handle, tagged
    int64_t bytes = 0;
  };
  static thread_local Reuse t_reuse;
  std::map<uint64_t, int> extra_owners_;  // blocks held by more than one storage, beyond the first
  std::mutex mu_;
  std::unique_ptr<emu::DeviceMemory> mem_;
  std::atomic<int64_t> unified_{0};  // bytes made in UnifiedScopes and alive
  int64_t peak_seen_ = 0;
  std::atomic<int64_t> gap_at_oom_{-1};  // -1: no failure since forget_oom()
  const Ledger* ledger_ = nullptr;
  Breakdown at_peak_;
  std::string oom_snapshot_;  // PREFIX.oom.pickle while history is recorded
  bool oom_snapshot_written_ = false;
};

class EmulatedTracker final : public MemoryTracker {
  template <class F>
  auto locked(F&& f) {
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    return f(*a.mem_);
  }

 public:
  int64_t allocated() override { return locked([](auto& m) { return m.allocated(); }); }
  int64_t reserved() override { return locked([](auto& m) { return m.reserved(); }); }
  int64_t peak_allocated() override { return locked([](auto& m) { return m.peak_allocated(); }); }
  int64_t peak_reserved() override { return locked([](auto& m) { return m.peak_reserved(); }); }
  void reset_peaks() override {
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    a.mem_->reset_peaks();
    a.peak_seen_ = a.mem_->allocated();
    a.at_peak_ = read_ledger();
  }
  void set_ledger(const Ledger* ledger) override {
    MemoryTracker::set_ledger(ledger);
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    a.ledger_ = ledger;
  }
  Breakdown peak_breakdown() override {
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    return a.at_peak_;
  }
  // What the card would show in use: the context, what the allocator reserves and the unified
  // memory resident beside them (the driver evicts it to the host where the allocator needs
  // the room, so at most what the card has left).
  int64_t device_used() override {
    const int64_t held = reserved() + context_;
    return std::max(held, std::min(held + unified_allocated(), memory_));
  }
  void set_budget(int64_t bytes) override {
    locked([&](auto& m) { m.set_budget(bytes); return 0; });
  }
  std::string allocator_settings() override { return settings_; }
  int64_t alloc_retries() override { return locked([](auto& m) { return m.alloc_retries(); }); }
  std::optional<int64_t> gap_at_oom() override {
    const int64_t gap = EmulatedAllocator::instance().gap_at_oom_.load();
    return gap < 0 ? std::nullopt : std::optional<int64_t>(gap);
  }
  void forget_oom() override {
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    a.gap_at_oom_ = -1;
    if (a.oom_snapshot_written_) std::remove(a.oom_snapshot_.c_str());
    a.oom_snapshot_written_ = false;
  }
  void empty_cache() override {
    locked([](auto& m) { m.empty_cache(); return 0; });
  }
  bool record_history(const std::string& prefix) override {
    auto& a = EmulatedAllocator::instance();
    std::lock_guard lock(a.mu_);
    if (!a.mem_->record_history()) return false;
    a.oom_snapshot_ = prefix + ".oom.pickle";
    return true;
  }
  void write_snapshot(const std::string& path) override {
    locked([&](auto& m) { m.write_snapshot(path); return 0; });
  }

  int64_t context_ = 0, memory_ = 0;
  std::string settings_;

};

thread_local bool t_unified_scope = false;

}  // namespace

thread_local EmulatedAllocator::Reuse EmulatedAllocator::t_reuse;

void reuse_for_next_allocation(const c10::Storage& storage, int64_t bytes) {
  EmulatedAllocator::t_reuse = {storage ? storage.data_ptr().get_context() : nullptr, bytes};
}

bool in_unified_scope() { return t_unified_scope; }
UnifiedScope::UnifiedScope() : outer_(!t_unified_scope) { t_unified_scope = true; }
UnifiedScope::~UnifiedScope() {
  if (outer_) t_unified_scope = false;
}
int64_t unified_allocated() { return EmulatedAllocator::instance().unified_.load(); }

std::unique_ptr<MemoryTracker> make_emulated_tracker(const EmulatedCard& card,
                                                     const std::string& alloc_conf) {
  static std::once_flag once;
  // Above c10's own Meta allocator (priority 0), so every Meta storage from now on is ours.
  std::call_once(once, [] { c10::SetAllocator(c10::DeviceType::Meta, &EmulatedAllocator::instance(), 100); });
  EmulatedAllocator::instance().reset(emu::make_device_memory(card, alloc_conf));
  auto t = std::make_unique<EmulatedTracker>();
  t->context_ = card.cpu ? 0 : card.context_bytes;
  t->memory_ = card.memory_bytes;
  t->settings_ = card.cpu ? "" : alloc_conf;
  return t;
}

}  // namespace sweep
