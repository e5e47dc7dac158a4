// TRL 1.16's OffloadActivations (trl/models/activation_offloading.py) with use_streams=True,
// transcribed pack by pack; see activation_offload.h. Each function names the Python it
// follows. Python dicts iterate in insertion order: the stashes are vectors in that order.
#include "sweeps/worker/activation_offload.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/llvmMathExtras.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "models/emulation.h"
#include "sweeps/measure/emulated_allocator.h"
#include "sweeps/measure/trackers.h"
#include "sweeps/worker/checkpoint.h"
#include "sweeps/worker/offload.h"

namespace sweep {
namespace {

constexpr int64_t kMinOffloadSize = 1024;  // min_offload_size
constexpr int64_t kMaxFwdStashSize = 5;    // max_fwd_stash_size
constexpr int kSecondStream = 1;           // the emulated card's `s1`

// _get_unique_tensor_key: (storage data_ptr + storage_offset, dtype). Among live storages that
// is (storage, offset, dtype): an offset in elements stays inside its storage's bytes, so two
// storages never meet; Meta tensors (the emulated card) have no data pointers, only storages.
using StorageKey = std::tuple<const c10::StorageImpl*, int64_t, at::ScalarType>;
StorageKey key_of(const at::Tensor& t) {
  return {t.storage().unsafeGetStorageImpl(), t.storage_offset(), t.scalar_type()};
}

// A CUDA event, or nothing on an emulated card (no streams: every event has completed).
using Event = std::shared_ptr<at::cuda::CUDAEvent>;

// A Python dict keyed by tensor id, iterated in insertion order.
template <class V>
class IdDict {
 public:
  bool contains(int64_t id) const { return find(id) != items_.end(); }
  V& at(int64_t id) { return find(id)->second; }
  void set(int64_t id, V v) {
    if (auto it = find(id); it != items_.end())
      it->second = std::move(v);
    else
      items_.emplace_back(id, std::move(v));
  }
  void erase(int64_t id) {
    if (auto it = find(id); it != items_.end()) items_.erase(it);
  }
  std::vector<int64_t> keys() const {
    std::vector<int64_t> k;
    for (const auto& [id, v] : items_) k.push_back(id);
    return k;
  }
  void clear() { items_.clear(); }

 private:
  using Items = std::vector<std::pair<int64_t, V>>;
  typename Items::iterator find(int64_t id) {
    return std::find_if(items_.begin(), items_.end(), [&](const auto& p) { return p.first == id; });
  }
  typename Items::const_iterator find(int64_t id) const {
    return std::find_if(items_.begin(), items_.end(), [&](const auto& p) { return p.first == id; });
  }
  Items items_;
};

// The CUDA host allocator's pinned blocks on an emulated card: each request rounded up to a
// power of two, freed blocks cached per size and reused for that size only
// (ATen/core/CachingHostAllocator.h allocate: PowerOf2Ceil, free_list_ by size). What it
// holds is, per size, the most blocks ever in use at once.
class PinnedBlocks {
 public:
  void allocate(int64_t bytes) {
    auto& [live, made] = sizes_[round(bytes)];
    made = std::max(made, ++live);
  }
  void free(int64_t bytes) { --sizes_[round(bytes)].first; }
  int64_t held() const {
    int64_t n = 0;
    for (const auto& [size, counts] : sizes_) n += size * counts.second;
    return n;
  }

