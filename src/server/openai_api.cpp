#include "server/openai_api.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>

#include "common/logging.h"
#include "server/output_parsers.h"

namespace ds {

using json = nlohmann::json;

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void OpenAIServer::SendError(ResponseWriter& w, int status, const std::string& message,
                             const std::string& type, const json& param, const json& code) {
  json e = {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}};
  w.Send(status, "application/json", DumpJson(e));
}

namespace {

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// A validation failure: 400 with the offending parameter.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  json param = nullptr;
  json code = nullptr;
};

ApiError BadParam(const std::string& param, const std::string& msg) {
  return {400, msg, "invalid_request_error", param, nullptr};
}

// Field readers: absent or null -> nullopt and no error.
bool Has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

std::optional<ApiError> ReadNumber(const json& j, const char* k, double lo, double hi,
                                   bool lo_open, std::optional<double>* out) {
  if (!Has(j, k)) return std::nullopt;
  const json& v = j[k];
  if (!v.is_number()) return BadParam(k, std::string("'") + k + "' must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "'%s' must be in %s%g, %g], got %s", k, lo_open ? "(" : "[",
                  lo, hi, v.dump().c_str());
    return BadParam(k, buf);
  }
  *out = d;
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const json& j, const char* k, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out) {
  if (!Has(j, k)) return std::nullopt;
  const json& v = j[k];
  if (!v.is_number_integer())
    return BadParam(k, std::string("'") + k + "' must be an integer");
  // Large unsigned values do not fit int64: out of range.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return BadParam(k, std::string("'") + k + "' is out of range");
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    return BadParam(k, std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + std::to_string(x));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const json& j, const char* k, std::optional<bool>* out) {
  if (!Has(j, k)) return std::nullopt;
  if (!j[k].is_boolean()) return BadParam(k, std::string("'") + k + "' must be a boolean");
  *out = j[k].get<bool>();
  return std::nullopt;
}

double Lp(float x) { return std::isfinite(x) ? static_cast<double>(x) : -9999.0; }

