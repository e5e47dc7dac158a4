// PYTORCH_CUDA_ALLOC_CONF parsed as torch 2.11 parses it. Two parsers read the same string:
// AcceleratorAllocatorConfig::parseArgs (c10/core/AllocatorConfig.cpp) for the device-generic
// keys, then the registered CUDA hook CUDAAllocatorConfig::parseArgs (c10/cuda/
// CUDAAllocatorConfig.cpp) for the CUDA ones; each rejects a key neither knows.
#include "sweeps/measure/alloc_conf.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <stdexcept>
#include <unordered_set>

namespace sweep::emu {

namespace {

// What TORCH_CHECK would throw; caught once, in parse_alloc_conf.
struct ConfError {
  std::string message;
};

bool is_power_of_2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }  // llvm::isPowerOf2_64
size_t log2_floor(size_t v) { return 63 - std::countl_zero(static_cast<uint64_t>(v)); }

// ConfigTokenizer (AllocatorConfig.h:35-129): ',' ':' '[' ']' are tokens of their own,
// whitespace is dropped (so "a b" reads as "ab"), everything else accumulates.
class Tokens {
 public:
  explicit Tokens(std::string_view env) {
    std::string buffer;
    for (char ch : env) {
      if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
        if (!buffer.empty()) tokens_.push_back(std::move(buffer)), buffer.clear();
        tokens_.emplace_back(1, ch);
      } else if (!std::isspace(static_cast<unsigned char>(ch))) {
        buffer += ch;
      }
    }
    if (!buffer.empty()) tokens_.push_back(std::move(buffer));
  }
  size_t size() const { return tokens_.size(); }
  const std::string& operator[](size_t i) const {  // AllocatorConfig.h:55-58, 124-127
    if (i >= tokens_.size()) throw ConfError{"Index out of bounds in ConfigTokenizer"};
    return tokens_[i];
  }
  // AllocatorConfig.h:65-68: checks the index only; a wrong separator is NOT an error in 2.11
  // (the bool it returns is ignored by every caller), so neither is it here.
  void check_token(size_t i) const { (void)(*this)[i]; }
  size_t to_size_t(size_t i) const {  // std::stoull, as AllocatorConfig.h:70-73
    const std::string& t = (*this)[i];
    try {
      return std::stoull(t);
    } catch (const std::exception&) {
      throw ConfError{"stoull: '" + t + "' is not a number"};
    }
  }
  double to_double(size_t i) const {  // std::stod, AllocatorConfig.h:75-78
    const std::string& t = (*this)[i];
    try {
      return std::stod(t);
    } catch (const std::exception&) {
      throw ConfError{"stod: '" + t + "' is not a number"};
    }
  }
  bool to_bool(size_t i) const {  // AllocatorConfig.h:80-95
    const std::string& t = (*this)[i];
    if (t == "True") return true;
    if (t == "False") return false;
    throw ConfError{"Expected 'True' or 'False' at index " + std::to_string(i) +
                    " in ConfigTokenizer but got '" + t + "'"};
  }
  // AllocatorConfig.h:100-121: past "key :" and its value or bracketed list.
  size_t skip_key(size_t i) const {
    check_token(++i);
    ++i;
    if ((*this)[i] != "[") return i;
    while (++i < tokens_.size() && tokens_[i] != "]") {
    }
    if (i >= tokens_.size())
      throw ConfError{"Expected closing bracket ']' in ConfigTokenizer but reached end of config"};
    return i;
  }

 private:
  std::vector<std::string> tokens_;
};

// AcceleratorAllocatorConfig::getMutableKeys (AllocatorConfig.h:238-248) plus the keys the CUDA
// hook registers (CUDAAllocatorConfig.h:146-161): the union both parsers check against.
const std::unordered_set<std::string>& known_keys() {
  static const std::unordered_set<std::string> keys{"large_segment_size_mb",
                                                    "max_split_size_mb",
                                                    "max_non_split_rounding_mb",
                                                    "garbage_collection_threshold",
                                                    "roundup_power2_divisions",
                                                    "expandable_segments",
                                                    "pinned_use_background_threads",
                                                    "backend",
                                                    "release_lock_on_cudamalloc",
                                                    "pinned_use_cuda_host_register",
                                                    "release_lock_on_hipmalloc",
                                                    "pinned_use_hip_host_register",
                                                    "graph_capture_record_stream_reuse",
                                                    "pinned_reserve_segment_size_mb",
                                                    "pinned_num_register_threads",
                                                    "per_process_memory_fraction"};
  return keys;
}

