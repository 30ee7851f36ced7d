#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_check.h"

namespace ds::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 64u << 20;

struct PlanKey {
  int kind;  // 0 bf16, 1 fp8
  int64_t M, N, K, ldx, ldw, ldy;
  int out, acc;
  bool operator<(const PlanKey& o) const {
    return std::tie(kind, M, N, K, ldx, ldw, ldy, out, acc) <
           std::tie(o.kind, o.M, o.N, o.K, o.ldx, o.ldw, o.ldy, o.out, o.acc);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class Lt {
 public:
  static Lt& Get() {
    static Lt* lt = new Lt();
    return *lt;
  }
  cublasLtHandle_t handle() const { return h_; }
  void* workspace() const { return ws_; }
  std::mutex mu;
  std::map<PlanKey, Plan> plans;

 private:
  Lt() {
    DS_CUBLAS_CHECK(cublasLtCreate(&h_));
    DS_CUDA_CHECK(cudaMalloc(&ws_, kWorkspaceBytes));
  }
  cublasLtHandle_t h_ = nullptr;
  void* ws_ = nullptr;
};

// Column-major view: D[N, M] = W^T(op T on stored [K, N]) * X(stored [K, M]).
Plan MakePlan(const PlanKey& k, cudaDataType_t ab_type, cudaDataType_t out_type,
              const float* a_scale, const float* b_scale) {
  Lt& lt = Lt::Get();
  Plan p;
  DS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (k.kind == 1) {
    int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode));
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode));
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
  }
  DS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, k.K, k.N, k.ldw));
  DS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, k.K, k.M, k.ldx));
  DS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, k.N, k.M, k.ldy));
  cublasLtMatmulPreference_t pref;
  DS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  DS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t res[4];
  int n = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle(), p.desc, p.a, p.b, p.c, p.c, pref, 4, res, &n);
  cublasLtMatmulPreferenceDestroy(pref);
  DS_CHECK(st == CUBLAS_STATUS_SUCCESS && n > 0)
      << "cuBLASLt has no algorithm for " << (k.kind ? "FP8 block-scaled" : "BF16") << " GEMM M=" << k.M
      << " N=" << k.N << " K=" << k.K << " ldx=" << k.ldx << " ldw=" << k.ldw << " ldy=" << k.ldy
      << " (" << CublasStatusName(st) << ")";
  p.algo = res[0].algo;
  return p;
}

void Run(const PlanKey& key, cudaDataType_t ab, cudaDataType_t out, const void* w, const void* x, void* y,
         const float* a_scale, const float* b_scale, float beta, cudaStream_t stream) {
  Lt& lt = Lt::Get();
  std::lock_guard<std::mutex> lock(lt.mu);
  auto it = lt.plans.find(key);
  if (it == lt.plans.end()) it = lt.plans.emplace(key, MakePlan(key, ab, out, a_scale, b_scale)).first;
  Plan& p = it->second;
  if (key.kind == 1) {  // scale pointers change per call
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
    DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
  }
  const float alpha = 1.0f;
  DS_CUBLAS_CHECK(cublasLtMatmul(lt.handle(), p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                 lt.workspace(), kWorkspaceBytes, stream));
}

}  // namespace

void GemmBf16(const GemmBf16Params& p) {
  DS_CHECK(p.M >= 0 && p.N > 0 && p.K > 0) << "GemmBf16: bad shape M=" << p.M << " N=" << p.N << " K=" << p.K;
  DS_CHECK(p.ldx >= p.K && p.ldw >= p.K && p.ldy >= p.N) << "GemmBf16: leading dimension too small";
  if (p.M == 0) return;
  PlanKey key{0, p.M, p.N, p.K, p.ldx, p.ldw, p.ldy, int(p.y_type), int(p.accumulate)};
  Run(key, CUDA_R_16BF, p.y_type == DTypeOut::kF32 ? CUDA_R_32F : CUDA_R_16BF, p.w, p.x, p.y, nullptr, nullptr,
      p.accumulate ? 1.0f : 0.0f, p.stream);
}

void GemmFp8(const GemmFp8Params& p) {
  DS_CHECK(p.M >= 0 && p.N > 0 && p.K > 0) << "GemmFp8: bad shape M=" << p.M << " N=" << p.N << " K=" << p.K;
  DS_CHECK(p.K % 16 == 0 && p.ldx % 16 == 0 && p.ldw % 16 == 0)
      << "GemmFp8: K and leading dimensions must be multiples of 16 (K=" << p.K << ")";
  DS_CHECK(p.w_scale_ld == Fp8WeightScaleLd(p.K)) << "GemmFp8: w_scale_ld must be round_up(ceil(K/128), 4)";
  if (p.M == 0) return;
  PlanKey key{1, p.M, p.N, p.K, p.ldx, p.ldw, p.ldy, int(p.y_type), 0};
  Run(key, CUDA_R_8F_E4M3, p.y_type == DTypeOut::kF32 ? CUDA_R_32F : CUDA_R_16BF, p.wq, p.xq, p.y, p.w_scales,
      p.x_scales, 0.0f, p.stream);
}

}  // namespace ds::cuda
