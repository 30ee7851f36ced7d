#include "backend/cuda/stream.h"

#include <cstdio>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace ds::cuda {

Stream::Stream() { DS_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::Stream(int priority) { DS_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority)); }
Stream::~Stream() { if (s_) cudaStreamDestroy(s_); }
void Stream::Synchronize() const { DS_CUDA_CHECK(cudaStreamSynchronize(s_)); }

EventTimer::EventTimer(cudaStream_t s) : s_(s) {
  DS_CUDA_CHECK(cudaEventCreate(&a_));
  DS_CUDA_CHECK(cudaEventCreate(&b_));
}
EventTimer::~EventTimer() {
  if (a_) cudaEventDestroy(a_);
  if (b_) cudaEventDestroy(b_);
}
void EventTimer::Start() { DS_CUDA_CHECK(cudaEventRecord(a_, s_)); }
float EventTimer::StopMs() {
  DS_CUDA_CHECK(cudaEventRecord(b_, s_));
  DS_CUDA_CHECK(cudaEventSynchronize(b_));
  float ms = 0;
  DS_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
  return ms;
}

const char* DescribeDevice(int device) {
  thread_local std::string desc;  // runners may be made on several threads (one per DP rank)
  DS_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp p{};
  DS_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
                p.multiProcessorCount, p.totalGlobalMem / double(1 << 30));
  desc = buf;
  return desc.c_str();
}

}  // namespace ds::cuda