// AcceleratorAllocatorConfig::parseRoundUpPower2Divisions: "[256:1,512:2,>:4]" (interval
// starts in MB, each a power of two; the first one also fills every interval below it; ">"
// fills every interval after the last one named) or one value for all intervals.
size_t parse_roundup(const Tokens& t, size_t i, std::vector<size_t>& divisions) {
  t.check_token(++i);
  bool first_value = true;
  if (t[++i] == "[") {
    size_t last_index = 0;
    while (++i < t.size() && t[i] != "]") {
      const size_t value_index = i;
      t.check_token(++i);
      const size_t value = t.to_size_t(++i);
      if (value != 0 && !is_power_of_2(value))
        throw ConfError{
            "For roundups, the divisions has to be power of 2 or 0 to disable roundup "};
      if (t[value_index] == ">") {
        std::fill(divisions.begin() +
                      static_cast<std::ptrdiff_t>(std::min(last_index + 1, divisions.size())),
                  divisions.end(), value);
      } else {
        const size_t boundary = t.to_size_t(value_index);
        if (!is_power_of_2(boundary))
          throw ConfError{"For roundups, the intervals have to be power of 2 "};
        const size_t index = std::min(log2_floor(boundary), divisions.size() - 1);
        if (first_value) {
          std::fill(divisions.begin(), divisions.begin() + static_cast<std::ptrdiff_t>(index),
                    value);
          first_value = false;
        }
        divisions[index] = value;
        last_index = index;
      }
      if (t[i + 1] != "]") t.check_token(++i);
    }
    if (i >= t.size())
      throw ConfError{"Expected closing bracket ']' in ConfigTokenizer but reached end of config"};
  } else {  // "Keep this for backwards compatibility": one value for every interval
    const size_t value = t.to_size_t(i);
    if (!is_power_of_2(value)) throw ConfError{"For roundups, the divisions has to be power of 2 "};
    std::fill(divisions.begin(), divisions.end(), value);
  }
  return i;
}

// AcceleratorAllocatorConfig::parseArgs (AllocatorConfig.cpp, 2.11).
void parse_accelerator(const Tokens& t, AllocatorSettings& s) {
  const size_t max_mb = std::numeric_limits<size_t>::max() / kMiB;
  // large_segment_size_mb first: the other sizes are checked against it.
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != "large_segment_size_mb") continue;
    t.check_token(++i);
    const size_t mb = t.to_size_t(++i);
    if (mb <= kMinLargeAlloc / kMiB)
      throw ConfError{"CachingAllocator option large_segment_size_mb must be > " +
                      std::to_string(kMinLargeAlloc / kMiB) + " MB"};
    s.large_segment_size = std::min(mb, max_mb) * kMiB;
  }
  s.max_non_split_rounding_size = s.large_segment_size;
  const size_t min_split_mb = s.large_segment_size / kMiB;
  for (size_t i = 0; i < t.size(); i++) {
    const std::string key = t[i];
    if (key == "large_segment_size_mb") {
      i = t.skip_key(i);
    } else if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
      t.check_token(++i);
      const size_t mb = t.to_size_t(++i);
      if (mb < min_split_mb)
        throw ConfError{"CachingAllocator option " + key +
                        " too small, must be >= " + std::to_string(min_split_mb)};
      (key == "max_split_size_mb" ? s.max_split_size : s.max_non_split_rounding_size) =
          std::min(mb, max_mb) * kMiB;
    } else if (key == "garbage_collection_threshold") {
      t.check_token(++i);
      const double v = t.to_double(++i);
      if (!(v > 0 && v < 1.0))
        throw ConfError{"garbage_collect_threshold is invalid, set it in (0.0, 1.0)"};
      s.garbage_collection_threshold = v;
    } else if (key == "roundup_power2_divisions") {
      i = parse_roundup(t, i, s.roundup_power2_divisions);
    } else if (key == "expandable_segments") {
      t.check_token(++i);
      s.expandable_segments = t.to_bool(++i);
    } else if (key == "pinned_use_background_threads") {
      t.check_token(++i);
      (void)t.to_bool(++i);
    } else {
      // The CUDA hook is registered, so an unknown key is refused here already.
      if (!known_keys().contains(key))
        throw ConfError{"Unrecognized key '" + key + "' in Accelerator allocator config."};
      i = t.skip_key(i);
    }
    if (i + 1 < t.size()) t.check_token(++i);
  }
}

