// The emulated device (device: emulated), worker side: sets the process up so that the
// training burst runs on Meta tensors that stand for a CUDA card's tensors (or, for the
// differential tests, the CPU's). No data exists and nothing is computed; every storage is
// still allocated and freed, in PyTorch's order, through the emulated tracker's allocator
// (sweeps/measure/trackers.h). What this adds to LibTorch's Meta device:
// - the kernels Meta lacks in C++ (meta_kernels.cc), each allocating what the emulated
//   device's kernel allocates;
// - the emulated device's autocast (autocast.cc): Meta tensors are not autocast-eligible,
//   so its op lists are applied here;
// - its attention backend choice (sdpa_cuda.cc for CUDA; the CPU's here);
// - cuBLAS's and cuBLASLt's workspaces (cublas.cc);
// - the model's build on Meta, and its move to the device (below).
#pragma once

#include <torch/torch.h>

#include "sweeps/measure/emulated_card.h"

namespace sweep::emu {

// Once per process, before the first tensor of the burst: the card Meta tensors stand for.
void start_emulation(const EmulatedCard& card);
const EmulatedCard& emulated_card();

// While alive on this thread, factory functions that would make a CPU tensor (an explicit
// CPU device or none) make a Meta tensor: the model's build, whose parameters then exist only
// as sizes. Tensors made with another device are left alone.
class MetaFactories {
 public:
  MetaFactories();
  ~MetaFactories();
  MetaFactories(const MetaFactories&) = delete;
  MetaFactories& operator=(const MetaFactories&) = delete;

 private:
  bool prev_;
};

// Module.to(device) for a model built in a HostScope (its storages not counted, as a model
// built on the host before it moves to a GPU): allocates each parameter and buffer anew on the
// emulated device, in the order torch::nn::Module::to visits them (children first, then the
// module's own parameters, then its buffers), and frees the host copy.
void move_to_device(torch::nn::Module& module);

// The autograd engine's thread is not the caller's on CUDA, and has a cuBLAS handle (and so a
// workspace) of its own. Meta's backward runs on the calling thread: this marks it.
class BackwardThread {
 public:
  BackwardThread();
  ~BackwardThread();
  BackwardThread(const BackwardThread&) = delete;
  BackwardThread& operator=(const BackwardThread&) = delete;

 private:
  bool prev_;
};
bool on_backward_thread();

// While alive, registering a kernel over one PyTorch already has prints nothing (it warns once
// otherwise): the emulated device replaces those on purpose, each saying why where it is made.
class QuietOverrides {
 public:
  QuietOverrides();
  ~QuietOverrides();
  QuietOverrides(const QuietOverrides&) = delete;
  QuietOverrides& operator=(const QuietOverrides&) = delete;

 private:
  std::unique_ptr<c10::WarningHandler> silent_;
  std::unique_ptr<c10::WarningUtils::WarningHandlerGuard> guard_;
};

// Kernel registration for the emulated device (each once per process).
void register_meta_kernels();
void register_autocast(bool cuda_lists);
void register_cublas_workspaces();
// Applies (or stops applying) the emulated autocast on this thread; AutocastScope calls it.
void set_emulated_autocast(bool enabled, at::ScalarType dtype);
// Drops the cast weights, as at::autocast::clear_cache when the outermost region exits.
void clear_autocast_cache();

}  // namespace sweep::emu
