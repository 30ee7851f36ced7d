// The benchmark's HTTP client: many concurrent streamed (SSE) POSTs on a few threads
// (Boost.Asio C++20 coroutines + Beast HTTP/1.1), each request timed from send to end.
//
// Scheduling: request i is sent at start + arrivals[i] or, if max_concurrency requests are
// already in flight, as soon as one finishes (first come, first served; vLLM's semaphore).
// TTFT/E2E start when the request is sent (connect included), so time spent waiting for a
// concurrency slot is not counted. One TCP connection per request.
// Failures (resolve/connect/read errors, HTTP status != 200, an error chunk, a stream with
// no tokens) are recorded in that request's RequestOutcome; nothing throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "common/status.h"

namespace ds::bench {

struct HttpTarget {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string path_prefix;  // from a base URL like http://h:p/prefix (no trailing '/')
};
// "http://host[:port][/prefix]" (https is not supported: benchmark a local server).
StatusOr<HttpTarget> ParseBaseUrl(const std::string& url);

struct HttpResponse {
  int status = 0;
  std::string body;
};
// Blocking GET of target.path_prefix + path (e.g. /v1/models).
StatusOr<HttpResponse> HttpGet(const HttpTarget& target, const std::string& path, double timeout_s,
                               const std::string& api_key = "");

struct StreamRunOptions {
  std::string path = "/v1/completions";  // appended to target.path_prefix
  int max_concurrency = 0;               // <= 0: unbounded
  int num_threads = 1;                   // I/O threads
  double timeout_s = 3600;               // per read/connect inactivity timeout
  std::string api_key;                   // sent as "Authorization: Bearer ..." when set
  bool progress = true;                  // progress bar on stderr
  std::string progress_label = "bench";
  // SIGINT / SIGTERM end the run early instead of killing the process: no further request is
  // sent, the streams in flight are cancelled, and the run returns what it has (see
  // StreamRunResult::interrupted). When the run ends by itself the default dispositions are back;
  // when a signal stopped it, both signals are ignored for the rest of the process (a duplicate,
  // as timeout(1) sends one to the process group too, must not cut off the report).
  bool stop_on_signal = false;
};

// Builds the body of request i when it is sent (may run on any I/O thread concurrently).
using BodyFn = std::function<StatusOr<std::string>(size_t i)>;

struct StreamRunResult {
  std::vector<RequestOutcome> outcomes;  // [n], in dataset order
  double duration_s = 0;                 // first send -> last completion (or the interruption)
  // Set when a signal ended the run (stop_on_signal): the requests then in flight end with
  // error kInterruptedError (RequestOutcome::error), those not yet sent with kNotSentError.
  bool interrupted = false;
  int num_interrupted = 0;               // in flight at the signal
  int num_not_sent = 0;
};
inline constexpr const char* kInterruptedError = "interrupted (in flight when the run was stopped)";
inline constexpr const char* kNotSentError = "not sent (the run was stopped first)";

// Runs n requests. arrivals: [n] seconds from the start (non-decreasing); fallback_prompt_tokens:
// [n] prompt lengths used when the server reports no usage.
StreamRunResult RunStreamingRequests(const HttpTarget& target, const StreamRunOptions& opt,
                                     const std::vector<double>& arrivals, const BodyFn& body,
                                     const std::vector<int>& fallback_prompt_tokens);

// Stream-processing state of one request, fed with SSE payloads and their arrival times;
// exposed for tests. Times are seconds since the request was sent.
class StreamAccumulator {
 public:
  // Returns false once the request has failed (bad chunk or error chunk) or finished ([DONE]).
  bool OnEvent(const std::string& data, double t);
  // Fills `out` (ttft, itl, token counts, success/error) given the end time and HTTP status.
  void Finish(double t_end, int fallback_prompt_tokens, RequestOutcome* out) const;
  int content_chunks() const { return content_chunks_; }

 private:
  int content_chunks_ = 0;
  int events_ = 0;
  int streamed_token_ids_ = 0;  // sum of token_ids lengths (when the server sends them)
  double ttft_ = 0, last_ = 0;
  double first_finish_ = -1;  // first chunk with a finish_reason (fallback TTFT)
  std::vector<double> itl_;
  int completion_tokens_ = -1, prompt_tokens_ = -1, cached_tokens_ = -1;
  bool done_ = false;
  std::string error_;
};

}  // namespace ds::bench