// CUDAAllocatorConfig::parseArgs (CUDAAllocatorConfig.cpp, 2.11).
void parse_cuda(const Tokens& t, AllocatorSettings& s) {
  for (size_t i = 0; i < t.size(); i++) {
    const std::string key = t[i];
    if (key == "backend") {
      t.check_token(++i);
      const std::string& v = t[++i];
      if (v != "native" && v != "cudaMallocAsync")
        throw ConfError{"Unknown allocator backend, options are native and cudaMallocAsync"};
      s.backend = v;
    } else if (key == "release_lock_on_hipmalloc" || key == "release_lock_on_cudamalloc") {
      t.check_token(++i);
      s.release_lock_on_cudamalloc = t.to_bool(++i);
    } else if (key == "pinned_use_hip_host_register" || key == "pinned_use_cuda_host_register") {
      t.check_token(++i);
      s.pinned_use_cuda_host_register = t.to_bool(++i);
    } else if (key == "pinned_num_register_threads") {
      t.check_token(++i);
      const size_t v = t.to_size_t(++i);
      if (!is_power_of_2(v))
        throw ConfError{"Number of register threads has to be power of 2, got " +
                        std::to_string(v)};
      if (v > 128)  // CUDAAllocatorConfig::pinned_max_register_threads()
        throw ConfError{"Number of register threads should be less than or equal to 128, got " +
                        std::to_string(v)};
      s.pinned_num_register_threads = v;
    } else if (key == "pinned_reserve_segment_size_mb") {
      t.check_token(++i);
      if (t.to_size_t(++i) == 0)
        throw ConfError{"Pinned reserve segment size has to be greater than 0"};
    } else if (key == "graph_capture_record_stream_reuse") {
      t.check_token(++i);
      s.graph_capture_record_stream_reuse = t.to_bool(++i);
    } else if (key == "per_process_memory_fraction") {
      t.check_token(++i);
      const double v = t.to_double(++i);
      if (!(v >= 0.0 && v <= 1.0))
        throw ConfError{"per_process_memory_fraction is invalid, set it in [0.0, 1.0]"};
      s.per_process_memory_fraction = v;
    } else {
      if (!known_keys().contains(key))
        throw ConfError{"Unrecognized key '" + key + "' in CUDA allocator config."};
      i = t.skip_key(i);
    }
    if (i + 1 < t.size()) t.check_token(++i);
  }
}

}  // namespace

std::variant<AllocatorSettings, std::string> parse_alloc_conf(std::string_view conf) {
  AllocatorSettings s;
  s.conf = std::string(conf);
  const Tokens tokens(conf);
  try {
    parse_accelerator(tokens, s);
    parse_cuda(tokens, s);
  } catch (const ConfError& e) {
    return "PYTORCH_CUDA_ALLOC_CONF=\"" + std::string(conf) + "\": " + e.message;
  }
  return s;
}

std::string alloc_conf_keys() {
  std::vector<std::string> keys(known_keys().begin(), known_keys().end());
  std::sort(keys.begin(), keys.end());
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
  return list;
}

size_t roundup_power2_divisions(const AllocatorSettings& s, size_t size) {
  // AcceleratorAllocatorConfig::roundup_power2_divisions: intervals start at 1 MiB (2^20).
  constexpr size_t kIntervalStart = 20;
  const size_t log_size = log2_floor(size);
  size_t index = log_size > kIntervalStart ? log_size - kIntervalStart : 0;
  index = std::min(index, kRoundUpPowerOfTwoIntervals - 1);
  return index < s.roundup_power2_divisions.size() ? s.roundup_power2_divisions[index] : 0;
}

}  // namespace sweep::emu
