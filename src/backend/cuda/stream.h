// CUDA streams and events for the CUDA backend (RAII, every call checked).
#pragma once

#include <cuda_runtime.h>

namespace ds::cuda {

class Stream {
 public:
  Stream();  // a new non-blocking stream
  // A new non-blocking stream of this priority (cudaStreamCreateWithPriority: lower numbers are
  // higher priorities, within cudaDeviceGetStreamPriorityRange; 0 is the default's).
  explicit Stream(int priority);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void Synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// Elapsed device time between two points on a stream, in milliseconds.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t s);
  ~EventTimer();
  void Start();
  float StopMs();  // records the stop event, synchronises on it, returns ms since Start

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// Sets the current device and returns a one-line description (name, SMs, memory), valid on
// the calling thread until its next call.
const char* DescribeDevice(int device = 0);

}  // namespace ds::cuda
