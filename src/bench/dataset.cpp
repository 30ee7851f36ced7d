#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace ds::bench {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int32_t DrawToken(uint64_t& state, TokenRange range) {
  uint64_t span = static_cast<uint64_t>(std::max(1, range.hi - range.lo));
  return range.lo + static_cast<int32_t>(SplitMix64(state) % span);
}

// Integer uniform in [lo, hi] (inclusive) from the generator.
int UniformInt(std::mt19937_64& rng, int lo, int hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

TokenRange DefaultTokenRange(int vocab_size) {
  if (vocab_size >= 4000) return {100, vocab_size - 2000};
  return {0, std::max(1, vocab_size)};
}

std::vector<int32_t> TraceBlockTokens(int64_t hash_id, TokenRange range, uint64_t seed) {
  uint64_t state = seed * 0xD1B54A32D192ED03ull ^ static_cast<uint64_t>(hash_id) * 0x9E3779B97F4A7C15ull;
  SplitMix64(state);
  std::vector<int32_t> tokens(kTraceBlockTokens);
  for (auto& t : tokens) t = DrawToken(state, range);
  return tokens;
}

std::vector<int32_t> BuildTracePrompt(const std::vector<int64_t>& hash_ids, int input_len,
                                      TokenRange range, uint64_t seed, uint64_t request_index) {
  std::vector<int32_t> out;
  if (input_len <= 0) return out;
  out.reserve(input_len);
  for (int64_t id : hash_ids) {
    if (static_cast<int>(out.size()) >= input_len) break;
    auto block = TraceBlockTokens(id, range, seed);
    int take = std::min<int>(kTraceBlockTokens, input_len - static_cast<int>(out.size()));
    out.insert(out.end(), block.begin(), block.begin() + take);
  }
  // Tail not covered by hash blocks: unique to this request.
  uint64_t state = ~(seed * 0x2545F4914F6CDD1Dull) ^ (request_index + 1) * 0xA24BAED4963EE407ull;
  while (static_cast<int>(out.size()) < input_len) out.push_back(DrawToken(state, range));
  return out;
}

std::vector<int32_t> MaterializePrompt(const BenchRequest& r, TokenRange range, uint64_t seed,
                                       uint64_t request_index) {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  if (!r.prompt_text.empty()) return {};
  return BuildTracePrompt(r.hash_ids, r.input_len, range, seed, request_index);
}

std::vector<BenchRequest> MakeRandomRequests(int n, int input_len, int output_len,
                                             double range_ratio, TokenRange range, uint64_t seed) {
  std::mt19937_64 rng(seed);
  range_ratio = std::clamp(range_ratio, 0.0, 1.0);
  auto bounds = [&](int len) {
    int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - range_ratio))));
    int hi = std::max(lo, static_cast<int>(std::ceil(len * (1.0 + range_ratio))));
    return std::pair<int, int>(lo, hi);
  };
  auto [in_lo, in_hi] = bounds(input_len);
  auto [out_lo, out_hi] = bounds(output_len);
  uint64_t state = seed ^ 0x5851F42D4C957F2Dull;
  std::vector<BenchRequest> reqs(std::max(0, n));
  for (auto& r : reqs) {
    r.input_len = range_ratio > 0 ? UniformInt(rng, in_lo, in_hi) : std::max(1, input_len);
    r.output_len = range_ratio > 0 ? UniformInt(rng, out_lo, out_hi) : std::max(1, output_len);
    r.prompt_ids.resize(r.input_len);
    for (auto& t : r.prompt_ids) t = DrawToken(state, range);
  }
  return reqs;
}

std::string FitTextPrompt(const TextCodec& codec, std::vector<int32_t> ids, int target_len, int* actual_len) {
  std::string text = codec.Decode(ids);
  std::vector<int32_t> enc = codec.Encode(text);
  for (int round = 0; round < 4 && static_cast<int>(enc.size()) != target_len && !enc.empty(); ++round) {
    if (static_cast<int>(enc.size()) > target_len) {
      enc.resize(target_len);
    } else {  // extend with the original ids again (cyclically)
      for (size_t i = 0; static_cast<int>(enc.size()) < target_len; ++i) enc.push_back(ids[i % ids.size()]);
    }
    text = codec.Decode(enc);
    enc = codec.Encode(text);
  }
  *actual_len = static_cast<int>(enc.size());
  return text;
}

namespace {

Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return Status::Ok();
}

