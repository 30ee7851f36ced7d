#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/logging.h"

namespace ds {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* HttpStatusText(int s) {
  switch (s) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  // responding / stopping: the server's count of responses in progress and its stop flag (shared,
  // so that a session a handler still holds after the server is gone touches live memory).
  Session(tcp::socket socket, const HttpServerOptions& opts, const HttpHandler& handler,
          std::shared_ptr<std::atomic<int>> responding, std::shared_ptr<std::atomic<bool>> stopping)
      : socket_(std::move(socket)), strand_(socket_.get_executor()), idle_timer_(strand_),
        opts_(opts), handler_(handler), responding_(std::move(responding)), stopping_(std::move(stopping)) {}
  ~Session() { EndResponse(); }

  void Start() { net::dispatch(strand_, [self = shared_from_this()] { self->DoRead(); }); }

  // ---- called through the writer, on the strand ----
  void QueueWrite(std::string data, bool end_of_response) {
    if (dead_) return;
    out_.push_back(std::move(data));
    if (end_of_response) response_done_ = true;
    if (!writing_) DoWrite();
  }
  void SetOnClose(std::function<void()> fn) {
    if (dead_ || client_gone_) { fn(); return; }
    on_close_ = std::move(fn);
  }
  bool dead() const { return dead_ || client_gone_; }
  net::strand<net::any_io_executor>& strand() { return strand_; }
  bool keep_alive_ = true;
  std::atomic<bool> gone{false};  // readable from any thread

 private:
  // Closes a connection that sends no complete request within idle_timeout_s (keep-alive
  // clients that went quiet; half-sent requests). Disarmed while a request is answered.
  void ArmIdle() {
    if (opts_.idle_timeout_s <= 0) return;
    idle_timer_.expires_after(std::chrono::seconds(opts_.idle_timeout_s));
    idle_timer_.async_wait(net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec) {
      if (ec || self->in_request_) return;
      self->Close();
    }));
  }
  void DoRead() {
    ArmIdle();
    parser_.emplace();
    parser_->body_limit(opts_.body_limit);
    parser_->header_limit(64 * 1024);
    http::async_read_header(socket_, buf_, *parser_,
                            net::bind_executor(strand_, [self = shared_from_this()](
                                                            beast::error_code ec, size_t) {
                              self->OnHeader(ec);
                            }));
  }
  // "Expect: 100-continue" (curl does this for bodies over 1 KiB): answer before the body.
  void OnHeader(beast::error_code ec) {
    if (ec || parser_->is_done()) { OnRead(ec); return; }
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(socket_, net::buffer(*msg),
                       net::bind_executor(strand_, [self = shared_from_this(), msg](
                                                       beast::error_code wec, size_t) {
                         if (wec) { self->Close(); return; }
                         self->ReadBody();
                       }));
      return;
    }
    ReadBody();
  }
  void ReadBody() {
    http::async_read(socket_, buf_, *parser_,
                     net::bind_executor(strand_, [self = shared_from_this()](
                                                     beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     }));
  }

  void OnRead(beast::error_code ec);
  void Watch();
  void DoWrite() {
    if (out_.empty()) {
      writing_ = false;
      if (response_done_) OnResponseDone();
      return;
    }
    writing_ = true;
    auto data = std::make_shared<std::string>(std::move(out_.front()));
    out_.pop_front();
    net::async_write(socket_, net::buffer(*data),
                     net::bind_executor(strand_, [self = shared_from_this(), data](
                                                     beast::error_code ec, size_t) {
                       if (ec) {
                         DS_LOG(DEBUG) << "http: write failed: " << ec.message();
                         self->ClientGone();
                         return;
                       }
                       self->DoWrite();
                     }));
  }
  // The server-wide count of responses in progress (HttpServer::Stop waits for it): from the
  // dispatch of a request until its last byte is written or the connection is gone.
  void BeginResponse() {
    if (counted_) return;
    counted_ = true;
    responding_->fetch_add(1);
  }
  void EndResponse() {
    if (!counted_) return;
    counted_ = false;
    responding_->fetch_sub(1);
  }
  void OnResponseDone() {
    EndResponse();
    in_request_ = false;
    on_close_ = nullptr;
    response_done_ = false;
    if (!keep_alive_ || stopping_->load()) { Close(); return; }  // no new request while the server stops
    if (!watching_) DoRead();  // else the watcher continues into the next request
    else ArmIdle();
  }
  void ClientGone() {
    if (client_gone_) return;
    client_gone_ = true;
    out_.clear();
    if (on_close_) { auto fn = std::move(on_close_); on_close_ = nullptr; fn(); }
    Close();
  }
  void Close() {
    EndResponse();
    if (dead_) return;
    dead_ = true;
    gone.store(true);
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  tcp::socket socket_;
  net::strand<net::any_io_executor> strand_;
  net::steady_timer idle_timer_;
  const HttpServerOptions& opts_;
  const HttpHandler& handler_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  bool writing_ = false, response_done_ = false, in_request_ = false, watching_ = false;
  bool dead_ = false, client_gone_ = false;
  std::function<void()> on_close_;
  std::shared_ptr<std::atomic<int>> responding_;
  std::shared_ptr<std::atomic<bool>> stopping_;
  bool counted_ = false;
};

