// CPU trackers: a steady-clock timer and the tracking allocator (see trackers.h). Each block
// carries a 64-byte header holding its size and whether it is host memory (made in a
// HostScope), so frees are exact without a lookup table; data and context are the same
// pointer so that raw_allocate()/raw_deleter() keep working for code that uses them.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <mutex>
#include <unistd.h>

#include "sweeps/measure/trackers.h"

namespace sweep {
namespace {

constexpr std::size_t kHeader = 64;  // keeps c10's 64-byte alignment for the data
struct Header {
  std::size_t size;
  bool host;  // made in a HostScope: counted as host memory, never as the device's
};
static_assert(sizeof(Header) <= kHeader);

thread_local bool t_host_scope = false;

class TrackingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_block, c10::Device(c10::kCPU)};
    if (t_host_scope) return allocate_host(n);
    const auto need = static_cast<int64_t>(n);
    const int64_t now = current_.fetch_add(need) + need;
    const int64_t budget = budget_.load();
    if (budget > 0 && now > budget) {
      current_.fetch_sub(need);
      gap_at_oom_.store(0);  // no cache on the CPU: reserved == allocated
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU budget exceeded: tried to allocate ", n,
                       " bytes with ", now - need, " bytes allocated and a budget of ", budget,
                       " bytes");
    }
    int64_t peak = peak_.load();
    while (now > peak) {
      if (peak_.compare_exchange_weak(peak, now)) {
        // A new peak: what the ledger says the memory holds at this moment.
        if (const Ledger* l = ledger_.load()) {
          at_peak_weights_.store(l->weights.load());
          at_peak_grads_.store(l->grads.load());
          at_peak_optimizer_.store(l->optimizer.load());
        }
        break;
      }
    }
    if (FILE* t = trace()) std::fprintf(t, "%zu\n", n);
    return block(n, false);
  }
  // Host memory: no budget (the device's), no device peak, not in the allocation trace.
  c10::DataPtr allocate_host(size_t n) {
    count_host(static_cast<int64_t>(n));
    return block(n, true);
  }
  void count_host(int64_t n) {
    const int64_t now = host_current_.fetch_add(n) + n;
    int64_t peak = host_peak_.load();
    while (now > peak && !host_peak_.compare_exchange_weak(peak, now)) {
    }
  }
  static c10::DataPtr block(size_t n, bool host) {
    auto* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    *reinterpret_cast<Header*>(base) = {n, host};
    void* data = base + kHeader;
    return {data, data, &free_block, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static void free_block(void* data) {
    if (!data) return;
    char* base = static_cast<char*>(data) - kHeader;
    const Header h = *reinterpret_cast<Header*>(base);
    if (h.host) {
      instance().host_current_.fetch_sub(static_cast<int64_t>(h.size));
    } else {
      if (FILE* t = trace()) std::fprintf(t, "-%zu\n", h.size);
      instance().current_.fetch_sub(static_cast<int64_t>(h.size));
    }
    c10::free_cpu(base);
  }
  // SWEEP_TRACE_ALLOC=FILE: every allocation and free as a signed size, one a line, to compare
  // with the `[memory]` events of tests/fixtures/make_memory_fixtures.py --trace (a debugging
  // aid for fidelity work: the first line where the two differ is the first op that differs).
  static FILE* trace() {
    static FILE* f = [] {
      const char* path = std::getenv("SWEEP_TRACE_ALLOC");
      return path && *path ? std::fopen(path, "w") : nullptr;
    }();
    return f;
  }
  static TrackingCpuAllocator& instance() {
    static TrackingCpuAllocator a;
    return a;
  }

  std::atomic<int64_t> current_{0}, peak_{0}, budget_{0};
  std::atomic<int64_t> gap_at_oom_{-1};  // -1: no failure since forget_oom()
  std::atomic<int64_t> host_current_{0}, host_peak_{0};
  std::atomic<const Ledger*> ledger_{nullptr};
  std::atomic<int64_t> at_peak_weights_{0}, at_peak_grads_{0}, at_peak_optimizer_{0};
};

class CpuTracker final : public MemoryTracker {
 public:
  int64_t allocated() override { return a().current_.load(); }
  int64_t reserved() override { return allocated(); }
  int64_t peak_allocated() override { return a().peak_.load(); }
  int64_t peak_reserved() override { return peak_allocated(); }
  void reset_peaks() override {
    a().peak_.store(a().current_.load());
    const Breakdown now = read_ledger();
    a().at_peak_weights_.store(now.weights);
    a().at_peak_grads_.store(now.grads);
    a().at_peak_optimizer_.store(now.optimizer);
  }
  void set_ledger(const Ledger* ledger) override {
    MemoryTracker::set_ledger(ledger);
    a().ledger_.store(ledger);
  }
  Breakdown peak_breakdown() override {
    return {a().at_peak_weights_.load(), a().at_peak_grads_.load(), a().at_peak_optimizer_.load()};
  }
  int64_t device_used() override {
    long pages = 0, resident = 0;
    std::ifstream("/proc/self/statm") >> pages >> resident;
    return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  }
  void set_budget(int64_t bytes) override { a().budget_.store(bytes); }
  std::optional<int64_t> gap_at_oom() override {
    const int64_t gap = a().gap_at_oom_.load();
    return gap < 0 ? std::nullopt : std::optional<int64_t>(gap);
  }
  void forget_oom() override { a().gap_at_oom_.store(-1); }

 private:
  static TrackingCpuAllocator& a() { return TrackingCpuAllocator::instance(); }
};

}  // namespace

void trace_alloc_note(const std::string& note) {
  if (FILE* t = TrackingCpuAllocator::trace()) std::fprintf(t, "# %s\n", note.c_str());
}

bool in_host_scope() { return t_host_scope; }

HostScope::HostScope() : outer_(!t_host_scope) { t_host_scope = true; }
HostScope::~HostScope() {
  if (outer_) t_host_scope = false;
}

void count_host_bytes(int64_t delta) { TrackingCpuAllocator::instance().count_host(delta); }

int64_t host_allocated() { return TrackingCpuAllocator::instance().host_current_.load(); }
int64_t host_peak() { return TrackingCpuAllocator::instance().host_peak_.load(); }
void reset_host_peak() {
  auto& a = TrackingCpuAllocator::instance();
  a.host_peak_.store(a.host_current_.load());
}

void install_cpu_tracking() {
  static std::once_flag once;
  // Priority above c10's default (0) so that every CPU tensor from now on is tracked.
  std::call_once(once, [] { c10::SetCPUAllocator(&TrackingCpuAllocator::instance(), 100); });
}

std::unique_ptr<MemoryTracker> make_cpu_tracker() {
  install_cpu_tracking();
  return std::make_unique<CpuTracker>();
}

std::unique_ptr<StepTimer> make_cpu_timer() {
  class CpuTimer final : public StepTimer {
   public:
    void start() override { t0_ = std::chrono::steady_clock::now(); }
    double stop_seconds() override {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }

   private:
    std::chrono::steady_clock::time_point t0_;
  };
  return std::make_unique<CpuTimer>();
}

}  // namespace sweep
