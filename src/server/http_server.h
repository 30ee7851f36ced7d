// A small HTTP/1.1 server on Boost.Asio/Beast: a fixed pool of I/O threads runs every
// connection asynchronously (no thread per connection). Requests are parsed with Beast
// (body size limit -> 413); responses are written as raw HTTP/1.1 (Content-Length, or
// chunked transfer encoding for streams such as SSE).
//
// While a request is being answered the session keeps one read outstanding on the socket,
// so a client that closes the connection is noticed at once (ResponseWriter::OnClose fires)
// even when nothing is being written; that read also picks up the next keep-alive request.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace ds {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // path with query
  std::string path;     // path without query
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Thread-safe handle to one in-flight response; every call may come from any thread.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response.
  virtual void Send(int status, const std::string& content_type, std::string body,
                    const std::vector<std::pair<std::string, std::string>>& headers = {}) = 0;
  // Starts a chunked response; then Write() chunks and End().
  virtual void StartStream(int status, const std::string& content_type) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;
  // `fn` runs once (on an I/O thread) if the client goes away before the response ended.
  // If it is already gone, `fn` runs immediately.
  virtual void OnClose(std::function<void()> fn) = 0;
  virtual bool closed() const = 0;
};

using HttpHandler = std::function<void(HttpRequest&&, std::shared_ptr<ResponseWriter>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;           // 0: pick a free port
  int io_threads = 2;
  size_t body_limit = 8 << 20;  // bytes; larger bodies get 413
  int idle_timeout_s = 60;      // close connections idle this long between requests (0 = never)
  // Stop() first waits up to this long for the responses in progress (a streamed response
  // whose last chunks are still queued) to be written out; a response its handler never ends
  // holds it for the whole time. Connections take no new request meanwhile.
  int stop_drain_ms = 3000;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  // Binds and starts the I/O threads. Error: the address is unusable.
  Status Start();
  int port() const;
  // Stops accepting new connections (existing ones continue).
  void StopAccepting();
  // Stops accepting, lets the responses in progress finish writing (up to
  // HttpServerOptions::stop_drain_ms), then stops everything and joins the I/O threads.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "Reason phrase" for a status code.
const char* HttpStatusText(int status);

}  // namespace ds
