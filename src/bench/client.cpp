#include "bench/client.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench/sse.h"

namespace ds::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::chrono::steady_clock::duration ToDuration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

StatusOr<HttpTarget> ParseBaseUrl(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) return InvalidArgument("https base URLs are not supported: '" + url + "'");
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  HttpTarget t;
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) t.path_prefix = rest.substr(slash);
  while (!t.path_prefix.empty() && t.path_prefix.back() == '/') t.path_prefix.pop_back();
  if (hostport.empty()) return InvalidArgument("base URL has no host: '" + url + "'");
  size_t colon = hostport.rfind(':');
  if (hostport.front() == '[') {  // [v6]:port
    size_t close = hostport.find(']');
    if (close == std::string::npos) return InvalidArgument("bad IPv6 host in '" + url + "'");
    t.host = hostport.substr(1, close - 1);
    t.port = close + 1 < hostport.size() && hostport[close + 1] == ':' ? hostport.substr(close + 2) : "80";
  } else if (colon != std::string::npos) {
    t.host = hostport.substr(0, colon);
    t.port = hostport.substr(colon + 1);
  } else {
    t.host = hostport;
    t.port = "80";
  }
  if (t.port.empty() || t.port.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("bad port in base URL '" + url + "'");
  return t;
}

StatusOr<HttpResponse> HttpGet(const HttpTarget& target, const std::string& path, double timeout_s,
                               const std::string& api_key) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(target.host, target.port, ec);
  if (ec) return NotFound("resolve " + target.host + ": " + ec.message());
  stream.expires_after(ToDuration(timeout_s));
  stream.connect(results, ec);
  if (ec) return NotFound("connect " + target.host + ":" + target.port + ": " + ec.message());
  http::request<http::empty_body> req{http::verb::get, target.path_prefix + path, 11};
  req.set(http::field::host, target.host + ":" + target.port);
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  http::write(stream, req, ec);
  if (ec) return NotFound("write: " + ec.message());
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res, ec);
  if (ec) return NotFound("read: " + ec.message());
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return HttpResponse{static_cast<int>(res.result_int()), std::move(res.body())};
}

// ---- StreamAccumulator ----

bool StreamAccumulator::OnEvent(const std::string& data, double t) {
  if (done_ || !error_.empty()) return false;
  ++events_;
  auto chunk = ParseStreamChunk(data);
  if (!chunk.ok()) {
    error_ = chunk.status().message();
    return false;
  }
  if (chunk->done) {
    done_ = true;
    return false;
  }
  if (!chunk->error.empty()) {
    error_ = "error chunk: " + chunk->error;
    return false;
  }
  if (chunk->has_choice && first_finish_ < 0 && !chunk->finish_reason.empty()) first_finish_ = t;
  if (chunk->num_token_ids > 0) streamed_token_ids_ += chunk->num_token_ids;
  if (chunk->has_content) {
    if (content_chunks_ == 0)
      ttft_ = t;
    else
      itl_.push_back(t - last_);
    last_ = t;
    ++content_chunks_;
  }
  if (chunk->completion_tokens) completion_tokens_ = *chunk->completion_tokens;
  if (chunk->prompt_tokens) prompt_tokens_ = *chunk->prompt_tokens;
  if (chunk->cached_tokens) cached_tokens_ = *chunk->cached_tokens;
  return true;
}

void StreamAccumulator::Finish(double t_end, int fallback_prompt_tokens, RequestOutcome* out) const {
  out->e2e_s = t_end;
  out->ttft_s = ttft_;
  out->itl_s = itl_;
  out->usage_reported = completion_tokens_ >= 0;
  out->output_tokens = completion_tokens_ >= 0 ? completion_tokens_
                      : streamed_token_ids_ > 0 ? streamed_token_ids_
                                                : content_chunks_;
  out->prompt_tokens = prompt_tokens_ >= 0 ? prompt_tokens_ : fallback_prompt_tokens;
  out->cached_tokens = cached_tokens_;
  if (!error_.empty()) {
    out->success = false;
    out->error = error_;
  } else if (content_chunks_ == 0 && completion_tokens_ > 0) {
    // Tokens were generated (usage says so) but none was streamed with text: e.g. special
    // tokens skipped in decoding. The first token is seen when the final choice arrives.
    out->success = true;
    out->ttft_s = first_finish_ >= 0 ? first_finish_ : t_end;
    out->tokens_streamed = false;  // no per-token timing: excluded from TPOT
  } else if (content_chunks_ == 0) {
    out->success = false;
    out->error = events_ == 0 ? "no SSE events in the response (did the server stream?)"
                              : "stream ended without any token";
  } else {
    out->success = true;
  }
}

