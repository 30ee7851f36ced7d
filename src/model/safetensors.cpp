// Safetensors reader (see safetensors.h for the format and the hardening contract).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ds {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // 100 MB, as the reference reader
// {name: {"shape": [..]}} is 3 levels; allow a little slack for unknown entry fields.
constexpr int kMaxHeaderDepth = 8;
constexpr int kMaxIndexDepth = 32;  // index "metadata" is free-form

std::string JsonTypeName(const json& j) { return j.type_name(); }

// Strict UTF-8 validation (RFC 3629): no overlongs, no surrogates, max U+10FFFF.
// Returns the byte offset of the first invalid sequence, or npos.
size_t FindInvalidUtf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      uint8_t cc = s[i + k];
      if ((cc & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return std::string::npos;
}

// Thrown from the parse callback to stop parsing a too-deeply nested document early.
struct TooDeep {};

std::string Truncated(std::string s, size_t max_chars = 300) {
  if (s.size() > max_chars) {
    s.resize(max_chars);
    s += "...";
  }
  return s;
}

// Parses `text` as JSON; reports duplicate keys of the top-level object (nlohmann would keep
// only the last one silently, which would hide a tensor) and stops at nesting deeper than
// `max_depth` (a safetensors header needs 3 levels; without a limit a 100 MB header of '['
// builds a multi-GB DOM).
Status ParseJsonNoDupTopKeys(const char* begin, const char* end, const std::string& what,
                             int max_depth, json* out) {
  std::set<std::string> seen;
  std::string dup;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw TooDeep{};
    if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  try {
    *out = json::parse(begin, end, cb, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    return DataLoss(what + " is not valid JSON: " + Truncated(e.what()));
  } catch (const TooDeep&) {
    return DataLoss(what + " nests deeper than " + std::to_string(max_depth) + " levels");
  }
  if (!dup.empty()) return DataLoss(what + " has the key '" + Truncated(dup) + "' more than once");
  return Status::Ok();
}

// A JSON value as a non-negative integer; error text describes the problem.
bool AsNonNegInt(const json& v, uint64_t* out, std::string* why) {
  if (v.is_number_unsigned()) { *out = v.get<uint64_t>(); return true; }
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) { *why = "negative (" + std::to_string(x) + ")"; return false; }
    *out = static_cast<uint64_t>(x);
    return true;
  }
  if (v.is_number_float()) { *why = "not an integer (" + v.dump() + ")"; return false; }
  *why = "not a number (" + JsonTypeName(v) + ")";
  return false;
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return NotFound(path + ": no such file");
    return InvalidArgument(path + ": cannot open: " + std::strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return InvalidArgument(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (size < 8) {
    ::close(fd);
    return DataLoss(path + ": file is " + std::to_string(size) +
                    " bytes, shorter than the 8-byte header length");
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) return ResourceExhausted(path + ": mmap failed: " + std::strerror(e));
  f->map_ = m;
  f->map_size_ = size;
  DS_RETURN_IF_ERROR(f->Parse(static_cast<const uint8_t*>(m), size));
  return f;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(const uint8_t* data,
                                                                       size_t size,
                                                                       const std::string& label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  DS_RETURN_IF_ERROR(f->Parse(data, size));
  return f;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status SafetensorsFile::Parse(const uint8_t* data, size_t size) {
  const std::string& p = path_;
  if (size < 8)
    return DataLoss(p + ": file is " + std::to_string(size) +
                    " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian u64
  if (n == 0) return DataLoss(p + ": header length is 0");
  if (n > kMaxHeaderBytes)
    return DataLoss(p + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    return DataLoss(p + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes)");
  const uint8_t* hdr = data + 8;
  size_t bad = FindInvalidUtf8(hdr, n);
  if (bad != std::string::npos)
    return DataLoss(p + ": header is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                    std::to_string(n) + ")");
  json j;
  DS_RETURN_IF_ERROR(ParseJsonNoDupTopKeys(reinterpret_cast<const char*>(hdr),
                                           reinterpret_cast<const char*>(hdr + n),
                                           p + ": header", kMaxHeaderDepth, &j));
  if (!j.is_object())
    return DataLoss(p + ": header is not a JSON object (it is " + JsonTypeName(j) + ")");

  const uint8_t* body = hdr + n;
  const uint64_t body_size = size - 8 - n;

  struct Span { uint64_t begin, end; const std::string* name; };
  std::vector<Span> spans;
  std::map<std::string, TensorView> tensors;
  std::map<std::string, std::string> metadata;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object())
        return DataLoss(p + ": __metadata__ is not an object of strings (it is " +
                        JsonTypeName(e) + ")");
      for (auto mt = e.begin(); mt != e.end(); ++mt) {
        if (!mt.value().is_string())
          return DataLoss(p + ": __metadata__ value for '" + Truncated(mt.key()) + "' is not a string (it is " +
                          JsonTypeName(mt.value()) + ")");
        metadata[mt.key()] = mt.value().get<std::string>();
      }
      continue;
    }
    const std::string where = p + ": tensor '" + Truncated(name) + "'";
    if (!e.is_object())
      return DataLoss(where + ": entry is not an object (it is " + JsonTypeName(e) + ")");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!e.contains(key)) return DataLoss(where + ": entry has no '" + key + "'");
    const json& jd = e["dtype"];
    const json& js = e["shape"];
    const json& jo = e["data_offsets"];
    if (!jd.is_string())
      return DataLoss(where + ": 'dtype' is not a string (it is " + JsonTypeName(jd) + ")");
    TensorView v;
    v.name = name;
    if (!ParseDType(jd.get_ref<const std::string&>(), &v.dtype))
      return DataLoss(where + ": unknown dtype '" + jd.get<std::string>() + "'");
    if (!js.is_array())
      return DataLoss(where + ": 'shape' is not an array (it is " + JsonTypeName(js) + ")");
    // Element count, overflow-checked. Every dim must fit int64 too (TensorView uses int64).
    uint64_t numel = 1;
    bool numel_overflow = false;
    for (size_t d = 0; d < js.size(); ++d) {
      uint64_t dim;
      std::string why;
      if (!AsNonNegInt(js[d], &dim, &why))
        return DataLoss(where + ": shape dim " + std::to_string(d) + " is " + why);
      if (dim > static_cast<uint64_t>(INT64_MAX))
        return DataLoss(where + ": shape dim " + std::to_string(d) + " (" + std::to_string(dim) +
                        ") is too large");
      v.shape.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(numel, dim, &numel)) numel_overflow = true;
    }
    if (!jo.is_array() || jo.size() != 2)
      return DataLoss(where + ": 'data_offsets' is not an array of two integers (it is " +
                      (jo.is_array() ? "an array of " + std::to_string(jo.size()) : JsonTypeName(jo)) +
                      ")");
    uint64_t b, en;
    std::string why;
    if (!AsNonNegInt(jo[0], &b, &why)) return DataLoss(where + ": data_offsets[0] is " + why);
    if (!AsNonNegInt(jo[1], &en, &why)) return DataLoss(where + ": data_offsets[1] is " + why);
    if (b > en)
      return DataLoss(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                      "] are not ordered (begin > end)");
    if (en > body_size)
      return DataLoss(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                      "] lie outside the data section (" + std::to_string(body_size) + " bytes)");
    uint64_t expect = 0;
    if (numel_overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(v.dtype)),
                                                 &expect))
      return DataLoss(where + ": shape " + ShapeStr(v.shape) + " x " + DTypeName(v.dtype) +
                      " overflows the byte size");
    if (en - b != expect)
      return DataLoss(where + ": byte span " + std::to_string(en - b) + " != shape " +
                      ShapeStr(v.shape) + " x " + DTypeName(v.dtype) + " (" +
                      std::to_string(DTypeSize(v.dtype)) + " B) = " + std::to_string(expect));
    v.data = body + b;
    v.nbytes = static_cast<size_t>(expect);
    auto [ins, _] = tensors.emplace(name, std::move(v));
    spans.push_back({b, en, &ins->first});
  }

  // Non-overlapping spans. Empty tensors (begin == end) occupy no bytes and never overlap.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (prev != nullptr && s.begin < prev->end)
      return DataLoss(p + ": tensors '" + Truncated(*prev->name) + "' [" +
                      std::to_string(prev->begin) + ", " + std::to_string(prev->end) + ") and '" +
                      Truncated(*s.name) + "' [" +
                      std::to_string(s.begin) + ", " + std::to_string(s.end) +
                      ") overlap in the data section");
    if (prev == nullptr || s.end > prev->end) prev = &s;
  }
  tensors_ = std::move(tensors);
  metadata_ = std::move(metadata);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                    const std::string& label) {
  size_t bad = FindInvalidUtf8(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (bad != std::string::npos)
    return DataLoss(label + ": not valid UTF-8 (byte " + std::to_string(bad) + ")");
  json j;
  DS_RETURN_IF_ERROR(
      ParseJsonNoDupTopKeys(text.data(), text.data() + text.size(), label, kMaxIndexDepth, &j));
  if (!j.is_object()) return DataLoss(label + ": not a JSON object (it is " + JsonTypeName(j) + ")");
  auto wm = j.find("weight_map");
  if (wm == j.end()) return DataLoss(label + ": no 'weight_map'");
  if (!wm->is_object())
    return DataLoss(label + ": 'weight_map' is not an object (it is " + JsonTypeName(*wm) + ")");
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      return DataLoss(label + ": weight_map['" + it.key() + "'] is not a string (it is " +
                      JsonTypeName(it.value()) + ")");
    const std::string& shard = it.value().get_ref<const std::string&>();
    // Shards are plain file names in the checkpoint directory.
    if (shard.empty() || shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos || shard == "." || shard == ".." ||
        shard.find('\0') != std::string::npos)
      return DataLoss(label + ": weight_map['" + it.key() + "'] = '" + shard +
                      "' is not a file name in the checkpoint directory");
    out[it.key()] = shard;
  }
  return out;
}

