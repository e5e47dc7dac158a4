// memory_viz_pickle: the model's segments, trace and settings in the layout of
// torch/csrc/cuda/memory_snapshot.cpp's _memory_snapshot_pickled (torch 2.11), pickled the way
// it pickles (write_pickle: protocol 2, untagged dicts and lists, so plain python can load it).
#include "sweeps/measure/memory_viz.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <vector>

namespace sweep::emu {

namespace {

using c10::IValue;
using Dict = c10::Dict<IValue, IValue>;

Dict new_dict() { return Dict(c10::AnyType::get(), c10::AnyType::get()); }
c10::List<IValue> new_list() { return c10::List<IValue>(c10::AnyType::get()); }
int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

// memory_snapshot.cpp's write_pickle.
std::string write_pickle(const IValue& v) {
  std::string out;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { out.append(data, size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(v);
  pickler.stop();
  return out;
}

// segmentInfoToDict: the keys in the order memory_snapshot.cpp inserts them.
Dict segment_dict(const SegmentInfo& seg) {
  Dict d = new_dict();
  d.insert("device", int64_t{0});
  d.insert("address", i64(seg.address));
  d.insert("total_size", i64(seg.total_size));
  d.insert("allocated_size", i64(seg.allocated_size));
  d.insert("active_size", i64(seg.active_size));
  d.insert("requested_size", i64(seg.requested_size));
  d.insert("stream", int64_t{0});  // the default stream
  d.insert("segment_type", seg.is_large ? "large" : "small");
  d.insert("segment_pool_id", std::tuple<int64_t, int64_t>(0, 0));  // the default pool
  d.insert("is_expandable", seg.is_expandable);
  d.insert("frames", new_list());
  auto blocks = new_list();
  uint64_t address = seg.address;
  for (const BlockInfo& b : seg.blocks) {
    Dict bd = new_dict();
    bd.insert("address", i64(address));
    bd.insert("size", i64(b.size));
    bd.insert("requested_size", i64(b.requested_size));
    bd.insert("state",
              b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive"));
    bd.insert("frames", new_list());
    address += b.size;
    blocks.push_back(bd);
  }
  d.insert("blocks", blocks);
  return d;
}

// The "allocator_settings" dict (AllocatorConfigInfo, CUDACachingAllocator.h:66-76).
Dict settings_dict(const AllocatorSettings& s) {
  Dict d = new_dict();
  d.insert("PYTORCH_CUDA_ALLOC_CONF", s.conf);
  d.insert("max_split_size", static_cast<int64_t>(s.max_split_size));  // SIZE_MAX -> -1
  d.insert("garbage_collection_threshold", s.garbage_collection_threshold);
  d.insert("expandable_segments", s.expandable_segments);
  d.insert("pinned_num_register_threads", static_cast<int64_t>(s.pinned_num_register_threads));
  d.insert("release_lock_on_cudamalloc", s.release_lock_on_cudamalloc);
  d.insert("pinned_use_cuda_host_register", s.pinned_use_cuda_host_register);
  d.insert("graph_capture_record_stream_reuse", s.graph_capture_record_stream_reuse);
  Dict roundup = new_dict();  // keyed "1", "2", "4", ... per interval, as torch keys it
  unsigned int key = 1;
  for (size_t v : s.roundup_power2_divisions) {
    roundup.insert(std::to_string(key), static_cast<int64_t>(v));
    key *= 2;
  }
  d.insert("roundup_power2_divisions", roundup);
  return d;
}

}  // namespace

std::string memory_viz_pickle(const CachingAllocatorModel& model) {
  auto segments = new_list();
  for (const SegmentInfo& seg : model.segments()) segments.push_back(segment_dict(seg));

  auto trace = new_list();
  for (const TraceEntry& te : model.trace()) {
    Dict e = new_dict();
    e.insert("action", action_name(te.action));
    e.insert(te.action == TraceEntry::Action::kOom ? "device_free" : "addr", i64(te.addr));
    e.insert("size", i64(te.size));
    e.insert("stream", int64_t{0});
    e.insert("compile_context", "N/A");  // record_trace's default with no compile context
    e.insert("user_metadata", "");
    e.insert("frames", new_list());
    e.insert("time_us", te.time_us);
    trace.push_back(e);
  }
  auto device_traces = new_list();
  device_traces.push_back(trace);

  Dict result = new_dict();
  result.insert("segments", segments);
  result.insert("device_traces", device_traces);
  result.insert("allocator_settings", settings_dict(model.settings()));
  result.insert("external_annotations", new_list());
  return write_pickle(result);
}

}  // namespace sweep::emu