std::string TurnText(const nlohmann::json& turn) {
  for (const char* k : {"value", "content"}) {
    auto it = turn.find(k);
    if (it != turn.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}
std::string TurnRole(const nlohmann::json& turn) {
  for (const char* k : {"from", "role"}) {
    auto it = turn.find(k);
    if (it != turn.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}
bool IsUser(const std::string& r) { return r == "human" || r == "user"; }
bool IsAssistant(const std::string& r) { return r == "gpt" || r == "assistant" || r == "chatgpt" || r == "bard"; }

}  // namespace

StatusOr<std::vector<BenchRequest>> LoadShareGpt(const std::string& path, const ShareGptOptions& opt) {
  std::string content;
  DS_RETURN_IF_ERROR(ReadFile(path, &content));
  std::vector<nlohmann::json> entries;
  size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '[') {
    nlohmann::json arr = nlohmann::json::parse(content, nullptr, false);
    if (arr.is_discarded() || !arr.is_array())
      return InvalidArgument(path + ": not a valid JSON array of conversations");
    for (auto& e : arr) entries.push_back(std::move(e));
  } else {
    std::istringstream in(content);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded())
        return InvalidArgument(path + ":" + std::to_string(lineno) + ": invalid JSON");
      entries.push_back(std::move(e));
    }
  }
  // Seeded shuffle (Fisher-Yates with our generator: same order on every platform).
  std::mt19937_64 rng(opt.seed);
  for (size_t i = entries.size(); i > 1; --i) std::swap(entries[i - 1], entries[rng() % i]);

  auto count = [&](const std::string& text) -> int {
    if (opt.codec) return static_cast<int>(opt.codec->Encode(text).size());
    return static_cast<int>((text.size() + 3) / 4);
  };
  std::vector<BenchRequest> out;
  for (const auto& e : entries) {
    if (opt.num_requests > 0 && static_cast<int>(out.size()) >= opt.num_requests) break;
    if (!e.is_object()) continue;
    const nlohmann::json* conv = nullptr;
    for (const char* k : {"conversations", "messages", "conversation"}) {
      auto it = e.find(k);
      if (it != e.end() && it->is_array()) { conv = &*it; break; }
    }
    if (!conv) continue;
    // First user turn and the assistant turn that follows it.
    std::string prompt, reply;
    bool have_prompt = false, have_reply = false;
    for (const auto& turn : *conv) {
      if (!turn.is_object()) continue;
      std::string role = TurnRole(turn);
      if (!have_prompt) {
        if (IsUser(role)) { prompt = TurnText(turn); have_prompt = true; }
      } else if (IsAssistant(role)) {
        reply = TurnText(turn);
        have_reply = true;
        break;
      }
    }
    if (!have_prompt || !have_reply || prompt.empty()) continue;
    BenchRequest r;
    r.input_len = count(prompt);
    int reply_len = count(reply);
    r.output_len = opt.fixed_output_len > 0 ? opt.fixed_output_len : reply_len;
    if (opt.filter) {
      if (r.input_len < 4 || (opt.fixed_output_len <= 0 && r.output_len < 4)) continue;
      if (r.input_len > 1024 || r.input_len + r.output_len > 2048) continue;
    }
    r.output_len = std::max(1, r.output_len);
    r.prompt_text = std::move(prompt);
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgument(path + ": no usable ShareGPT conversations");
  return out;
}

StatusOr<std::vector<BenchRequest>> LoadTrace(const std::string& path, const TraceOptions& opt,
                                              TraceStats* stats) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open trace '" + path + "'");
  std::vector<BenchRequest> out;
  std::unordered_set<int64_t> seen;
  TraceStats st;
  std::string line;
  int lineno = 0;
  double scale = opt.time_scale > 0 ? opt.time_scale : 1.0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (opt.max_requests > 0 && static_cast<int>(out.size()) >= opt.max_requests) break;
    auto where = [&] { return path + ":" + std::to_string(lineno) + ": "; };
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(where() + "invalid JSON");
    auto num = [&](const char* k, double* v) -> Status {
      auto it = j.find(k);
      if (it == j.end() || !it->is_number()) return InvalidArgument(where() + "missing number '" + k + "'");
      *v = it->get<double>();
      return Status::Ok();
    };
    double ts, in_len, out_len;
    DS_RETURN_IF_ERROR(num("timestamp", &ts));
    DS_RETURN_IF_ERROR(num("input_length", &in_len));
    DS_RETURN_IF_ERROR(num("output_length", &out_len));
    if (ts < 0 || in_len < 1 || out_len < 0)
      return InvalidArgument(where() + "negative timestamp or input_length < 1");
    if (opt.duration_s > 0 && ts >= opt.duration_s * 1000.0) continue;
    BenchRequest r;
    r.arrival_s = ts / 1000.0 * scale;
    r.input_len = static_cast<int>(in_len);
    r.output_len = std::max(1, static_cast<int>(out_len));
    if (auto it = j.find("hash_ids"); it != j.end()) {
      if (!it->is_array()) return InvalidArgument(where() + "'hash_ids' is not a list");
      for (const auto& h : *it) {
        if (!h.is_number_integer()) return InvalidArgument(where() + "'hash_ids' holds a non-integer");
        r.hash_ids.push_back(h.get<int64_t>());
      }
    }
    // Ideal prefix reuse: leading blocks already seen (a block id names its whole prefix).
    long long reusable = 0;
    bool prefix = true;
    for (size_t b = 0; b < r.hash_ids.size(); ++b) {
      bool hit = seen.count(r.hash_ids[b]) > 0;
      if (prefix && hit) {
        reusable += std::min<long long>(kTraceBlockTokens, r.input_len - static_cast<long long>(b) * kTraceBlockTokens);
      } else {
        prefix = false;
      }
      seen.insert(r.hash_ids[b]);
    }
    st.requests++;
    st.input_tokens += r.input_len;
    st.reusable_prefix_tokens += std::max(0LL, reusable);
    out.push_back(std::move(r));
  }
  // Replay order must be by time even if the file is not sorted.
  std::stable_sort(out.begin(), out.end(),
                   [](const BenchRequest& a, const BenchRequest& b) { return a.arrival_s < b.arrival_s; });
  if (out.empty()) return InvalidArgument(path + ": no trace requests selected");
  if (stats) *stats = st;
  return out;
}

}  // namespace ds::bench
