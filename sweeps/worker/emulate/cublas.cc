// cuBLAS's and cuBLASLt's workspaces on the emulated card. ATen allocates them through the
// caching allocator the first time a thread's cuBLAS handle is used on a stream, and keeps them
// for the process (aten/src/ATen/cuda/CublasHandlePool.cpp, read at 26a39059):
// - getCurrentCUDABlasHandle() calls setWorkspaceForHandle(handle, stream), which allocates
//   getChosenWorkspaceSize() bytes once per (handle, stream): parseChosenWorkspaceSize, the
//   ":4096:2:16:8" default 4096 * 1024 * 2 + 16 * 1024 * 8 = 8,519,680 B, 4096 * 8 * 1024 =
//   33,554,432 B on sm_90 (major 9, minor 0), or what CUBLAS_WORKSPACE_CONFIG (":SIZE:COUNT"
//   pairs, KiB) says;
// - the cuBLASLt path (gemm_and_bias: addmm with a fusable 1-D bias, Blas.cpp
//   isInputCompliesAddmmCudaLt) takes the handle the same way (getCurrentCUDABlasLtHandle
//   aliases it on CUDA), then getCUDABlasLtWorkspace(): unless TORCH_CUBLASLT_UNIFIED_WORKSPACE
//   is set to 1, a workspace of its own of getCUDABlasLtWorkspaceSize() = CUBLASLT_WORKSPACE_SIZE
//   KiB (default 1024), capped at the cuBLAS workspace size, once per (handle, stream).
// Handles are per thread (a thread-local pool window): the autograd engine's device thread
// has its own, so backward's first GEMM allocates a second workspace. The kernels below are
// Meta's own (at::meta::*) with the workspace taken first, as the CUDA kernel takes it before
// it launches: after its output exists.
#include <ATen/ops/_addmm_activation_meta_dispatch.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <c10/util/env.h>
#include <torch/library.h>

#include <mutex>
#include <regex>

#include "sweeps/worker/emulate/emulation.h"