 private:
  static int64_t round(int64_t bytes) {
    return bytes > 0 ? static_cast<int64_t>(c10::llvm::PowerOf2Ceil(static_cast<uint64_t>(bytes)))
                     : 0;
  }
  std::map<int64_t, std::pair<int64_t, int64_t>> sizes_;  // size -> (in use, made)
};

// The offloader whose Scope is innermost on this thread (saved_tensors_hooks' stack).
ActivationOffload*& tl_active_offload() {
  thread_local ActivationOffload* active = nullptr;
  return active;
}

}  // namespace

struct ActivationOffload::State : std::enable_shared_from_this<State> {
  // self.tracker: tensor_id => (tensor, modified, stride, storage_offset, shape). On an
  // emulated card the host copy is its sizes only (`host_sizes`, `host_strides`).
  struct Tracked {
    at::Tensor tensor;  // the card's tensor kept, or the host copy (CUDA)
    bool modified = false;
    std::optional<std::vector<int64_t>> stride;
    int64_t storage_offset = 0;
    std::vector<int64_t> shape;
    std::vector<int64_t> host_sizes, host_strides;  // emulated: the host copy's layout
    at::TensorOptions options;                      // emulated: the card tensor's
    int64_t host_bytes = 0;                         // emulated: the pinned request
  };

  MemoryTracker* mem = nullptr;
  bool cuda = false;  // a real card (streams, events, pinned copies); else an emulated one
  std::optional<c10::cuda::CUDAStream> s1;
  std::unordered_map<int64_t, Tracked> tracker;
  int64_t tensor_id = 0;
  // (TRL's is_first_forward_pass only gates a warning about the host's free memory.)
  bool is_first_forward_call = true, is_first_backward_call = true;
  std::map<StorageKey, int64_t> storage_to_tensor_id;
  std::unordered_map<int64_t, StorageKey> storage_key_by_tensor_id;
  std::set<const c10::StorageImpl*> param_storages;
  IdDict<std::pair<at::Tensor, Event>> fwd_stash;
  IdDict<at::Tensor> bwd_tensor_stash;
  IdDict<Event> bwd_ev_stash;
  int curr_graph_id = -1;
  std::shared_ptr<torch::autograd::Node> curr_autograd_node;
  PinnedBlocks pinned;
  int64_t pinned_base = 0;

  // --- streams and events: no-ops on an emulated card ---
  std::optional<c10::cuda::CUDAStream> s0() const {  // the compute stream, queried live
    if (!cuda) return std::nullopt;
    return c10::cuda::getCurrentCUDAStream();
  }
  Event record_event(const std::optional<c10::cuda::CUDAStream>& s) const {
    if (!s) return nullptr;
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(*s);
    return ev;
  }
  static void wait_event(const std::optional<c10::cuda::CUDAStream>& s, const Event& ev) {
    if (s && ev) ev->block(*s);
  }
  void wait_stream(const std::optional<c10::cuda::CUDAStream>& waiter,
                   const std::optional<c10::cuda::CUDAStream>& on) const {
    if (waiter && on) wait_event(waiter, record_event(on));
  }

  void track_storage_key(const StorageKey& key, int64_t id) {
    storage_to_tensor_id[key] = id;
    storage_key_by_tensor_id[id] = key;
  }
  void release_storage_key(int64_t id) {
    auto it = storage_key_by_tensor_id.find(id);
    if (it == storage_key_by_tensor_id.end()) return;
    const StorageKey key = it->second;
    storage_key_by_tensor_id.erase(it);
    if (auto s = storage_to_tensor_id.find(key); s != storage_to_tensor_id.end() && s->second == id)
      storage_to_tensor_id.erase(s);
  }
  // del self.tracker[id]: the host copy goes back to the host allocator.
  void erase_tracked(int64_t id) {
    auto it = tracker.find(id);
    if (it == tracker.end()) return;
    if (it->second.host_bytes > 0) pinned.free(it->second.host_bytes);
    tracker.erase(it);
  }
  void clear_tracker() {
    for (const auto& [id, t] : tracker)
      if (t.host_bytes > 0) pinned.free(t.host_bytes);
    tracker.clear();
  }
  bool on_accelerator(const at::Tensor& t) const {
    return cuda ? t.is_cuda() : models::acts_cuda(t);
  }

