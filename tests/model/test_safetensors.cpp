#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <set>

#include "model/safetensors.h"
#include "safetensors_test_util.h"

namespace ds {
namespace {

// EXPECT_CONTAINS(s, sub) without gmock (the test binary links gtest only).
#define EXPECT_CONTAINS(s, sub)                                                        \
  do {                                                                                \
    const std::string _s = (s);                                                       \
    EXPECT_NE(_s.find(sub), std::string::npos) << "'" << _s << "' lacks '" << (sub) << "'"; \
  } while (0)

using testutil::PatternTensor;
using testutil::RawFile;
using testutil::Serialize;
using testutil::StTensor;
using testutil::TempDir;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                DType::kI8,  DType::kI32, DType::kI64,  DType::kU8,
                                DType::kBool, DType::kF64};

std::unique_ptr<SafetensorsFile> MustParse(const std::vector<uint8_t>& buf) {
  auto f = SafetensorsFile::FromBuffer(buf.data(), buf.size(), "mem.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : nullptr;
}

// Parses `buf`, expects failure, returns the message.
std::string ParseError(const std::vector<uint8_t>& buf) {
  auto f = SafetensorsFile::FromBuffer(buf.data(), buf.size(), "bad.safetensors");
  EXPECT_FALSE(f.ok()) << "parsed a malformed file";
  if (f.ok()) return "";
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status().ToString();
  EXPECT_CONTAINS(f.status().message(), "bad.safetensors");  // names the file
  return f.status().message();
}

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int x : v) out.push_back(static_cast<uint8_t>(x));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(Safetensors, RoundTripAllDTypes) {
  std::vector<StTensor> ts;
  uint8_t seed = 3;
  for (DType t : kAllDTypes)
    ts.push_back(PatternTensor(std::string("t_") + DTypeName(t), t, {2, 3}, seed++));
  ts.push_back(PatternTensor("scalar", DType::kF32, {}, 9));     // rank 0: 1 element
  ts.push_back(PatternTensor("empty", DType::kBF16, {0, 4}, 0));  // 0 elements
  auto buf = Serialize(ts, {{"format", "pt"}});
  auto f = MustParse(buf);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensors().size(), ts.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  for (const auto& t : ts) {
    const TensorView* v = f->Find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(v->name, t.name);
    EXPECT_EQ(v->dtype, t.dtype) << t.name;
    EXPECT_EQ(v->shape, t.shape) << t.name;
    EXPECT_EQ(v->nbytes, t.bytes.size()) << t.name;
    ASSERT_EQ(std::memcmp(v->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    // The view points into the buffer (no copy).
    EXPECT_GE(v->data, buf.data());
    EXPECT_LE(v->data + v->nbytes, buf.data() + buf.size());
  }
  EXPECT_EQ(f->Find("scalar")->numel(), 1);
  EXPECT_EQ(f->Find("empty")->numel(), 0);
  EXPECT_EQ(f->Find("t_F8_E4M3")->nbytes, 6u);
  EXPECT_EQ(f->Find("t_F64")->nbytes, 48u);
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST(Safetensors, Fp32ValuesReadBack) {
  std::vector<float> vals = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 42.0f};
  auto buf = Serialize({testutil::F32Tensor("w", {2, 3}, vals)});
  auto f = MustParse(buf);
  ASSERT_NE(f, nullptr);
  const TensorView* v = f->Find("w");
  ASSERT_NE(v, nullptr);
  std::vector<float> got(6);
  std::memcpy(got.data(), v->data, 24);
  EXPECT_EQ(got, vals);
}

TEST(Safetensors, UnpaddedHeaderAndHolesAccepted) {
  // Header length not a multiple of 8 (unaligned data) and a gap between tensors are legal.
  std::string h =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
      R"("b":{"dtype":"I8","shape":[3],"data_offsets":[5,8]}})";
  auto buf = RawFile(h, Bytes({1, 2, 0, 0, 0, 7, 8, 9}));
  auto f = MustParse(buf);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->Find("b")->data[0], 7);
  EXPECT_EQ(f->Find("b")->data[2], 9);
}

TEST(Safetensors, EmptyTensorsMayShareOffsets) {
  std::string h =
      R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("c":{"dtype":"F32","shape":[3,0],"data_offsets":[4,4]}})";
  EXPECT_NE(MustParse(RawFile(h, 4)), nullptr);
}

TEST(Safetensors, OpenFromDiskAndMissingFile) {
  TempDir dir;
  auto p = dir.path() / "x.safetensors";
  testutil::WriteFile(p, Serialize({PatternTensor("w", DType::kBF16, {4, 8})}));
  auto f = SafetensorsFile::Open(p.string());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), p.string());
  EXPECT_EQ((*f)->Find("w")->nbytes, 64u);
  EXPECT_EQ((*f)->Find("w")->data[0], 1);

  auto missing = SafetensorsFile::Open((dir.path() / "nope.safetensors").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "nope.safetensors");

  auto isdir = SafetensorsFile::Open(dir.str());
  ASSERT_FALSE(isdir.ok());
  EXPECT_CONTAINS(isdir.status().message(), "not a regular file");

  // An empty file on disk (mmap of 0 bytes would fail): a clear error, not a crash.
  testutil::WriteFile(dir.path() / "empty.safetensors", {});
  auto empty = SafetensorsFile::Open((dir.path() / "empty.safetensors").string());
  ASSERT_FALSE(empty.ok());
  EXPECT_CONTAINS(empty.status().message(), "shorter than the 8-byte header length");
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each gets its own message. Every message is also collected and checked to
// be distinct from all the others at the end.

