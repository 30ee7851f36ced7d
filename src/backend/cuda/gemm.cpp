#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace ds::cuda {
namespace {

constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;

struct PlanKey {
  int kind;  // 0 bf16, 1 fp8, 2 fp32
  int64_t M, N, K, ldx, ldw, ldy;
  int out, acc;
  int64_t batch = 1, sx = 0, sw = 0, sy = 0;
  bool operator<(const PlanKey& o) const {
    return std::tie(kind, M, N, K, ldx, ldw, ldy, out, acc, batch, sx, sw, sy) <
           std::tie(o.kind, o.M, o.N, o.K, o.ldx, o.ldw, o.ldy, o.out, o.acc, o.batch, o.sx, o.sw, o.sy);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// cuBLASLt state of one device: handle, 64 MiB workspace (device memory of that device) and
// the plans. One per device ordinal, made on first use on that device: a process driving
// several GPUs (data-parallel rank r on GPU r) must not hand rank r a workspace allocated on
// GPU 0. Within one device the mutex orders the enqueues; the workspace is shared by every
// stream of that device (one runner per device).
class Lt {
 public:
  static Lt& Get() {
    constexpr int kMaxDevices = 64;
    static std::mutex mu;
    static Lt* per_device[kMaxDevices] = {};
    int dev = 0;
    DS_CUDA_CHECK(cudaGetDevice(&dev));
    DS_CHECK(dev >= 0 && dev < kMaxDevices) << "CUDA device ordinal " << dev << " (at most " << kMaxDevices << ")";
    std::lock_guard<std::mutex> lock(mu);
    if (per_device[dev] == nullptr) per_device[dev] = new Lt();
    return *per_device[dev];
  }
  cublasLtHandle_t handle() const { return h_; }
  void* workspace() const { return ws_; }
  std::mutex mu;
  std::map<PlanKey, Plan> plans;
  std::map<PlanKey, bool> fp8_supported;  // GemmFp8Supported's answers

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
  if (k.batch > 1) {
    const int32_t bc = static_cast<int32_t>(k.batch);
    for (auto [layout, stride] : {std::pair{p.a, k.sw}, std::pair{p.b, k.sx}, std::pair{p.c, k.sy}}) {
      DS_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
      DS_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof stride));
    }
  }
  cublasLtMatmulPreference_t pref;
  DS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  DS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t res[4];
  int n = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle(), p.desc, p.a, p.b, p.c, p.c, pref, 4, res, &n);
  cublasLtMatmulPreferenceDestroy(pref);
  DS_CHECK(st == CUBLAS_STATUS_SUCCESS && n > 0)
      << "cuBLASLt has no algorithm for " << (k.kind == 1 ? "FP8 block-scaled" : k.kind == 2 ? "FP32" : "BF16")
      << " GEMM M=" << k.M
      << " N=" << k.N << " K=" << k.K << " ldx=" << k.ldx << " ldw=" << k.ldw << " ldy=" << k.ldy
      << " (" << CublasStatusName(st) << ")";
  p.algo = res[0].algo;
  return p;
}

// A matmul descriptor carrying this call's FP8 block-scale pointers. FP8 calls get a fresh
// descriptor every time (the cached plan keeps only layouts and the algorithm): run 4 on the
// H200 showed wrong results when one cached descriptor was re-pointed at another layer's
// scales between calls of the same shape (suspected cuBLASLt caching of the first pointers).
cublasLtMatmulDesc_t MakeFp8Desc(const float* a_scale, const float* b_scale) {
  cublasLtMatmulDesc_t d = nullptr;
  DS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode));
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode));
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
  DS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
  return d;
}

void Run(const PlanKey& key, cudaDataType_t ab, cudaDataType_t out, const void* w, const void* x, void* y,
         const float* a_scale, const float* b_scale, float beta, cudaStream_t stream, void* own_workspace) {
  Lt& lt = Lt::Get();
  std::lock_guard<std::mutex> lock(lt.mu);
  void* const ws = own_workspace ? own_workspace : lt.workspace();
  auto it = lt.plans.find(key);
  if (it == lt.plans.end()) it = lt.plans.emplace(key, MakePlan(key, ab, out, a_scale, b_scale)).first;
  Plan& p = it->second;
  const float alpha = 1.0f;
  if (key.kind == 1) {
    cublasLtMatmulDesc_t d = MakeFp8Desc(a_scale, b_scale);
    const cublasStatus_t st = cublasLtMatmul(lt.handle(), d, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                             ws, kWorkspaceBytes, stream);
    cublasLtMatmulDescDestroy(d);
    DS_CUBLAS_CHECK(st);
    return;
  }
  DS_CUBLAS_CHECK(cublasLtMatmul(lt.handle(), p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                 ws, kWorkspaceBytes, stream));
}

}  // namespace

