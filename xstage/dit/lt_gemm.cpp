// GEMMs with their bias (and for the GELU MLP's fc1 its GELU) in cuBLASLt's epilogue
// (dit_cuda.hpp, BiasGemm): one plan per shape, its algorithm chosen once by cuBLASLt's
// heuristic, then run as often as the model needs it.
//
// Row-major Y [M, N] = X [M, K] · W [N, K]ᵀ is, to cuBLAS's column-major view,
// D [N, M] = op(A) · B with A = W seen as K x N (ld K) transposed and B = X seen as
// K x M (ld K): D's rows are the output channels, so the bias (one value per row of
// D) is per channel.
//
// Not used: the gated residuals x += gate ⊙ (Y + b) of the attention projection and fc2
// as CUBLASLT_EPILOGUE_BIAS with CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
// (alpha = gate, C = D = x): cuBLASLt's heuristic offers no algorithm for bf16 inputs with
// fp32 compute (docs/xstage-dit.md). Those GEMMs add their bias here and write Y + b in
// bf16 instead, and the gated residual kernel takes that bf16 branch.
#include <fmt/format.h>

#include <cstdint>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/dit/dit_cuda.hpp"

namespace xstage::dit {

namespace {
void check_lt(cublasStatus_t st, const char* what) {
  XS_ASSERT(st == CUBLAS_STATUS_SUCCESS, "dit: cuBLASLt {} failed: {}", what, cublasGetStatusString(st));
}
// What every pointer of the model guarantees (cudaMalloc'd buffers, or the Ulysses
// window at a 4 KiB offset); asking for 16 B keeps the TMA kernels, which need no more.
constexpr uint32_t kLtAlignment = 16;

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  check_lt(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)), "set matmul attribute");
}
}  // namespace

BiasGemm::BiasGemm(cublasLtHandle_t lt, LtTail tail, int64_t M, int64_t N, int64_t K, cudaDataType out_type,
                   std::size_t workspace_bytes)
    : lt_(lt), tail_(tail), m_(M), n_(N), k_(K), out_type_(out_type), workspace_bytes_(workspace_bytes) {
  XS_ASSERT(M > 0 && N > 0 && K > 0, "dit: BiasGemm needs a non-empty shape (M {} N {} K {})", M, N, K);
  XS_ASSERT(out_type == CUDA_R_16BF || out_type == CUDA_R_32F, "dit: BiasGemm writes bf16 or fp32");
  check_lt(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "create matmul");
  set_attr(desc_, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));
  set_attr(desc_, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
  set_attr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE,
           tail == LtTail::bias_gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS);
  // The heuristic looks at the bias pointer only for its alignment.
  set_attr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<const void*>(uintptr_t(256)));
  check_lt(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, uint64_t(K), uint64_t(N), K), "create layout A");
  check_lt(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, uint64_t(K), uint64_t(M), K), "create layout B");
  check_lt(cublasLtMatrixLayoutCreate(&d_, out_type, uint64_t(N), uint64_t(M), N), "create layout D");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "create preference");
  auto pref_attr = [&](cublasLtMatmulPreferenceAttributes_t a, auto v) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, a, &v, sizeof(v)), "set preference");
  };
  pref_attr(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes));
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    pref_attr(a, kLtAlignment);
  cublasLtMatmulHeuristicResult_t found{};
  int n_found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, desc_, a_, b_, d_, d_, pref, 1, &found, &n_found);
  cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm (NOT_SUPPORTED, or none returned) leaves the plan unsupported: the
  // model then runs the GEMM and bias_act; any other status is an error.
  XS_ASSERT(st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED,
            "dit: cuBLASLt heuristic for {} failed: {}", describe(), cublasGetStatusString(st));
  supported_ = st == CUBLAS_STATUS_SUCCESS && n_found > 0 && found.state == CUBLAS_STATUS_SUCCESS;
  if (supported_) algo_ = found.algo;
}

BiasGemm::~BiasGemm() {
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

std::string BiasGemm::describe() const {
  return fmt::format("{} GEMM M {} N {} K {} -> {}", tail_ == LtTail::bias_gelu ? "bias + GELU" : "bias", m_, n_, k_,
                     out_type_ == CUDA_R_16BF ? "bf16" : "fp32");
}

void BiasGemm::run(const std::uint16_t* X, const std::uint16_t* W, void* out, const void* bias, void* workspace,
                       cudaStream_t s) const {
  XS_ASSERT(supported_, "dit: cuBLASLt has no algorithm for {}", describe());
  XS_ASSERT(X && W && out && bias && (workspace || !workspace_bytes_), "dit: {} is missing an operand", describe());
  for (const void* p : {static_cast<const void*>(X), static_cast<const void*>(W), static_cast<const void*>(out), bias})
    XS_ASSERT(reinterpret_cast<uintptr_t>(p) % kLtAlignment == 0, "dit: {}: an operand is not {}-byte aligned",
              describe(), kLtAlignment);
  set_attr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float one = 1.f, zero = 0.f;
  check_lt(cublasLtMatmul(lt_, desc_, &one, W, a_, X, b_, &zero, out, d_, out, d_, &algo_, workspace, workspace_bytes_,
                          s),
           "matmul");
}

}  // namespace xstage::dit