namespace {
StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss(path + ": read error");
  return ss.str();
}
}  // namespace

Status Checkpoint::AddFile(std::unique_ptr<SafetensorsFile> f) {
  for (const auto& [name, view] : f->tensors()) {
    auto [it, inserted] = index_.emplace(name, &view);
    if (!inserted) {
      // Find which file already holds it, for the message.
      std::string other = "?";
      for (const auto& g : files_)
        if (g->Find(name) == it->second) other = g->path();
      return DataLoss("tensor '" + name + "' appears in both " + other + " and " + f->path());
    }
  }
  files_.push_back(std::move(f));
  return Status::Ok();
}

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  if (fs::is_regular_file(dir, ec)) {
    DS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(dir));
    DS_RETURN_IF_ERROR(ck->AddFile(std::move(f)));
    return ck;
  }
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": no such checkpoint directory");
  const fs::path d(dir);
  const fs::path single = d / "model.safetensors";
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    DS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index.string()));
    DS_ASSIGN_OR_RETURN(auto weight_map, ParseSafetensorsIndex(text, index.string()));
    if (weight_map.empty()) return DataLoss(index.string() + ": 'weight_map' is empty");
    std::set<std::string> shards;
    for (const auto& [_, s] : weight_map) shards.insert(s);
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const std::string& s : shards) {
      const std::string sp = (d / s).string();
      if (!fs::exists(sp, ec))
        return NotFound(index.string() + ": shard '" + s + "' does not exist in " + dir);
      DS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(sp));
      by_shard[s] = f.get();
      DS_RETURN_IF_ERROR(ck->AddFile(std::move(f)));
    }
    for (const auto& [name, s] : weight_map)
      if (by_shard[s]->Find(name) == nullptr)
        return NotFound(index.string() + ": tensor '" + name + "' is mapped to shard '" + s +
                        "' but that shard does not contain it");
    return ck;
  }
  if (fs::exists(single, ec)) {
    DS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single.string()));
    DS_RETURN_IF_ERROR(ck->AddFile(std::move(f)));
    return ck;
  }
  std::vector<std::string> paths;
  for (const auto& ent : fs::directory_iterator(d, ec))
    if (ent.path().extension() == ".safetensors") paths.push_back(ent.path().string());
  if (ec) return InvalidArgument(dir + ": cannot list directory: " + ec.message());
  if (paths.empty())
    return NotFound(dir + ": no model.safetensors, model.safetensors.index.json or *.safetensors");
  std::sort(paths.begin(), paths.end());
  for (const auto& sp : paths) {
    DS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(sp));
    DS_RETURN_IF_ERROR(ck->AddFile(std::move(f)));
  }
  return ck;
}

const TensorView* Checkpoint::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, _] : index_) out.push_back(name);
  return out;
}

}  // namespace ds