// ---- the run ----

namespace {

struct RunState {
  asio::io_context ioc;
  const HttpTarget* target = nullptr;
  const StreamRunOptions* opt = nullptr;
  const BodyFn* body = nullptr;
  const std::vector<double>* arrivals = nullptr;
  const std::vector<int>* fallback = nullptr;
  tcp::resolver::results_type endpoints;  // resolved once for the run
  std::string resolve_error;
  std::vector<RequestOutcome> outcomes;
  Clock::time_point start;
  std::atomic<Clock::time_point::rep> end_ticks{0};
  // Dispatcher-strand state.
  asio::strand<asio::io_context::executor_type> dispatch_strand{ioc.get_executor()};
  asio::steady_timer slot_timer{dispatch_strand};
  asio::steady_timer arrival_timer{dispatch_strand};
  int in_flight = 0;
  size_t dispatched = 0;                 // requests spawned (dispatcher strand)
  // Interruption (StreamRunOptions::stop_on_signal): the signal set, the flag every loop
  // checks, and the streams in flight (by request index) so that they can be cancelled.
  std::unique_ptr<asio::signal_set> signals;
  std::atomic<bool> interrupted{false};
  std::mutex active_mu;
  std::unordered_map<size_t, beast::tcp_stream*> active;
  std::vector<uint8_t> ended_after_interrupt;  // [n]: request i ended after the signal
  std::atomic<size_t> finished{0};
  std::atomic<size_t> failed{0};
  std::atomic<long long> out_tokens{0};