class Writer : public ResponseWriter {
 public:
  explicit Writer(std::shared_ptr<Session> s) : s_(std::move(s)) {}
  void Send(int status, const std::string& content_type, std::string body,
            const std::vector<std::pair<std::string, std::string>>& headers) override {
    if (started_.exchange(true)) return;
    std::string h = "HTTP/1.1 " + std::to_string(status) + " " + HttpStatusText(status) + "\r\n";
    h += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (auto& [k, v] : headers) h += k + ": " + v + "\r\n";
    h += s_->keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    h += body;
    Post(std::move(h), true);
  }
  void StartStream(int status, const std::string& content_type) override {
    if (started_.exchange(true)) return;
    streaming_ = true;
    std::string h = "HTTP/1.1 " + std::to_string(status) + " " + HttpStatusText(status) + "\r\n";
    h += "Content-Type: " + content_type + "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    h += s_->keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    Post(std::move(h), false);
  }
  void Write(std::string data) override {
    if (!streaming_ || data.empty()) return;
    char hex[20];
    std::snprintf(hex, sizeof(hex), "%zx\r\n", data.size());
    Post(hex + std::move(data) + "\r\n", false);
  }
  void End() override {
    if (!streaming_ || ended_.exchange(true)) return;
    Post("0\r\n\r\n", true);
  }
  void OnClose(std::function<void()> fn) override {
    net::post(s_->strand(), [s = s_, fn = std::move(fn)]() mutable { s->SetOnClose(std::move(fn)); });
  }
  bool closed() const override { return s_->gone.load(); }

 private:
  void Post(std::string data, bool end) {
    net::post(s_->strand(), [s = s_, data = std::move(data), end]() mutable {
      s->QueueWrite(std::move(data), end);
    });
  }
  std::shared_ptr<Session> s_;
  std::atomic<bool> started_{false}, ended_{false};
  std::atomic<bool> streaming_{false};
};

