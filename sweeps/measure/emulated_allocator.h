// The emulated device's memory: what the tracker replays each storage's allocation and free
// through. For a CUDA card, the model of torch 2.11's CUDA caching allocator
// (caching_allocator.h) against the card's memory less its CUDA context; for the CPU (the
// differential tests), exact counting, as the CPU tracking allocator counts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A storage of n > 0 bytes: a handle (never 0) for free(), or nullopt when the device is
  // out of memory (last_oom_message() then says what PyTorch's error would).
  virtual std::optional<uint64_t> malloc(std::size_t n) = 0;
  virtual void free(uint64_t handle) = 0;
  virtual int64_t size_of(uint64_t handle) const = 0;  // the bytes asked for
  virtual const std::string& last_oom_message() const = 0;
  virtual int64_t allocated() const = 0;  // bytes of live blocks (CUDA: whole blocks)
  virtual int64_t reserved() const = 0;   // bytes the allocator holds from the device
  virtual int64_t peak_allocated() const = 0;
  virtual int64_t peak_reserved() const = 0;
  virtual void reset_peaks() = 0;
  // A cap on what the allocator may hold (0: none); CUDA: a memory fraction of the card.
  virtual void set_budget(int64_t bytes) = 0;
  virtual int64_t alloc_retries() const { return 0; }
  virtual void empty_cache() {}
  // Allocator history for a memory_viz snapshot; false where there is none (the CPU).
  virtual bool record_history() { return false; }
  virtual void write_snapshot(const std::string& /*path*/) {}
};

std::unique_ptr<DeviceMemory> make_device_memory(const EmulatedCard& card,
                                                 const std::string& alloc_conf);

// The emulated card's current stream on this thread, as CUDAStreamGuard sets CUDA's: what a
// storage allocated now is allocated on (0: the default stream). The caching allocator hands a
// stream's cached blocks to that stream alone.
class StreamGuard {
 public:
  explicit StreamGuard(int stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int prev_;
};
int current_stream();

}  // namespace sweep::emu