  explicit RunState() = default;
};

std::string Truncate(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// One streamed request. Writes only outcomes[i].
asio::awaitable<void> StreamOne(RunState* st, size_t i) {
  RequestOutcome& out = st->outcomes[i];
  const auto& opt = *st->opt;
  int fallback = (*st->fallback)[i];
  auto body = (*st->body)(i);
  if (!body.ok()) {
    out.error = "request body: " + body.status().message();
    co_return;
  }
  auto ex = co_await asio::this_coro::executor;
  beast::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  const auto timeout = ToDuration(opt.timeout_s);
  auto t0 = Clock::now();
  out.start_s = Seconds(t0 - st->start);
  if (!st->resolve_error.empty()) {
    out.error = st->resolve_error;
    co_return;
  }
  beast::tcp_stream stream(ex);
  {
    std::lock_guard<std::mutex> lk(st->active_mu);
    st->active.emplace(i, &stream);
  }
  struct Unregister {
    RunState* st;
    size_t i;
    ~Unregister() {
      std::lock_guard<std::mutex> lk(st->active_mu);
      st->active.erase(i);
    }
  } unregister{st, i};
  if (st->interrupted.load()) {
    out.error = kInterruptedError;
    co_return;
  }
  stream.expires_after(timeout);
  co_await stream.async_connect(st->endpoints, tok);
  if (ec) {
    out.error = "connect " + st->target->host + ":" + st->target->port + ": " + ec.message();
    co_return;
  }
  http::request<http::string_body> req{http::verb::post, st->target->path_prefix + opt.path, 11};
  req.set(http::field::host, st->target->host + ":" + st->target->port);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  if (!opt.api_key.empty()) req.set(http::field::authorization, "Bearer " + opt.api_key);
  req.body() = std::move(body).value();
  req.prepare_payload();
  stream.expires_after(timeout);
  co_await http::async_write(stream, req, tok);
  if (ec) {
    out.error = "write: " + ec.message();
    co_return;
  }
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  stream.expires_after(timeout);
  co_await http::async_read_header(stream, buf, parser, tok);
  if (ec) {
    out.error = "read header: " + ec.message();
    co_return;
  }
  out.http_status = static_cast<int>(parser.get().result_int());
  const bool ok_status = out.http_status == 200;
  std::string error_body;
  SseParser sse;
  StreamAccumulator acc;
  std::vector<std::string> events;
  static constexpr size_t kBuf = 16384;
  auto chunk = std::make_unique<char[]>(kBuf);
  bool keep_going = true;
  std::string read_error;
  while (keep_going && !parser.is_done()) {
    parser.get().body().data = chunk.get();
    parser.get().body().size = kBuf;
    stream.expires_after(timeout);
    co_await http::async_read_some(stream, buf, parser, tok);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      read_error = "read body: " + ec.message();
      break;
    }
    size_t n = kBuf - parser.get().body().size;
    if (n == 0) continue;
    double t = Seconds(Clock::now() - t0);
    if (!ok_status) {
      if (error_body.size() < 4096) error_body.append(chunk.get(), n);
      continue;
    }
    events.clear();
    sse.Feed(std::string_view(chunk.get(), n), &events);
    for (const auto& e : events)
      if (!acc.OnEvent(e, t)) { keep_going = false; break; }
    if (sse.buffered() > (64u << 20)) {  // no line break in 64 MB: not an event stream
      read_error = "response is not an event stream (64 MB without a line break)";
      break;
    }
  }
  double t_end = Seconds(Clock::now() - t0);
  if (ok_status && keep_going && read_error.empty()) {  // stream closed without [DONE]
    events.clear();
    sse.Finish(&events);
    for (const auto& e : events)
      if (!acc.OnEvent(e, t_end)) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  if (!ok_status) {
    out.error = "HTTP " + std::to_string(out.http_status) + ": " + Truncate(error_body, 300);
    co_return;
  }
  acc.Finish(t_end, fallback, &out);
  if (!read_error.empty() && out.success) {  // the connection broke mid-stream
    out.success = false;
    out.error = read_error;
  }
  co_return;
}

// Ends the run early (on the signal set's handler): nothing more is dispatched, every stream
// in flight is cancelled on its own strand (where it also unregisters, so the pointer is
// live), and the dispatcher's timers are cancelled so that its loop sees the flag.
void Interrupt(RunState* st) {
  if (st->interrupted.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lk(st->active_mu);
    for (auto& [i, stream] : st->active) {
      asio::post(stream->get_executor(), [st, i = i] {
        std::lock_guard<std::mutex> lk2(st->active_mu);
        auto it = st->active.find(i);
        if (it != st->active.end()) it->second->cancel();
      });
    }
  }
  asio::post(st->dispatch_strand, [st] {
    st->arrival_timer.cancel();
    st->slot_timer.cancel();
  });
}

void OnRequestDone(RunState* st, size_t i) {
  const auto& r = st->outcomes[i];
  st->ended_after_interrupt[i] = st->interrupted.load();
  if (!r.success) st->failed.fetch_add(1);
  st->out_tokens.fetch_add(r.success ? r.output_tokens : 0);
  asio::post(st->dispatch_strand, [st] {
    --st->in_flight;
    st->slot_timer.cancel();
    if (st->finished.fetch_add(1) + 1 == st->outcomes.size()) {
      st->end_ticks.store(Clock::now().time_since_epoch().count());
      if (st->signals) st->signals->cancel();  // its pending wait would keep run() going
    }
  });
}

asio::awaitable<void> Dispatch(RunState* st) {
  beast::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  asio::steady_timer& timer = st->arrival_timer;
  const auto& arrivals = *st->arrivals;
  const int max_conc = st->opt->max_concurrency;
  for (size_t i = 0; i < st->outcomes.size(); ++i) {
    auto due = st->start + ToDuration(arrivals[i]);
    if (Clock::now() < due && !st->interrupted.load()) {
      timer.expires_at(due);
      co_await timer.async_wait(tok);
    }
    while (max_conc > 0 && st->in_flight >= max_conc && !st->interrupted.load()) {
      st->slot_timer.expires_at(Clock::time_point::max());
      co_await st->slot_timer.async_wait(tok);  // cancelled when a request finishes
    }
    if (st->interrupted.load()) {
      // Stopped: the end time is the interruption; pending timers end with the signal set.
      st->end_ticks.store(Clock::now().time_since_epoch().count());
      co_return;
    }
    ++st->in_flight;
    ++st->dispatched;
    asio::co_spawn(asio::make_strand(st->ioc), StreamOne(st, i), [st, i](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          st->outcomes[i].success = false;
          st->outcomes[i].error = std::string("exception: ") + ex.what();
        }
      }
      OnRequestDone(st, i);
    });
  }
}

// Thousands of streams in flight need more descriptors than the usual soft limit of 1024.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