struct MalformedCase {
  const char* what;
  std::vector<uint8_t> file;
  const char* expect;  // a substring unique to this error
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.what; }

std::string Entry(const std::string& body) { return R"({"t":)" + body + "}"; }

std::vector<MalformedCase> MalformedCases() {
  std::vector<MalformedCase> c;
  c.push_back({"shorter than 8 bytes", Bytes({1, 0, 0}), "shorter than the 8-byte header length"});
  c.push_back({"header length 0", RawFile("", 16), "header length is 0"});
  c.push_back({"header length > 100MB", RawFile("{}", {}, 100'000'001ull), "exceeds the 100 MB limit"});
  c.push_back({"header length past EOF", RawFile("{}", {}, 64), "runs past the end of the file"});
  c.push_back({"header length huge (u64 max-1)", RawFile("{}", {}, UINT64_MAX - 1),
               "exceeds the 100 MB limit"});
  {
    std::string h = "{\"t\xff\":{}}";
    c.push_back({"invalid UTF-8", RawFile(h, 0), "header is not valid UTF-8"});
  }
  {
    std::string h = "{\"\xc0\xaf\":{}}";  // overlong encoding of '/'
    c.push_back({"overlong UTF-8", RawFile(h, 0), "header is not valid UTF-8 (byte 2"});
  }
  {
    std::string h = "{\"\xed\xa0\x80\":{}}";  // UTF-16 surrogate encoded in UTF-8
    c.push_back({"surrogate UTF-8", RawFile(h, 0), "header is not valid UTF-8 (byte 2"});
  }
  c.push_back({"invalid JSON", RawFile(R"({"t": {"dtype": )", 0), "header is not valid JSON"});
  c.push_back({"trailing garbage", RawFile(R"({} x)", 0), "header is not valid JSON"});
  c.push_back({"not an object", RawFile("[1,2]", 0), "header is not a JSON object (it is array)"});
  c.push_back({"nested too deep", RawFile(std::string(100, '[') + std::string(100, ']'), 0),
               "header nests deeper than 8 levels"});
  c.push_back({"duplicate key",
               RawFile(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2),
               "has the key 't' more than once"});
  c.push_back({"entry not object", RawFile(Entry("[1]"), 0), "tensor 't': entry is not an object"});
  c.push_back({"missing dtype", RawFile(Entry(R"({"shape":[1],"data_offsets":[0,4]})"), 4),
               "tensor 't': entry has no 'dtype'"});
  c.push_back({"missing shape", RawFile(Entry(R"({"dtype":"F32","data_offsets":[0,4]})"), 4),
               "tensor 't': entry has no 'shape'"});
  c.push_back({"missing data_offsets", RawFile(Entry(R"({"dtype":"F32","shape":[1]})"), 4),
               "tensor 't': entry has no 'data_offsets'"});
  c.push_back({"dtype not string",
               RawFile(Entry(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), 4),
               "'dtype' is not a string (it is number)"});
  c.push_back({"unknown dtype",
               RawFile(Entry(R"({"dtype":"F4","shape":[1],"data_offsets":[0,4]})"), 4),
               "tensor 't': unknown dtype 'F4'"});
  c.push_back({"lowercase dtype",
               RawFile(Entry(R"({"dtype":"bf16","shape":[1],"data_offsets":[0,2]})"), 2),
               "unknown dtype 'bf16'"});
  c.push_back({"shape not array",
               RawFile(Entry(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"), 4),
               "'shape' is not an array (it is string)"});
  c.push_back({"negative dim",
               RawFile(Entry(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]})"), 4),
               "shape dim 1 is negative (-1)"});
  c.push_back({"non-integer dim",
               RawFile(Entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), 4),
               "shape dim 0 is not an integer"});
  c.push_back({"dim not a number",
               RawFile(Entry(R"({"dtype":"F32","shape":[null],"data_offsets":[0,4]})"), 4),
               "shape dim 0 is not a number (null)"});
  c.push_back({"dim > int64",
               RawFile(Entry(R"({"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,4]})"), 4),
               "shape dim 0 (9223372036854775808) is too large"});
  c.push_back({"offsets not two",
               RawFile(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), 8),
               "'data_offsets' is not an array of two integers (it is an array of 3)"});
  c.push_back({"offsets not array",
               RawFile(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":{"a":1}})"), 8),
               "'data_offsets' is not an array of two integers (it is object)"});
  c.push_back({"offset negative",
               RawFile(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 8),
               "data_offsets[0] is negative (-4)"});
  c.push_back({"offset string",
               RawFile(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})"), 8),
               "data_offsets[1] is not a number (string)"});
  c.push_back({"offsets unordered",
               RawFile(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 8),
               "data_offsets [8, 4] are not ordered"});
  c.push_back({"span past data section",
               RawFile(Entry(R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})"), 8),
               "data_offsets [4, 12] lie outside the data section (8 bytes)"});
  c.push_back({"span length mismatch",
               RawFile(Entry(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,8]})"), 8),
               "byte span 8 != shape [3] x BF16 (2 B) = 6"});
  c.push_back({"numel overflow",
               RawFile(Entry(R"({"dtype":"U8","shape":[4294967296,4294967297],"data_offsets":[0,8]})"), 8),
               "shape [4294967296, 4294967297] x U8 overflows the byte size"});
  c.push_back({"bytes overflow (numel fits)",
               RawFile(Entry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"), 8),
               "shape [4611686018427387904] x F64 overflows the byte size"});
  c.push_back({"overlapping spans",
               RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
               "tensors 'a' [0, 8) and 'b' [4, 12) overlap"});
  c.push_back({"span nested in a bigger one",
               RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                       R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
               "tensors 'a' [0, 16) and 'b' [8, 12) overlap"});
  c.push_back({"metadata not object",
               RawFile(R"({"__metadata__":"pt"})", 0), "__metadata__ is not an object of strings"});
  c.push_back({"metadata value not string",
               RawFile(R"({"__metadata__":{"format":1}})", 0),
               "__metadata__ value for 'format' is not a string (it is number)"});
  return c;
}