bool GemmFp8Supported(int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldy, DTypeOut y_type) {
  if (K % 16 != 0 || ldx % 16 != 0 || ldw % 16 != 0) return false;
  PlanKey key{1, Fp8PaddedM(M), N, K, ldx, ldw, ldy, int(y_type), 0};
  Lt& lt = Lt::Get();
  std::lock_guard<std::mutex> lock(lt.mu);
  auto it = lt.fp8_supported.find(key);
  if (it != lt.fp8_supported.end()) return it->second;
  bool ok = true;
  if (lt.plans.find(key) == lt.plans.end()) {
    try {
      // Scale pointers are only recorded here; Run() sets the real ones per call.
      static float dummy_scale = 0.f;
      lt.plans.emplace(key, MakePlan(key, CUDA_R_8F_E4M3, y_type == DTypeOut::kF32 ? CUDA_R_32F : CUDA_R_16BF,
                                     &dummy_scale, &dummy_scale));
    } catch (const CheckError&) {
      ok = false;
    }
  }
  lt.fp8_supported[key] = ok;
  return ok;
}

void GemmBf16(const GemmBf16Params& p) {
  DS_CHECK(p.M >= 0 && p.N > 0 && p.K > 0) << "GemmBf16: bad shape M=" << p.M << " N=" << p.N << " K=" << p.K;
  DS_CHECK(p.ldx >= p.K && p.ldw >= p.K && p.ldy >= p.N) << "GemmBf16: leading dimension too small";
  if (p.M == 0) return;
  DS_CHECK(p.batch >= 1) << "GemmBf16: batch must be >= 1";
  PlanKey key{0, p.M, p.N, p.K, p.ldx, p.ldw, p.ldy, int(p.y_type), int(p.accumulate), p.batch,
              p.batch > 1 ? p.stride_x : 0, p.batch > 1 ? p.stride_w : 0, p.batch > 1 ? p.stride_y : 0};
  Run(key, CUDA_R_16BF, p.y_type == DTypeOut::kF32 ? CUDA_R_32F : CUDA_R_16BF, p.w, p.x, p.y, nullptr, nullptr,
      p.accumulate ? 1.0f : 0.0f, p.stream, p.workspace);
}

void GemmF32(const GemmF32Params& p) {
  DS_CHECK(p.M >= 0 && p.N > 0 && p.K > 0) << "GemmF32: bad shape";
  if (p.M == 0) return;
  PlanKey key{2, p.M, p.N, p.K, p.ldx, p.ldw, p.ldy, 0, 0};
  Run(key, CUDA_R_32F, CUDA_R_32F, p.w, p.x, p.y, nullptr, nullptr, 0.0f, p.stream, p.workspace);
}

void GemmFp8(const GemmFp8Params& p) {
  DS_CHECK(p.M >= 0 && p.N > 0 && p.K > 0) << "GemmFp8: bad shape M=" << p.M << " N=" << p.N << " K=" << p.K;
  DS_CHECK(p.K % 16 == 0 && p.ldx % 16 == 0 && p.ldw % 16 == 0)
      << "GemmFp8: K and leading dimensions must be multiples of 16 (K=" << p.K << ")";
  DS_CHECK(p.w_scale_ld == Fp8WeightScaleLd(p.K)) << "GemmFp8: w_scale_ld must be round_up(ceil(K/128), 4)";
  if (p.M == 0) return;
  const int64_t Mp = Fp8PaddedM(p.M);
  PlanKey key{1, Mp, p.N, p.K, p.ldx, p.ldw, p.ldy, int(p.y_type), 0};
  Run(key, CUDA_R_8F_E4M3, p.y_type == DTypeOut::kF32 ? CUDA_R_32F : CUDA_R_16BF, p.wq, p.xq, p.y, p.w_scales,
      p.x_scales, 0.0f, p.stream, p.workspace);
}

}  // namespace ds::cuda
