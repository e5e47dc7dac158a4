// The caching-allocator model's state as a memory snapshot: the pickle torch 2.11 writes for
// torch.cuda.memory._dump_snapshot() / torch::cuda::_memory_snapshot_pickled(), so the
// emulated device's memory can be read with python's pickle and dropped on
// https://pytorch.org/memory_viz like a real card's. The header is torch-free; the .cc pickles
// with LibTorch's own Pickler, as torch does.
#pragma once

#include <string>

#include "sweeps/measure/caching_allocator.h"

namespace sweep::emu {

// A dict with "segments", "device_traces" (one device), "allocator_settings" and
// "external_annotations", keyed and typed as torch/csrc/cuda/memory_snapshot.cpp
// (_memory_snapshot_pickled, 2.11) writes them. The model records no Python stacks, so every
// "frames" is an empty list; trace entries carry one too (torch writes it only when stacks were
// recorded), so that viewers that expect it find it.
std::string memory_viz_pickle(const CachingAllocatorModel& model);

}  // namespace sweep::emu