// One test per case (each shows up in ctest on its own).
class MalformedFile : public testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedFile, GivesItsOwnError) {
  const MalformedCase& tc = GetParam();
  EXPECT_CONTAINS(ParseError(tc.file), tc.expect);
}

std::string CaseName(const testing::TestParamInfo<MalformedCase>& info) {
  std::string n;
  for (const char* c = info.param.what; *c; ++c)
    n.push_back(std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(Safetensors, MalformedFile, testing::ValuesIn(MalformedCases()), CaseName);

TEST(SafetensorsMalformed, EachHasItsOwnError) {
  std::set<std::string> messages;
  auto cases = MalformedCases();
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.what);
    std::string msg = ParseError(tc.file);
    EXPECT_CONTAINS(msg, tc.expect);
    messages.insert(msg);
  }
  // Several cases probe the same check with different inputs; all messages must still differ
  // (they carry the offending value), so nothing collapses into a generic "failed".
  EXPECT_EQ(messages.size(), cases.size());
  EXPECT_GE(cases.size(), 12u);
}

// A 50 MB header of nested brackets is refused quickly, without building a huge DOM; a long
// tensor name is cut in the message.
TEST(SafetensorsMalformed, HugeHeadersStayCheap) {
  const size_t depth = 25'000'000;
  std::string deep = "{\"t\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
  EXPECT_CONTAINS(ParseError(RawFile(deep, 0)), "nests deeper than 8 levels");
  std::string name(1'000'000, 'n');
  std::string msg = ParseError(RawFile("{\"" + name + "\":{\"dtype\":\"F4\"}}", 0));
  EXPECT_CONTAINS(msg, "entry has no 'shape'");
  EXPECT_LT(msg.size(), 1000u);
}