void Session::OnRead(beast::error_code ec) {
  idle_timer_.cancel();
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    in_request_ = true;
    BeginResponse();
    std::string body = R"({"error":{"message":"request body exceeds the limit of )" +
                       std::to_string(opts_.body_limit) +
                       R"( bytes","type":"invalid_request_error","param":null,"code":"request_too_large"}})";
    std::string h = "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    QueueWrite(std::move(h), true);
    return;
  }
  if (ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted) {
    Close();
    return;
  }
  if (ec) {
    keep_alive_ = false;
    in_request_ = true;
    BeginResponse();
    std::string body = R"({"error":{"message":"malformed HTTP request","type":"invalid_request_error","param":null,"code":null}})";
    QueueWrite("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body, true);
    return;
  }
  http::request<http::string_body> msg = parser_->release();
  keep_alive_ = msg.keep_alive();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    req.headers[name] = std::string(f.value());
  }
  req.body = std::move(msg.body());
  in_request_ = true;
  BeginResponse();
  Watch();
  std::shared_ptr<ResponseWriter> writer = std::make_shared<Writer>(shared_from_this());
  try {
    handler_(std::move(req), writer);
  } catch (const std::exception& e) {
    DS_LOG(ERROR) << "http handler: " << e.what();
    writer->Send(500, "application/json",
                 R"({"error":{"message":"internal error","type":"internal_error","param":null,"code":null}})");
  }
}

// One outstanding read while a response is in progress: EOF/reset means the client left.
void Session::Watch() {
  if (watching_ || dead_) return;
  watching_ = true;
  socket_.async_read_some(
      buf_.prepare(4096),
      net::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->watching_ = false;
        if (ec) {
          DS_LOG(DEBUG) << "http: connection read ended: " << ec.message();
          if (self->in_request_) self->ClientGone();
          else self->Close();
          return;
        }
        self->buf_.commit(n);
        // Bytes while a response is still going out: the next (pipelined) request, or the
        // client's next request racing our write completion. Stop watching; OnResponseDone
        // parses it from the buffer.
        if (!self->in_request_) self->DoRead();
      }));
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions opts;
  HttpHandler handler;
  // Responses in progress (Session::BeginResponse / EndResponse: from a request's dispatch to its
  // last byte written or the connection's end) and the stop flag; shared with the sessions.
  std::shared_ptr<std::atomic<int>> responding = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::atomic<bool> accepting{true};
  int port = 0;

  void Accept() {
    acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (!accepting.load() || !acceptor->is_open()) return;
      if (!ec) {
        beast::error_code ig;
        s.set_option(tcp::no_delay(true), ig);
        std::make_shared<Session>(std::move(s), opts, handler, responding, stopping)->Start();
      } else if (ec == net::error::no_descriptors) {
        DS_LOG(WARNING) << "accept: out of file descriptors";
      }
      Accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(options);
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  beast::error_code ec;
  auto addr = net::ip::make_address(impl_->opts.host, ec);
  if (ec) {
    tcp::resolver res(impl_->ioc);
    auto r = res.resolve(impl_->opts.host, std::to_string(impl_->opts.port), ec);
    if (ec || r.empty()) return InvalidArgument("cannot resolve host '" + impl_->opts.host + "'");
    addr = r.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, static_cast<unsigned short>(impl_->opts.port));
  impl_->acceptor.emplace(impl_->ioc);
  impl_->acceptor->open(ep.protocol(), ec);
  if (!ec) impl_->acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor->bind(ep, ec);
  if (!ec) impl_->acceptor->listen(4096, ec);
  if (ec)
    return InvalidArgument("cannot listen on " + impl_->opts.host + ":" +
                           std::to_string(impl_->opts.port) + ": " + ec.message());
  impl_->port = impl_->acceptor->local_endpoint().port();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->opts.io_threads); ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::StopAccepting() {
  impl_->accepting.store(false);
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    if (impl_->acceptor) impl_->acceptor->close(ec);
  });
}

void HttpServer::Stop() {
  if (impl_->threads.empty()) return;
  StopAccepting();
  impl_->stopping->store(true);  // keep-alive connections take no further request
  // Responses whose last chunks are still queued on their connections go out first: stopping the
  // io_context abandons queued writes, and a client of a drained request (serve's SIGTERM path:
  // the request has finished, its End() is posted) would see the connection cut mid-stream.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(impl_->opts.stop_drain_ms);
  while (impl_->responding->load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace ds