namespace sweep::emu {
namespace {

int64_t cublas_workspace_bytes() {
  const auto& card = emulated_card();
  const int64_t fallback = card.cc_major == 9 && card.cc_minor == 0 ? 4096 * 8 * 1024
                                                                    : 4096 * 1024 * 2 + 16 * 1024 * 8;
  const auto conf = c10::utils::get_env("CUBLAS_WORKSPACE_CONFIG");
  if (!conf) return fallback;
  const std::regex exp(":([0-9]+):([0-9]+)");
  int64_t total = 0;
  bool any = false;
  for (std::sregex_iterator it(conf->begin(), conf->end(), exp), end; it != end; ++it) {
    total += std::stoll((*it)[1]) * 1024 * std::stoll((*it)[2]);
    any = true;
  }
  return any ? total : fallback;  // upstream warns and takes the default
}

int64_t cublaslt_workspace_bytes() {
  int64_t kib = 1024;
  if (const auto v = c10::utils::get_env("CUBLASLT_WORKSPACE_SIZE")) {
    try {
      kib = std::stoi(*v);
    } catch (const std::exception&) {
    }
  }
  return std::min(kib * 1024, cublas_workspace_bytes());
}

bool lt_unified() { return c10::utils::check_env("TORCH_CUBLASLT_UNIFIED_WORKSPACE") == true; }

// One cuBLAS handle per thread: the caller's and the autograd engine's.
struct Handle {
  at::Tensor cublas, cublaslt;
};
// Kept for the process and never destroyed, as CublasHandlePool.cpp keeps its map (a leaked
// singleton): their storages must not be freed after the emulated device is gone.
Handle* handles = new Handle[2];
std::mutex mu;

void take_workspaces(bool lt) {
  std::lock_guard lock(mu);
  Handle& h = handles[on_backward_thread() ? 1 : 0];
  if (!h.cublas.defined())
    h.cublas = at::empty({cublas_workspace_bytes()}, at::TensorOptions().dtype(at::kByte).device(at::kMeta));
  if (lt && !lt_unified() && !h.cublaslt.defined())
    h.cublaslt = at::empty({cublaslt_workspace_bytes()}, at::TensorOptions().dtype(at::kByte).device(at::kMeta));
}

bool takes_lt(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
              const at::Scalar& beta) {
  // isInputCompliesAddmmCudaLt for a fresh result (contiguous, 2-D): beta 1, a contiguous bias
  // that squeezes to 1-D of mat2's columns, a float type, no dimension of 1.
  const auto t = mat1.scalar_type();
  return beta.toComplexDouble() == 1.0 && self.is_contiguous() &&
         (self.dim() == 1 || self.squeeze().dim() == 1) && self.sizes().back() == mat2.size(1) &&
         (t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
         mat1.size(0) > 1 && mat1.size(1) > 1 && mat2.size(0) > 1 && mat2.size(1) > 1;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::meta::mm(a, b);
  take_workspaces(false);
  return out;
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  auto out = at::meta::addmm(self, m1, m2, beta, alpha);
  take_workspaces(takes_lt(self, m1, m2, beta));
  return out;
}
at::Tensor addmm_activation(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                            const at::Scalar& beta, const at::Scalar& alpha, bool gelu) {
  auto out = at::meta::_addmm_activation(self, m1, m2, beta, alpha, gelu);
  take_workspaces(takes_lt(self, m1, m2, beta));
  return out;
}
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::meta::bmm(a, b);
  take_workspaces(false);
  return out;
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  auto out = at::meta::baddbmm(self, b1, b2, beta, alpha);
  take_workspaces(false);
  return out;
}
at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  auto out = at::meta::addmv(self, mat, vec, beta, alpha);
  take_workspaces(false);
  return out;
}
// The `out=` forms (TRL's fused LM head projects into a reused buffer and accumulates its
// gradients in place: models/fused_lm_head.cc) take the same workspaces.
at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  at::meta::mm_outf(a, b, out);
  take_workspaces(false);
  return out;
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  at::meta::addmm_outf(self, m1, m2, beta, alpha, out);
  take_workspaces(takes_lt(self, m1, m2, beta));
  return out;
}
// addmm.dtype_out (Blas.cpp _addmm_dtype_out_cuda: fp32 out from fp16/bf16 inputs), which has
// no Meta kernel: its checks, then addmm_out_cuda_impl into `out`, cuBLAS's gemm (a 2-D self
// never takes the cuBLASLt path).
at::Tensor& addmm_dtype_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                            at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha,
                            at::Tensor& out) {
  (void)beta;
  (void)alpha;
  TORCH_CHECK(m1.dim() == 2 && m2.dim() == 2 && m1.size(1) == m2.size(0),
              "mat1 and mat2 shapes cannot be multiplied");
  TORCH_CHECK(out_dtype == out.scalar_type(), "out_dtype must be the same as the dtype of the provided out tensor");
  TORCH_CHECK(out_dtype == m1.scalar_type() ||
                  (out_dtype == at::kFloat && (m1.scalar_type() == at::kHalf || m1.scalar_type() == at::kBFloat16)),
              "out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs");
  TORCH_CHECK(out.size(0) == m1.size(0) && out.size(1) == m2.size(1) && self.sizes() == out.sizes(),
              "addmm: out and self must be (mat1 rows, mat2 columns)");
  take_workspaces(false);
  return out;
}
// _int_mm (Blas.cpp _int_mm_out_cuda: cuBLASLt's int8 GEMM, at::cuda::blas::int8_gemm): an
// (n, m) int32 result.
at::Tensor int_mm(const at::Tensor& a, const at::Tensor& b) {
  auto out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kInt));
  take_workspaces(true);
  return out;
}

}  // namespace

void register_cublas_workspaces() {
  static std::unique_ptr<torch::Library> lib;
  QuietOverrides quiet;  // these replace Meta's own kernels
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Meta,
                                         __FILE__, __LINE__);
  lib->impl("mm", TORCH_FN(mm));
  lib->impl("addmm", TORCH_FN(addmm));
  lib->impl("_addmm_activation", TORCH_FN(addmm_activation));
  lib->impl("bmm", TORCH_FN(bmm));
  lib->impl("baddbmm", TORCH_FN(baddbmm));
  lib->impl("addmv", TORCH_FN(addmv));
  lib->impl("_int_mm", TORCH_FN(int_mm));
  lib->impl("mm.out", TORCH_FN(mm_out));
  lib->impl("addmm.out", TORCH_FN(addmm_out));
  lib->impl("addmm.dtype_out", TORCH_FN(addmm_dtype_out));
}

}  // namespace sweep::emu