void ProgressLoop(RunState* st, std::atomic<bool>* stop) {
  const bool tty = isatty(fileno(stderr));
  const size_t n = st->outcomes.size();
  auto last_print = Clock::now() - std::chrono::hours(1);
  for (;;) {
    bool stopping = stop->load();
    auto now = Clock::now();
    double interval = tty ? 0.25 : 10.0;
    if (stopping || Seconds(now - last_print) >= interval) {
      last_print = now;
      size_t done = st->finished.load();
      double el = Seconds(now - st->start);
      const int width = 30;
      int fill = n ? static_cast<int>(width * done / n) : width;
      std::string bar(fill, '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "%s%s [%s] %zu/%zu  %.1fs  %.2f req/s  %.1f tok/s  failed %zu%s",
                   tty ? "\r" : "", st->opt->progress_label.c_str(), bar.c_str(), done, n, el,
                   el > 0 ? done / el : 0.0, el > 0 ? st->out_tokens.load() / el : 0.0,
                   st->failed.load(), tty ? "\x1b[K" : "\n");
      std::fflush(stderr);
    }
    if (stopping) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (tty) std::fprintf(stderr, "\n");
}

}  // namespace

StreamRunResult RunStreamingRequests(const HttpTarget& target, const StreamRunOptions& opt,
                                     const std::vector<double>& arrivals, const BodyFn& body,
                                     const std::vector<int>& fallback_prompt_tokens) {
  StreamRunResult result;
  const size_t n = arrivals.size();
  if (n == 0) return result;
  auto st = std::make_unique<RunState>();
  st->target = &target;
  st->opt = &opt;
  st->body = &body;
  st->arrivals = &arrivals;
  std::vector<int> fallback = fallback_prompt_tokens;
  fallback.resize(n, 0);
  st->fallback = &fallback;
  st->outcomes.resize(n);
  st->ended_after_interrupt.assign(n, 0);
  {
    beast::error_code ec;
    tcp::resolver resolver(st->ioc);
    st->endpoints = resolver.resolve(target.host, target.port, ec);
    if (ec) st->resolve_error = "resolve " + target.host + ":" + target.port + ": " + ec.message();
  }
  RaiseOpenFileLimit();
  st->start = Clock::now();
  if (opt.stop_on_signal) {
    st->signals = std::make_unique<asio::signal_set>(st->ioc, SIGINT, SIGTERM);
    st->signals->async_wait([s = st.get()](const beast::error_code& ec, int sig) {
      if (ec) return;  // cancelled: the run finished
      std::fprintf(stderr, "\n%s: signal %d: stopping (no new requests, cancelling those in flight)\n",
                   s->opt->progress_label.c_str(), sig);
      Interrupt(s);
    });
  }
  asio::co_spawn(st->dispatch_strand, Dispatch(st.get()), asio::detached);
  std::atomic<bool> stop{false};
  std::thread progress;
  if (opt.progress) progress = std::thread(ProgressLoop, st.get(), &stop);
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(1, opt.num_threads); ++t) threads.emplace_back([&] { st->ioc.run(); });
  st->ioc.run();
  for (auto& t : threads) t.join();
  stop.store(true);
  if (progress.joinable()) progress.join();
  if (st->signals) {
    // A stop signal can come twice: timeout(1) sends it to the command and then to its process
    // group, and on a loaded machine the second can land after the run has ended. Once a signal
    // has stopped the run, both are ignored from here on, so a late duplicate cannot kill the
    // process before it writes its report; the signal set is torn down with them blocked (this
    // is the only thread left), so there is no window in between.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    st->signals.reset();
    if (st->interrupted.load()) {
      std::signal(SIGINT, SIG_IGN);
      std::signal(SIGTERM, SIG_IGN);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  auto end_ticks = st->end_ticks.load();
  Clock::time_point end = end_ticks ? Clock::time_point(Clock::duration(end_ticks)) : Clock::now();
  result.duration_s = Seconds(end - st->start);
  result.interrupted = st->interrupted.load();
  if (result.interrupted) {
    // Requests not spawned keep a default outcome; spawned ones that did not succeed after the
    // signal were cut off by it (their own error, e.g. "operation canceled", is replaced).
    for (size_t i = 0; i < n; ++i) {
      RequestOutcome& o = st->outcomes[i];
      if (i >= st->dispatched) {
        o.success = false;
        o.error = kNotSentError;
        ++result.num_not_sent;
      } else if (!o.success && st->ended_after_interrupt[i]) {
        o.error = kInterruptedError;
        ++result.num_interrupted;
      }
    }
  }
  result.outcomes = std::move(st->outcomes);
  return result;
}

}  // namespace ds::bench