  // pack_tensor: the forward saves `activation`; returns its id.
  int64_t pack(at::Tensor activation) {
    if (is_first_forward_call) {
      TORCH_CHECK(tracker.empty(), "Backward pass should have cleared tracker of all tensors");
      is_first_forward_call = false;
      is_first_backward_call = true;
      storage_to_tensor_id.clear();
      storage_key_by_tensor_id.clear();
    }
    const int64_t num_bytes = static_cast<int64_t>(activation.element_size()) * activation.numel();
    const int64_t id = ++tensor_id;
    // Deduplication: a storage already offloaded and still stashed stays on the card.
    const StorageKey storage_key = key_of(activation);
    if (storage_to_tensor_id.count(storage_key)) {
      tracker[id] = Tracked{.tensor = activation};
      track_storage_key(storage_key, id);
      return id;
    }
    // Kept where it is: off the card, small, or a parameter's storage (TRL's isinstance checks
    // for nn.Parameter and the storage check both see a saved parameter; transformers' buffers
    // are plain tensors, not nn.Buffer, and there are no TorchAO fp8 tensors here).
    if (!on_accelerator(activation) || num_bytes < kMinOffloadSize ||
        param_storages.count(activation.storage().unsafeGetStorageImpl())) {
      tracker[id] = Tracked{.tensor = activation};
      return id;
    }
    // A broadcast view (a zero stride) copies its storage; any other view that is not the
    // contiguous start of its storage is made so first, on the compute stream.
    const auto strides = activation.strides();
    const bool has_broadcast = std::find(strides.begin(), strides.end(), 0) != strides.end();
    if (!has_broadcast && (!activation.is_contiguous() || activation.storage_offset() != 0))
      activation = activation.storage_offset() != 0 ? activation.clone(at::MemoryFormat::Contiguous)
                                                    : activation.contiguous();
    // Sync back and drop what was offloaded long enough ago.
    for (const int64_t old : fwd_stash.keys()) {
      if (old > id - kMaxFwdStashSize) break;
      wait_event(s0(), fwd_stash.at(old).second);
      fwd_stash.erase(old);
      release_storage_key(old);
    }
    wait_stream(s1, s0());
    Tracked t{.modified = true,
              .stride = activation.strides().vec(),
              .storage_offset = activation.storage_offset(),
              .shape = activation.sizes().vec()};
    copy_to_host(activation, has_broadcast, t);
    tracker[id] = std::move(t);
    fwd_stash.set(id, {activation, record_event(s1)});
    track_storage_key(storage_key, id);
    return id;
  }

  // The host copy, on the second stream: the storage of a broadcast view, else the tensor.
  void copy_to_host(const at::Tensor& activation, bool has_broadcast, Tracked& t) {
    const int64_t storage_elems = static_cast<int64_t>(activation.storage().nbytes()) /
                                  static_cast<int64_t>(activation.element_size());
    if (!cuda) {
      t.host_sizes = has_broadcast ? std::vector<int64_t>{storage_elems} : activation.sizes().vec();
      t.host_strides = has_broadcast ? std::vector<int64_t>{1} : activation.strides().vec();
      t.options = activation.options();
      t.host_bytes = (has_broadcast ? storage_elems : activation.numel()) *
                     static_cast<int64_t>(activation.element_size());
      pinned.allocate(t.host_bytes);
      return;
    }
    c10::cuda::CUDAStreamGuard guard(*s1);
    const auto pinned_options = activation.options().device(torch::kCPU).pinned_memory(true);
    if (has_broadcast) {
      auto host = torch::empty({storage_elems}, pinned_options);
      host.copy_(activation.as_strided({storage_elems}, {1}, 0), /*non_blocking=*/true);
      t.tensor = host;
    } else {
      auto host = torch::empty_like(activation, pinned_options);
      host.copy_(activation, /*non_blocking=*/true);
      t.tensor = host;
    }
  }