json BytesOf(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Per-choice state of one OpenAI request.
struct Choice {
  int index = 0;
  int prompt_index = 0;
  uint64_t engine_id = 0;
  bool role_sent = false;
  bool finished = false;
  bool echo_sent = false;
  std::string text, reasoning;
  std::vector<ToolCall> calls;
  json logprobs_content = json::array();  // chat
  json cmpl_tokens = json::array(), cmpl_lps = json::array(), cmpl_top = json::array(),
       cmpl_offsets = json::array();      // completions
  size_t text_offset = 0;
  std::string finish_reason;
  json stop_reason = nullptr;
  std::string error;
  int completion_tokens = 0;
  std::vector<int32_t> token_ids;
  std::optional<ReasoningParser> rparser;
  std::optional<ToolCallParser> tparser;
};

struct Job : std::enable_shared_from_this<Job> {
  std::mutex mu;
  std::shared_ptr<ResponseWriter> w;
  EngineGroup* engine = nullptr;
  const TextTokenizer* tok = nullptr;
  std::atomic<int>* open_counter = nullptr;
  bool chat = true, stream = false, include_usage = false, echo = false;
  int logprobs = -1;       // top-k requested (chat: top_logprobs; completions: logprobs)
  bool want_logprobs = false;
  bool return_token_ids = false;  // vLLM extension: choices carry "token_ids"
  std::string id, model;
  int64_t created = 0;
  std::vector<std::string> prompt_texts;
  std::vector<int> prompt_lens;
  std::vector<int> prompt_cached;
  std::vector<Choice> choices;
  int num_finished = 0;
  bool closed = false;
  bool done = false;

  ~Job() {
    if (open_counter) open_counter->fetch_sub(1);
  }

  json ChunkBase() const {
    return {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created}, {"model", model}};
  }

  void WriteEvent(const json& j) { w->Write("data: " + DumpJson(j) + "\n\n"); }

  json LogprobsChat(const EngineOutput& o) const {
    json arr = json::array();
    for (const TokenLogprob& lp : o.logprobs) {
      std::string t = tok->TokenText(lp.token);
      json top = json::array();
      for (auto& [id2, v] : lp.top) {
        std::string tt = tok->TokenText(id2);
        top.push_back({{"token", tt}, {"logprob", Lp(v)}, {"bytes", BytesOf(tt)}});
      }
      arr.push_back({{"token", t}, {"logprob", Lp(lp.logprob)}, {"bytes", BytesOf(t)},
                     {"top_logprobs", top}});
    }
    return arr;
  }

  void OnOutput(int ci, EngineOutput&& o) {
    std::lock_guard<std::mutex> lock(mu);
    Choice& c = choices[ci];
    if (c.finished) return;
    c.completion_tokens = o.num_output_tokens;
    c.token_ids.insert(c.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
    if (o.finished) {
      prompt_cached[c.prompt_index] = o.num_cached_tokens;
      prompt_lens[c.prompt_index] = o.num_prompt_tokens;
    }
    // Text through the parsers.
    std::string content = o.text, reasoning;
    std::vector<ToolCall> calls;
    if (c.rparser) {
      auto d = c.rparser->Feed(content);
      if (o.finished) {
        auto f = c.rparser->Flush();
        d.reasoning += f.reasoning;
        d.content += f.content;
      }
      content = d.content;
      reasoning = d.reasoning;
    }
    if (c.tparser) {
      auto d = c.tparser->Feed(content);
      if (o.finished) {
        auto f = c.tparser->Flush();
        d.content += f.content;
        for (auto& x : f.calls) d.calls.push_back(std::move(x));
      }
      content = d.content;
      calls = std::move(d.calls);
    }
    if (o.finished) {
      c.finished = true;
      ++num_finished;
      c.finish_reason = o.finish_reason;
      if (o.stop_str) c.stop_reason = *o.stop_str;
      else if (o.stop_token) c.stop_reason = *o.stop_token;
      if (o.finish_reason == "stop" && (c.tparser && c.tparser->num_calls() > 0))
        c.finish_reason = "tool_calls";
      if (o.finish_reason == "error") c.error = o.error;
    }
    if (closed) return;
    if (stream) StreamDelta(c, o, content, reasoning, calls);
    else Accumulate(c, o, content, reasoning, calls);
    if (num_finished == static_cast<int>(choices.size())) Complete();
  }

  void AddCompletionLogprobs(Choice& c, const EngineOutput& o, json* tokens, json* lps,
                             json* tops, json* offs) {
    for (const TokenLogprob& lp : o.logprobs) {
      std::string t = tok->TokenText(lp.token);
      tokens->push_back(t);
      lps->push_back(Lp(lp.logprob));
      json top = json::object();
      for (auto& [id2, v] : lp.top) top[tok->TokenText(id2)] = Lp(v);
      tops->push_back(top);
      offs->push_back(c.text_offset);
      c.text_offset += t.size();
    }
  }

  void StreamDelta(Choice& c, const EngineOutput& o, const std::string& content,
                   const std::string& reasoning, const std::vector<ToolCall>& calls) {
    json chunk = ChunkBase();
    json choice = {{"index", c.index}};
    if (chat) {
      json delta = json::object();
      if (!c.role_sent) {
        delta["role"] = "assistant";
        delta["content"] = "";
        c.role_sent = true;
      }
      if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
      if (!content.empty()) delta["content"] = content;
      if (!calls.empty()) {
        json tc = json::array();
        for (const ToolCall& call : calls) {
          tc.push_back({{"index", static_cast<int>(c.calls.size())}, {"id", call.id},
                        {"type", call.type},
                        {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
          c.calls.push_back(call);
        }
        delta["tool_calls"] = tc;
      }
      bool has_lp = want_logprobs && !o.logprobs.empty();
      if (delta.empty() && !has_lp && !o.finished && !(return_token_ids && !o.token_ids.empty())) return;
      choice["delta"] = delta;
      choice["logprobs"] = has_lp ? json{{"content", LogprobsChat(o)}} : json(nullptr);
    } else {
      std::string text = content;
      if (echo && !c.echo_sent) {
        text = prompt_texts[c.prompt_index] + text;
        c.echo_sent = true;
      }
      bool has_lp = want_logprobs && !o.logprobs.empty();
      if (text.empty() && !has_lp && !o.finished && !(return_token_ids && !o.token_ids.empty())) return;
      choice["text"] = text;
      if (has_lp) {
        json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
        AddCompletionLogprobs(c, o, &tokens, &lps, &tops, &offs);
        choice["logprobs"] = {{"tokens", tokens}, {"token_logprobs", lps},
                              {"top_logprobs", tops}, {"text_offset", offs}};
      } else {
        choice["logprobs"] = nullptr;
      }
    }
    if (return_token_ids) choice["token_ids"] = o.token_ids;
    choice["finish_reason"] = o.finished ? json(c.finish_reason) : json(nullptr);
    if (o.finished) choice["stop_reason"] = c.stop_reason;
    chunk["choices"] = json::array({choice});
    if (o.finished && !c.error.empty()) {
      WriteEvent({{"error", {{"message", c.error}, {"type", "internal_error"}, {"param", nullptr},
                             {"code", nullptr}}}});
    }
    WriteEvent(chunk);
  }

  void Accumulate(Choice& c, const EngineOutput& o, const std::string& content,
                  const std::string& reasoning, const std::vector<ToolCall>& calls) {
    c.text += content;
    c.reasoning += reasoning;
    for (const auto& call : calls) c.calls.push_back(call);
    if (want_logprobs) {
      if (chat) {
        for (auto& x : LogprobsChat(o)) c.logprobs_content.push_back(x);
      } else {
        AddCompletionLogprobs(c, o, &c.cmpl_tokens, &c.cmpl_lps, &c.cmpl_top, &c.cmpl_offsets);
      }
    }
  }

  json Usage() const {
    int prompt = 0, completion = 0, cached = 0;
    for (size_t i = 0; i < prompt_lens.size(); ++i) {
      prompt += prompt_lens[i];
      cached += prompt_cached[i];
    }
    for (const Choice& c : choices) completion += c.completion_tokens;
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  void Complete() {
    if (done) return;
    done = true;
    if (stream) {
      if (include_usage) {
        json chunk = ChunkBase();
        chunk["choices"] = json::array();
        chunk["usage"] = Usage();
        WriteEvent(chunk);
      }
      w->Write("data: [DONE]\n\n");
      w->End();
      return;
    }
    for (const Choice& c : choices) {
      if (!c.error.empty()) {
        OpenAIServer::SendError(*w, 500, "generation failed: " + c.error, "internal_error");
        return;
      }
    }
    json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"},
                {"created", created}, {"model", model}};
    json arr = json::array();
    for (const Choice& c : choices) {
      json ch = {{"index", c.index}, {"finish_reason", c.finish_reason}, {"stop_reason", c.stop_reason}};
      if (return_token_ids) ch["token_ids"] = c.token_ids;
      if (chat) {
        json msg = {{"role", "assistant"}};
        msg["content"] = (c.text.empty() && !c.calls.empty()) ? json(nullptr) : json(c.text);
        if (!c.reasoning.empty() || choices[0].rparser) {
          msg["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
        }
        if (!c.calls.empty()) {
          json tc = json::array();
          for (const auto& call : c.calls)
            tc.push_back({{"id", call.id}, {"type", call.type},
                          {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
          msg["tool_calls"] = tc;
        }
        ch["message"] = msg;
        ch["logprobs"] = want_logprobs ? json{{"content", c.logprobs_content}} : json(nullptr);
      } else {
        ch["text"] = (echo ? prompt_texts[c.prompt_index] : std::string()) + c.text;
        ch["logprobs"] = want_logprobs ? json{{"tokens", c.cmpl_tokens},
                                              {"token_logprobs", c.cmpl_lps},
                                              {"top_logprobs", c.cmpl_top},
                                              {"text_offset", c.cmpl_offsets}}
                                       : json(nullptr);
      }
      arr.push_back(ch);
    }
    out["choices"] = arr;
    out["usage"] = Usage();
    w->Send(200, "application/json", DumpJson(out));
  }
};

}  // namespace

OpenAIServer::OpenAIServer(Engine* engine, const TextTokenizer* tokenizer,
                           OpenAIServerOptions options)
    : own_group_(std::make_unique<EngineGroup>(std::vector<Engine*>{engine}, nullptr)),
      engine_(own_group_.get()), tok_(tokenizer), opts_(std::move(options)), start_time_(NowUnix()) {}

OpenAIServer::OpenAIServer(EngineGroup* group, const TextTokenizer* tokenizer, OpenAIServerOptions options)
    : engine_(group), tok_(tokenizer), opts_(std::move(options)), start_time_(NowUnix()) {}

void OpenAIServer::Handle(HttpRequest&& req, std::shared_ptr<ResponseWriter> w) {
  const std::string& p = req.path;
  if (p == "/health" || p == "/ping") {
    if (engine_->admission_stopped()) {
      SendError(*w, 503, "server is shutting down", "server_error");
      return;
    }
    w->Send(200, "application/json", "{}");
    return;
  }
  if (p == "/metrics") {
    w->Send(200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics());
    return;
  }
  const bool needs_auth = p.rfind("/v1/", 0) == 0 || p == "/tokenize" || p == "/detokenize";
  if (needs_auth && !opts_.api_key.empty()) {
    std::string auth = req.header("authorization");
    if (auth != "Bearer " + opts_.api_key) {
      SendError(*w, 401,
                auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                             : "incorrect API key provided",
                "invalid_request_error", nullptr, "invalid_api_key");
      return;
    }
  }
  struct Route { const char* path; const char* method; int kind; };
  static const Route routes[] = {{"/v1/chat/completions", "POST", 0}, {"/v1/completions", "POST", 1},
                                 {"/v1/models", "GET", 2}, {"/tokenize", "POST", 3},
                                 {"/detokenize", "POST", 4}};
  for (const Route& r : routes) {
    if (p != r.path) continue;
    if (req.method != r.method) {
      SendError(*w, 405, "method " + req.method + " not allowed on " + p, "invalid_request_error");
      return;
    }
    switch (r.kind) {
      case 0: HandleGeneration(req, std::move(w), true); return;
      case 1: HandleGeneration(req, std::move(w), false); return;
      case 2: HandleModels(std::move(w)); return;
      case 3: HandleTokenize(req, std::move(w)); return;
      case 4: HandleDetokenize(req, std::move(w)); return;
    }
  }
  SendError(*w, 404, "no route for " + req.method + " " + p, "invalid_request_error");
}

namespace {
// Common body checks: Content-Type, JSON, object.
std::optional<ApiError> ParseBody(const HttpRequest& req, json* body) {
  std::string ct = req.header("content-type");
  if (ct.find("application/json") == std::string::npos)
    return ApiError{400, "Content-Type must be application/json", "invalid_request_error", nullptr, nullptr};
  try {
    *body = json::parse(req.body);
  } catch (const json::exception& e) {
    return ApiError{400, std::string("malformed JSON body: ") + e.what(), "invalid_request_error", nullptr, nullptr};
  }
  if (!body->is_object())
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", nullptr, nullptr};
  return std::nullopt;
}

void Send(ResponseWriter& w, const ApiError& e) {
  OpenAIServer::SendError(w, e.status, e.message, e.type, e.param, e.code);
}
}  // namespace

void OpenAIServer::HandleModels(std::shared_ptr<ResponseWriter> w) {
  json m = {{"id", opts_.served_model_name}, {"object", "model"}, {"created", start_time_},
            {"owned_by", "dsinfer"}, {"root", opts_.served_model_name},
            {"max_model_len", engine_->max_model_len()}};
  w->Send(200, "application/json", DumpJson({{"object", "list"}, {"data", json::array({m})}}));
}

void OpenAIServer::HandleGeneration(const HttpRequest& req, std::shared_ptr<ResponseWriter> w,
                                    bool chat) {
  json b;
  if (auto e = ParseBody(req, &b)) return Send(*w, *e);
  if (Has(b, "model")) {
    if (!b["model"].is_string()) return Send(*w, BadParam("model", "'model' must be a string"));
    if (b["model"].get<std::string>() != opts_.served_model_name)
      return Send(*w, ApiError{404, "the model '" + b["model"].get<std::string>() + "' does not exist",
                               "invalid_request_error", "model", "model_not_found"});
  }
  SamplingParams sp;
  std::optional<double> temperature, top_p, presence, frequency;
  std::optional<int64_t> top_k, max_tokens, n, seed, min_tokens, top_logprobs, lp_int;
  std::optional<bool> stream, echo, ignore_eos, lp_bool, skip_special, ret_ids;
  std::optional<ApiError> err;
  if ((err = ReadNumber(b, "temperature", 0.0, 2.0, false, &temperature)) ||
      (err = ReadNumber(b, "top_p", 0.0, 1.0, true, &top_p)) ||
      (err = ReadNumber(b, "presence_penalty", -2.0, 2.0, false, &presence)) ||
      (err = ReadNumber(b, "frequency_penalty", -2.0, 2.0, false, &frequency)) ||
      (err = ReadInt(b, "top_k", -1, tok_->vocab_size(), &top_k)) ||
      (err = ReadInt(b, "n", 1, opts_.max_n, &n)) ||
      (err = ReadInt(b, "seed", INT64_MIN, INT64_MAX, &seed)) ||
      (err = ReadInt(b, "min_tokens", 0, 1 << 30, &min_tokens)) ||
      (err = ReadBool(b, "stream", &stream)) ||
      (err = ReadBool(b, "ignore_eos", &ignore_eos)) ||
      (err = ReadBool(b, "skip_special_tokens", &skip_special)) ||
      (err = ReadBool(b, "return_token_ids", &ret_ids)))
    return Send(*w, *err);
  // max_tokens / max_completion_tokens: integer >= 1.
  for (const char* k : {"max_completion_tokens", "max_tokens"}) {
    if (!Has(b, k)) continue;
    if (!b[k].is_number_integer()) return Send(*w, BadParam(k, std::string("'") + k + "' must be an integer"));
    if (b[k].is_number_unsigned() && b[k].get<uint64_t>() > (1ull << 31))
      return Send(*w, BadParam(k, std::string("'") + k + "' is too large: at most " +
                                      std::to_string(engine_->max_model_len()) + " tokens (the context length)"));
    int64_t v = b[k].get<int64_t>();
    if (v < 1) return Send(*w, BadParam(k, std::string("'") + k + "' must be at least 1, got " + std::to_string(v)));
    max_tokens = v;
    break;
  }
  if (chat) {
    if ((err = ReadBool(b, "logprobs", &lp_bool)) ||
        (err = ReadInt(b, "top_logprobs", 0, opts_.max_logprobs, &top_logprobs)))
      return Send(*w, *err);
    if (top_logprobs && !(lp_bool && *lp_bool))
      return Send(*w, BadParam("top_logprobs", "'top_logprobs' requires 'logprobs': true"));
  } else {
    if ((err = ReadInt(b, "logprobs", 0, opts_.max_logprobs, &lp_int)) ||
        (err = ReadBool(b, "echo", &echo)))
      return Send(*w, *err);
  }
  // stop: string or array of non-empty strings.
  if (Has(b, "stop")) {
    const json& s = b["stop"];
    std::vector<std::string> stops;
    if (s.is_string()) stops.push_back(s.get<std::string>());
    else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) return Send(*w, BadParam("stop", "'stop' must be a string or an array of strings"));
        stops.push_back(x.get<std::string>());
      }
    } else {
      return Send(*w, BadParam("stop", "'stop' must be a string or an array of strings"));
    }
    if (static_cast<int>(stops.size()) > opts_.max_stop_strings)
      return Send(*w, BadParam("stop", "at most " + std::to_string(opts_.max_stop_strings) + " stop strings"));
    for (const auto& x : stops)
      if (x.empty()) return Send(*w, BadParam("stop", "stop strings must not be empty"));
    sp.stop = stops;
  }
  if (Has(b, "stop_token_ids")) {
    const json& s = b["stop_token_ids"];
    if (!s.is_array()) return Send(*w, BadParam("stop_token_ids", "'stop_token_ids' must be an array of integers"));
    for (const auto& x : s) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok_->vocab_size())
        return Send(*w, BadParam("stop_token_ids", "'stop_token_ids' must be token ids in [0, " +
                                                       std::to_string(tok_->vocab_size()) + ")"));
      sp.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  bool include_usage = false;
  if (Has(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!so.is_object()) return Send(*w, BadParam("stream_options", "'stream_options' must be an object"));
    std::optional<bool> iu;
    if ((err = ReadBool(so, "include_usage", &iu))) return Send(*w, *err);
    include_usage = iu.value_or(false);
  }

  // Prompts.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;
  bool opened_think = false;
  bool tools_on = false;
  if (chat) {
    if (!Has(b, "messages")) return Send(*w, BadParam("messages", "'messages' is required"));
    json tools = Has(b, "tools") ? b["tools"] : json(nullptr);
    if (!tools.is_null() && !tools.is_array()) return Send(*w, BadParam("tools", "'tools' must be an array"));
    std::string tool_choice = Has(b, "tool_choice") && b["tool_choice"].is_string() ? b["tool_choice"].get<std::string>() : "auto";
    tools_on = !opts_.tool_call_parser.empty() && tools.is_array() && !tools.empty() && tool_choice != "none";
    ChatTemplateOptions to;
    std::optional<bool> agp, cfm;
    if ((err = ReadBool(b, "add_generation_prompt", &agp)) || (err = ReadBool(b, "continue_final_message", &cfm)))
      return Send(*w, *err);
    to.add_generation_prompt = agp.value_or(true);
    to.continue_final_message = cfm.value_or(false);
    auto text = tok_->ApplyChatTemplate(b["messages"], tools, to);
    if (!text.ok()) return Send(*w, BadParam("messages", text.status().message()));
    auto ids = tok_->Encode(*text, false);
    if (!ids.ok()) return Send(*w, BadParam("messages", ids.status().message()));
    prompts.push_back(*ids);
    prompt_texts.push_back(*text);
    opened_think = ReasoningParser::PromptOpensThink(*text);
  } else {
    if (!Has(b, "prompt")) return Send(*w, BadParam("prompt", "'prompt' is required"));
    const json& p = b["prompt"];
    auto add_ids = [&](const json& arr) -> std::optional<ApiError> {
      std::vector<int32_t> ids;
      for (const auto& x : arr) {
        if (!x.is_number_integer()) return BadParam("prompt", "token prompts must be integers");
        int64_t v = x.get<int64_t>();
        if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) v = -1;
        if (v < 0 || v >= tok_->vocab_size())
          return BadParam("prompt", "token id " + x.dump() + " is outside the vocabulary [0, " +
                                        std::to_string(tok_->vocab_size()) + ")");
        ids.push_back(static_cast<int32_t>(v));
      }
      prompts.push_back(ids);
      prompt_texts.push_back(tok_->Decode(ids, false));
      return std::nullopt;
    };
    auto add_text = [&](const std::string& s) -> std::optional<ApiError> {
      if (s.empty()) return BadParam("prompt", "the prompt is empty");
      auto ids = tok_->Encode(s, true);
      if (!ids.ok()) return BadParam("prompt", ids.status().message());
      prompts.push_back(*ids);
      prompt_texts.push_back(s);
      return std::nullopt;
    };
    if (p.is_string()) err = add_text(p.get<std::string>());
    else if (p.is_array() && !p.empty() && p[0].is_number()) err = add_ids(p);
    else if (p.is_array() && !p.empty()) {
      for (const auto& x : p) {
        if (x.is_string()) err = add_text(x.get<std::string>());
        else if (x.is_array()) err = add_ids(x);
        else err = BadParam("prompt", "'prompt' must be a string, an array of strings, or token ids");
        if (err) break;
      }
    } else {
      err = BadParam("prompt", "'prompt' must be a non-empty string, an array of strings, or token ids");
    }
    if (err) return Send(*w, *err);
  }
  for (const auto& p : prompts)
    if (p.empty()) return Send(*w, BadParam(chat ? "messages" : "prompt", "the prompt is empty"));

  sp.temperature = static_cast<float>(temperature.value_or(1.0));
  sp.top_p = static_cast<float>(top_p.value_or(1.0));
  sp.top_k = top_k ? static_cast<int>(std::max<int64_t>(0, *top_k)) : 0;
  sp.presence_penalty = static_cast<float>(presence.value_or(0.0));
  sp.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  sp.ignore_eos = ignore_eos.value_or(false);
  sp.min_tokens = static_cast<int>(min_tokens.value_or(0));
  sp.skip_special_tokens = skip_special.value_or(true);
  int logprobs = -1;
  if (chat && lp_bool && *lp_bool) logprobs = static_cast<int>(top_logprobs.value_or(0));
  if (!chat && lp_int) logprobs = static_cast<int>(*lp_int);
  sp.logprobs = logprobs;
  const int num_n = static_cast<int>(n.value_or(1));
  const int max_len = engine_->max_model_len();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int plen = static_cast<int>(prompts[i].size());
    int64_t mt = max_tokens ? *max_tokens : (chat ? std::max(1, max_len - plen) : 16);
    if (plen + mt > max_len)
      return Send(*w, BadParam(max_tokens ? (Has(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens") : (chat ? "messages" : "prompt"),
                               "this model's maximum context length is " + std::to_string(max_len) +
                                   " tokens; the request has " + std::to_string(plen) +
                                   " prompt tokens + " + std::to_string(mt) + " max_tokens"));
  }

  auto job = std::make_shared<Job>();
  job->w = w;
  job->engine = engine_;
  job->tok = tok_;
  job->chat = chat;
  job->stream = stream.value_or(false);
  job->include_usage = include_usage && job->stream;
  job->echo = echo.value_or(false);
  job->logprobs = logprobs;
  job->want_logprobs = logprobs >= 0;
  job->return_token_ids = ret_ids.value_or(false);
  const uint64_t rid = next_id_.fetch_add(prompts.size() * num_n + 1);
  char idbuf[48];
  std::snprintf(idbuf, sizeof(idbuf), "%s-%016llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>((rid * 0x9E3779B97F4A7C15ull) ^ id_salt_));
  job->id = idbuf;
  job->model = opts_.served_model_name;
  job->created = NowUnix();
  job->prompt_texts = prompt_texts;
  job->prompt_lens.assign(prompts.size(), 0);
  job->prompt_cached.assign(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) job->prompt_lens[i] = static_cast<int>(prompts[i].size());
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    for (int k = 0; k < num_n; ++k) {
      Choice c;
      c.index = static_cast<int>(pi) * num_n + k;
      c.prompt_index = static_cast<int>(pi);
      c.engine_id = rid + 1 + c.index;
      if (!chat && echo.value_or(false)) c.text_offset = prompt_texts[pi].size();
      if (chat && opts_.reasoning_parser == "deepseek-r1") c.rparser.emplace(opened_think);
      if (chat && tools_on) c.tparser.emplace();
      job->choices.push_back(std::move(c));
    }
  }
  open_requests_.fetch_add(1);
  job->open_counter = &open_requests_;
  // Hold the job lock while adding: outputs (engine thread) wait until the stream headers
  // are queued, and a refused admission can still answer with its real status (503/400).
  std::vector<uint64_t> added;
  {
    std::unique_lock<std::mutex> job_lock(job->mu);
    for (size_t ci = 0; ci < job->choices.size(); ++ci) {
      const Choice& c = job->choices[ci];
      EngineRequest er;
      er.id = c.engine_id;
      er.prompt = prompts[c.prompt_index];
      er.params = sp;
      int64_t mt = max_tokens ? *max_tokens : (chat ? std::max(1, max_len - static_cast<int>(er.prompt.size())) : 16);
      er.params.max_tokens = static_cast<int>(mt);
      if (seed) er.params.seed = static_cast<uint64_t>(*seed) + static_cast<uint64_t>(c.index);
      er.on_output = [job, ci](EngineOutput&& o) { job->OnOutput(static_cast<int>(ci), std::move(o)); };
      Status st = engine_->Add(std::move(er));
      if (!st.ok()) {
        job->closed = true;  // the aborts' final outputs are ignored
        job_lock.unlock();
        for (uint64_t id : added) engine_->Abort(id);
        if (st.code() == StatusCode::kResourceExhausted) {
          SendError(*w, 503, st.message(), "server_error", nullptr, "service_unavailable");
        } else {
          SendError(*w, 400, st.message(), "invalid_request_error");
        }
        return;
      }
      added.push_back(job->choices[ci].engine_id);
    }
    if (job->stream) w->StartStream(200, "text/event-stream");
  }
  // A disconnect aborts every choice; the engine frees their blocks at its next step.
  std::weak_ptr<Job> weak = job;
  w->OnClose([weak, added, engine = engine_] {
    if (auto j = weak.lock()) {
      std::lock_guard<std::mutex> lock(j->mu);
      j->closed = true;
    }
    for (uint64_t id : added) engine->Abort(id);
  });
}

void OpenAIServer::HandleTokenize(const HttpRequest& req, std::shared_ptr<ResponseWriter> w) {
  json b;
  if (auto e = ParseBody(req, &b)) return Send(*w, *e);
  if (Has(b, "model") && (!b["model"].is_string() || b["model"].get<std::string>() != opts_.served_model_name))
    return Send(*w, ApiError{404, "the model does not exist", "invalid_request_error", "model", "model_not_found"});
  std::optional<bool> add_special, agp;
  std::optional<ApiError> err;
  if ((err = ReadBool(b, "add_special_tokens", &add_special)) || (err = ReadBool(b, "add_generation_prompt", &agp)))
    return Send(*w, *err);
  std::string text;
  bool special = add_special.value_or(true);
  if (Has(b, "messages")) {
    ChatTemplateOptions to;
    to.add_generation_prompt = agp.value_or(true);
    auto t = tok_->ApplyChatTemplate(b["messages"], Has(b, "tools") ? b["tools"] : json(nullptr), to);
    if (!t.ok()) return Send(*w, BadParam("messages", t.status().message()));
    text = *t;
    special = add_special.value_or(false);
  } else if (Has(b, "prompt") && b["prompt"].is_string()) {
    text = b["prompt"].get<std::string>();
  } else {
    return Send(*w, BadParam("prompt", "'prompt' (a string) or 'messages' is required"));
  }
  auto ids = tok_->Encode(text, special);
  if (!ids.ok()) return Send(*w, BadParam("prompt", ids.status().message()));
  json out = {{"count", ids->size()}, {"max_model_len", engine_->max_model_len()}, {"tokens", *ids}};
  std::optional<bool> strs;
  if ((err = ReadBool(b, "return_token_strs", &strs))) return Send(*w, *err);
  if (strs.value_or(false)) {
    json s = json::array();
    for (int32_t id : *ids) s.push_back(tok_->TokenText(id));
    out["token_strs"] = s;
  }
  w->Send(200, "application/json", DumpJson(out));
}

void OpenAIServer::HandleDetokenize(const HttpRequest& req, std::shared_ptr<ResponseWriter> w) {
  json b;
  if (auto e = ParseBody(req, &b)) return Send(*w, *e);
  if (Has(b, "model") && (!b["model"].is_string() || b["model"].get<std::string>() != opts_.served_model_name))
    return Send(*w, ApiError{404, "the model does not exist", "invalid_request_error", "model", "model_not_found"});
  if (!Has(b, "tokens") || !b["tokens"].is_array())
    return Send(*w, BadParam("tokens", "'tokens' must be an array of token ids"));
  std::vector<int32_t> ids;
  for (const auto& x : b["tokens"]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok_->vocab_size())
      return Send(*w, BadParam("tokens", "token ids must be integers in [0, " + std::to_string(tok_->vocab_size()) + ")"));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  w->Send(200, "application/json", DumpJson({{"prompt", tok_->Decode(ids, false)}}));
}

std::string OpenAIServer::RenderMetrics() const {
  EngineStats st = engine_->Stats();
  std::string out;
  const std::string labels = "model_name=\"" + opts_.served_model_name + "\"";
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.10g\n", name, help, name,
                  type, name, labels.c_str(), v);
    out += buf;
  };
  gauge("dsinfer:num_requests_running", "Requests in the running batch.", st.num_running);
  gauge("dsinfer:num_requests_waiting", "Requests waiting (including preempted).", st.num_waiting);
  gauge("dsinfer:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).",
        st.num_blocks_total ? static_cast<double>(st.num_blocks_used) / st.num_blocks_total : 0.0);
  gauge("dsinfer:num_kv_blocks_total", "KV blocks in the pool.", st.num_blocks_total);
  gauge("dsinfer:num_kv_blocks_used", "KV blocks held by requests.", st.num_blocks_used);
  gauge("dsinfer:num_kv_blocks_free", "KV blocks with no holder (including cached ones).",
        st.num_blocks_total - st.num_blocks_used);
  gauge("dsinfer:num_kv_blocks_cached", "KV blocks registered in the prefix cache.", st.num_blocks_cached);
  gauge("dsinfer:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
        static_cast<double>(st.prefix_query_tokens), "counter");
  gauge("dsinfer:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
        static_cast<double>(st.prefix_hit_tokens), "counter");
  gauge("dsinfer:prefix_cache_hit_rate", "prefix_cache_hits / prefix_cache_queries.",
        st.prefix_query_tokens ? static_cast<double>(st.prefix_hit_tokens) / st.prefix_query_tokens : 0.0);
  gauge("dsinfer:prompt_tokens_total", "Prefill tokens computed.", static_cast<double>(st.prompt_tokens_total), "counter");
  gauge("dsinfer:generation_tokens_total", "Generated tokens.", static_cast<double>(st.generation_tokens_total), "counter");
  gauge("dsinfer:num_preemptions_total", "Sequences preempted (recompute).", static_cast<double>(st.num_preemptions), "counter");
  gauge("dsinfer:engine_steps_total", "Engine steps run.", static_cast<double>(st.num_steps), "counter");
  gauge("dsinfer:engine_overlapped_steps_total", "Engine steps launched while the previous step ran (overlap schedule).",
        static_cast<double>(st.num_overlapped_steps), "counter");
  char buf[512];
  out += "# HELP dsinfer:request_success_total Finished requests by reason.\n# TYPE dsinfer:request_success_total counter\n";
  std::snprintf(buf, sizeof(buf),
                "dsinfer:request_success_total{%s,finished_reason=\"stop\"} %lld\n"
                "dsinfer:request_success_total{%s,finished_reason=\"length\"} %lld\n"
                "dsinfer:request_success_total{%s,finished_reason=\"abort\"} %lld\n",
                labels.c_str(), static_cast<long long>(st.requests_finished_stop), labels.c_str(),
                static_cast<long long>(st.requests_finished_length), labels.c_str(),
                static_cast<long long>(st.requests_finished_abort));
  out += buf;
  gauge("dsinfer:http_requests_open", "OpenAI requests with an open response.", open_requests_.load());
  engine_->RenderHistogram(&Engine::ttft, "dsinfer:time_to_first_token_seconds", "Time to first token (TTFT).", labels, &out);
  engine_->RenderHistogram(&Engine::tpot, "dsinfer:time_per_output_token_seconds", "Mean time per output token after the first (TPOT), per request.", labels, &out);
  engine_->RenderHistogram(&Engine::itl, "dsinfer:inter_token_latency_seconds", "Time between consecutive output tokens (ITL).", labels, &out);
  engine_->RenderHistogram(&Engine::e2e, "dsinfer:e2e_request_latency_seconds", "End-to-end request latency.", labels, &out);
  engine_->RenderHistogram(&Engine::queue_time, "dsinfer:request_queue_time_seconds", "Time from arrival to first scheduling.", labels, &out);
  if (engine_->size() > 1) {
    // Per-rank load (the DP balance signal): requests and context tokens in flight.
    out += "# HELP dsinfer:dp_rank_requests_in_flight Requests queued or running on each data-parallel rank.\n"
           "# TYPE dsinfer:dp_rank_requests_in_flight gauge\n";
    for (int r = 0; r < engine_->size(); ++r) {
      std::snprintf(buf, sizeof(buf), "dsinfer:dp_rank_requests_in_flight{%s,dp_rank=\"%d\"} %d\n", labels.c_str(), r,
                    engine_->rank(r)->num_in_flight());
      out += buf;
    }
    out += "# HELP dsinfer:dp_rank_generation_tokens_total Tokens generated by each data-parallel rank.\n"
           "# TYPE dsinfer:dp_rank_generation_tokens_total counter\n";
    for (int r = 0; r < engine_->size(); ++r) {
      std::snprintf(buf, sizeof(buf), "dsinfer:dp_rank_generation_tokens_total{%s,dp_rank=\"%d\"} %lld\n", labels.c_str(), r,
                    static_cast<long long>(engine_->rank(r)->Stats().generation_tokens_total));
      out += buf;
    }
    out += "# HELP dsinfer:dp_rank_context_tokens Context tokens (prompt + generated) in flight on each data-parallel rank.\n"
           "# TYPE dsinfer:dp_rank_context_tokens gauge\n";
    for (int r = 0; r < engine_->size(); ++r) {
      std::snprintf(buf, sizeof(buf), "dsinfer:dp_rank_context_tokens{%s,dp_rank=\"%d\"} %lld\n", labels.c_str(), r,
                    static_cast<long long>(engine_->rank(r)->context_tokens_in_flight()));
      out += buf;
    }
  }
  return out;
}

}  // namespace ds