// Every strict prefix of a valid file is rejected cleanly (truncation anywhere).
TEST(SafetensorsMalformed, EveryTruncationIsAnError) {
  auto buf = Serialize({PatternTensor("a", DType::kBF16, {3, 5}), PatternTensor("b", DType::kI8, {7})});
  ASSERT_NE(MustParse(buf), nullptr);
  for (size_t n = 0; n < buf.size(); ++n) {
    std::vector<uint8_t> cut(buf.begin(), buf.begin() + n);
    auto f = SafetensorsFile::FromBuffer(cut.data(), cut.size(), "cut");
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
  }
}

// Flipping any single byte of the header never crashes (it may still parse, e.g. a digit of a
// name): a cheap deterministic complement to the fuzzer.
TEST(SafetensorsMalformed, ByteFlipsNeverCrash) {
  auto buf = Serialize({PatternTensor("a", DType::kBF16, {3, 5}), PatternTensor("b", DType::kI8, {7})});
  size_t hdr = 8 + buf[0] + (buf[1] << 8);
  for (size_t i = 0; i < hdr; ++i)
    for (uint8_t x : {0x01, 0x20, 0x80, 0xff}) {
      auto m = buf;
      m[i] ^= x;
      auto f = SafetensorsFile::FromBuffer(m.data(), m.size(), "flip");
      if (f.ok()) {
        for (const auto& [_, v] : (*f)->tensors())
          ASSERT_LE(v.data + v.nbytes, m.data() + m.size());
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  testutil::WriteFile(dir.path() / "model.safetensors",
                      Serialize({PatternTensor("x", DType::kF32, {2}), PatternTensor("y", DType::kI8, {3})}));
  auto ck = Checkpoint::Open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->Names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ((*ck)->size(), 2u);
  ASSERT_NE((*ck)->Find("y"), nullptr);
  EXPECT_EQ((*ck)->Find("y")->nbytes, 3u);
  EXPECT_EQ((*ck)->Find("z"), nullptr);
  // The file path itself also works.
  auto ck2 = Checkpoint::Open((dir.path() / "model.safetensors").string());
  ASSERT_TRUE(ck2.ok()) << ck2.status().ToString();
  EXPECT_EQ((*ck2)->size(), 2u);
}

TEST(Checkpoint, ShardedIndex) {
  TempDir dir;
  testutil::WriteFile(dir.path() / "model-00001-of-00002.safetensors",
                      Serialize({PatternTensor("a.weight", DType::kBF16, {4, 4}, 10),
                                 PatternTensor("b.weight", DType::kF8E4M3, {4, 4}, 20)}));
  testutil::WriteFile(dir.path() / "model-00002-of-00002.safetensors",
                      Serialize({PatternTensor("b.weight_scale_inv", DType::kF32, {1, 1}, 30),
                                 PatternTensor("c.weight", DType::kF16, {2}, 40)}));
  // A stray file not in the index is not read.
  testutil::WriteFile(dir.path() / "stray.safetensors", Serialize({PatternTensor("a.weight", DType::kU8, {1})}));
  testutil::WriteText(dir.path() / "model.safetensors.index.json", R"({
    "metadata": {"total_size": 60},
    "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors",
      "b.weight_scale_inv": "model-00002-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->Names(), (std::vector<std::string>{"a.weight", "b.weight", "b.weight_scale_inv", "c.weight"}));
  EXPECT_EQ((*ck)->files().size(), 2u);
  const TensorView* a = (*ck)->Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(a->data[0], 10);
  const TensorView* c = (*ck)->Find("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->data[0], 40);
  EXPECT_EQ((*ck)->Find("b.weight_scale_inv")->data[0], 30);
}

TEST(Checkpoint, AllSafetensorsInDirWhenNoIndex) {
  TempDir dir;
  testutil::WriteFile(dir.path() / "part-a.safetensors", Serialize({PatternTensor("p", DType::kF32, {1})}));
  testutil::WriteFile(dir.path() / "part-b.safetensors", Serialize({PatternTensor("q", DType::kF32, {1})}));
  testutil::WriteText(dir.path() / "config.json", "{}");
  auto ck = Checkpoint::Open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->Names(), (std::vector<std::string>{"p", "q"}));
}

std::string CheckpointError(const TempDir& dir) {
  auto ck = Checkpoint::Open(dir.str());
  EXPECT_FALSE(ck.ok());
  return ck.ok() ? "" : ck.status().message();
}

TEST(Checkpoint, DuplicateAcrossShardsIsError) {
  TempDir dir;
  testutil::WriteFile(dir.path() / "a.safetensors", Serialize({PatternTensor("w", DType::kF32, {1})}));
  testutil::WriteFile(dir.path() / "b.safetensors", Serialize({PatternTensor("w", DType::kF32, {1})}));
  std::string msg = CheckpointError(dir);
  EXPECT_CONTAINS(msg, "tensor 'w' appears in both");
  EXPECT_CONTAINS(msg, "a.safetensors");
  EXPECT_CONTAINS(msg, "b.safetensors");
}

TEST(Checkpoint, EmptyAndMissingDir) {
  TempDir dir;
  EXPECT_CONTAINS(CheckpointError(dir), "no model.safetensors, model.safetensors.index.json or *.safetensors");
  auto ck = Checkpoint::Open(dir.str() + "/does-not-exist");
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kNotFound);
}

TEST(Checkpoint, MalformedShardNamesTheShard) {
  TempDir dir;
  testutil::WriteFile(dir.path() / "model.safetensors", RawFile("{", 0));
  std::string msg = CheckpointError(dir);
  EXPECT_CONTAINS(msg, "model.safetensors: header is not valid JSON");
}

TEST(Checkpoint, IndexErrors) {
  auto with_index = [](const std::string& index_json, bool write_shard) {
    TempDir dir;
    if (write_shard)
      testutil::WriteFile(dir.path() / "s1.safetensors", Serialize({PatternTensor("w", DType::kF32, {1})}));
    testutil::WriteText(dir.path() / "model.safetensors.index.json", index_json);
    return CheckpointError(dir);
  };
  EXPECT_CONTAINS(with_index("not json", true), "model.safetensors.index.json is not valid JSON");
  EXPECT_CONTAINS(with_index("[]", true), "not a JSON object (it is array)");
  EXPECT_CONTAINS(with_index(R"({"metadata":{}})", true), "no 'weight_map'");
  EXPECT_CONTAINS(with_index(R"({"weight_map":[]})", true), "'weight_map' is not an object");
  EXPECT_CONTAINS(with_index(R"({"weight_map":{}})", true), "'weight_map' is empty");
  EXPECT_CONTAINS(with_index(R"({"weight_map":{"w":1}})", true), "weight_map['w'] is not a string (it is number)");
  EXPECT_CONTAINS(with_index(R"({"weight_map":{"w":"../s1.safetensors"}})", true), "is not a file name in the checkpoint directory");
  EXPECT_CONTAINS(with_index(R"({"weight_map":{"w":"s2.safetensors"}})", true), "shard 's2.safetensors' does not exist");
  EXPECT_CONTAINS(with_index(R"({"weight_map":{"w":"s1.safetensors","v":"s1.safetensors"}})", true), "tensor 'v' is mapped to shard 's1.safetensors' but that shard does not contain it");
  EXPECT_CONTAINS(with_index("{\"weight_map\":{\"w\xff\":\"s1.safetensors\"}}", true), "not valid UTF-8");
}

TEST(Checkpoint, ParseIndexDirect) {
  auto m = ParseSafetensorsIndex(R"({"metadata":{"total_size":1},"weight_map":{"a":"x.safetensors"}})", "idx");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->at("a"), "x.safetensors");
  auto dup = ParseSafetensorsIndex(R"({"weight_map":{},"weight_map":{}})", "idx");
  ASSERT_FALSE(dup.ok());
  EXPECT_CONTAINS(dup.status().message(), "'weight_map' more than once");
}

}  // namespace
}  // namespace ds