  // The host copy back on the card, on the second stream, in its original layout.
  at::Tensor bring_back(const Tracked& t, at::Tensor& accelerator_tensor) {
    if (cuda) {
      c10::cuda::CUDAStreamGuard guard(*s1);
      accelerator_tensor =
          t.tensor.to(torch::Device(torch::kCUDA, s1->device_index()), /*non_blocking=*/true);
    } else {
      emu::StreamGuard guard(kSecondStream);
      accelerator_tensor = at::empty_strided(t.host_sizes, t.host_strides, t.options);
    }
    return t.stride ? accelerator_tensor.as_strided(t.shape, *t.stride, t.storage_offset)
                    : accelerator_tensor;
  }

  // unpack_tensor_with_streams: backward needs tensor `id`.
  at::Tensor unpack(int64_t id) {
    if (is_first_backward_call) {
      curr_graph_id = torch::autograd::get_current_graph_task_id();
      // wait_and_del_remaining_references, at the end of this backward.
      std::weak_ptr<State> weak = weak_from_this();
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        auto self = weak.lock();
        if (!self) return;
        for (const int64_t k : self->bwd_tensor_stash.keys()) {
          if (self->bwd_ev_stash.contains(k)) wait_event(self->s1, self->bwd_ev_stash.at(k));
          self->bwd_tensor_stash.erase(k);
        }
      });
      is_first_backward_call = false;
    }
    auto it = tracker.find(id);
    TORCH_CHECK(it != tracker.end(), "untracked tensor with id ", id);
    at::Tensor maybe_accelerator_tensor = it->second.tensor;
    if (it->second.modified) {
      const int graph_id = torch::autograd::get_current_graph_task_id();
      auto node = torch::autograd::get_current_node();
      std::vector<int64_t> prev_node_ids;
      // On a new node, the previous node's tensors are freed once this one has run.
      if (graph_id == curr_graph_id && curr_autograd_node != node) {
        curr_autograd_node = node;
        prev_node_ids = bwd_tensor_stash.keys();
      }
      bool brought_back_from_cpu = true;
      int64_t storage_refcount = 0;
      if (fwd_stash.contains(id)) {
        maybe_accelerator_tensor = fwd_stash.at(id).first;
        brought_back_from_cpu = false;
      } else {
        at::Tensor accelerator_tensor;
        maybe_accelerator_tensor = bring_back(it->second, accelerator_tensor);
        wait_stream(s0(), s1);
        bwd_tensor_stash.set(id, maybe_accelerator_tensor);
        // The uses of the storage now (the copy and its strided view, as in Python): more when
        // the node has run means a view of it lives on, so it may not be freed with the node.
        storage_refcount = static_cast<int64_t>(maybe_accelerator_tensor.storage().use_count());
      }
      TORCH_CHECK(node, "activation offloading: a saved tensor unpacked outside backward");
      node->add_post_hook(std::make_unique<NodeDone>(shared_from_this(), id, brought_back_from_cpu,
                                                     storage_refcount, std::move(prev_node_ids)));
    }
    erase_tracked(id);
    release_storage_key(id);
    if (tracker.empty()) is_first_forward_call = true;
    return maybe_accelerator_tensor;
  }

  // hook(outputs, inputs): registered on the node that unpacked a tensor, run when it is done.
  class NodeDone final : public torch::autograd::FunctionPostHook {
   public:
    NodeDone(std::shared_ptr<State> s, int64_t id, bool brought_back, int64_t storage_refcount,
             std::vector<int64_t> prev_node_ids)
        : s_(std::move(s)),
          id_(id),
          brought_back_(brought_back),
          storage_refcount_(storage_refcount),
          prev_node_ids_(std::move(prev_node_ids)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      State& s = *s_;
      if (brought_back_ && s.bwd_tensor_stash.contains(id_)) {
        const at::Tensor unpacked = s.bwd_tensor_stash.at(id_);
        if (static_cast<int64_t>(unpacked.storage().use_count()) > storage_refcount_) {
          // record_stream: freed when its last use is gone and the compute stream is past it.
          if (s.cuda) unpacked.record_stream(*s.s0());
          s.bwd_tensor_stash.erase(id_);
        } else {
          s.bwd_ev_stash.set(id_, s.record_event(s.s0()));
        }
      }
      // Whatever the forward still stashed goes now: this is backward.
      for (const int64_t k : s.fwd_stash.keys()) {
        wait_event(s.s0(), s.fwd_stash.at(k).second);
        s.fwd_stash.erase(k);
        s.release_storage_key(k);
      }
      // The previous node's tensors, once this node's copies are done.
      for (const int64_t k : prev_node_ids_) {
        if (s.bwd_ev_stash.contains(k)) {
          wait_event(s.s1, s.bwd_ev_stash.at(k));
          s.bwd_ev_stash.erase(k);
        }
        s.bwd_tensor_stash.erase(k);
      }
      return outputs;
    }

   private:
    std::shared_ptr<State> s_;
    int64_t id_;
    bool brought_back_;
    int64_t storage_refcount_;
    std::vector<int64_t> prev_node_ids_;
  };

  // __enter__: the previous step's state is dropped, and TRL empties the allocator's cache
  // when bitsandbytes is imported (PEFT imports it wherever it is installed).
  void enter() {
    clear_tracker();
    storage_to_tensor_id.clear();
    storage_key_by_tensor_id.clear();
    tensor_id = 0;
    is_first_forward_call = true;
    is_first_backward_call = true;
    bwd_tensor_stash.clear();
    bwd_ev_stash.clear();
    fwd_stash.clear();
    mem->empty_cache();
  }
  // __exit__: both streams synchronised, the stashes cleared.
  void exit() {
    if (cuda) {
      s0()->synchronize();
      s1->synchronize();
    }
    bwd_tensor_stash.clear();
    bwd_ev_stash.clear();
    fwd_stash.clear();
  }
};

namespace {

// One saved tensor's hooks: its id in the offloader.
class OffloadHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit OffloadHooks(std::shared_ptr<ActivationOffload::State> s) : s_(std::move(s)) {}
  void call_pack_hook(const at::Tensor& tensor) override { id_ = s_->pack(tensor); }
  at::Tensor call_unpack_hook() override { return s_->unpack(id_); }

 private:
  std::shared_ptr<ActivationOffload::State> s_;
  int64_t id_ = 0;
};

}  // namespace

ActivationOffload::ActivationOffload(const std::vector<torch::Tensor>& params, MemoryTracker& mem)
    : state_(std::make_shared<State>()) {
  install_saved_tensor_hooks();
  state_->mem = &mem;
  state_->cuda = !params.empty() && params[0].is_cuda();
  if (state_->cuda) {
    state_->s1 = c10::cuda::getStreamFromPool();  // torch.cuda.Stream(): the comms stream
    state_->pinned_base = pinned_held();
  }
  // update_model_params: every parameter's storage (non-zero data pointers on a card).
  for (const auto& p : params) state_->param_storages.insert(p.storage().unsafeGetStorageImpl());
}

ActivationOffload::~ActivationOffload() = default;

int64_t ActivationOffload::host_bytes() const {
  return state_->cuda ? pinned_held() - state_->pinned_base : state_->pinned.held();
}

ActivationOffload::Scope::Scope(ActivationOffload& offload) : offload_(offload), prev_(nullptr) {
  offload_.state_->enter();
  prev_ = std::exchange(tl_active_offload(), &offload_);
}

ActivationOffload::Scope::~Scope() {
  tl_active_offload() = prev_;
  offload_.state_->exit();
}

std::unique_ptr<torch::autograd::SavedVariableHooks> activation_offload_hooks() {
  ActivationOffload* active = tl_active_offload();
  if (!active) return nullptr;
  return std::make_unique<OffloadHooks>(active->state_);
}

}  // namespace sweep
