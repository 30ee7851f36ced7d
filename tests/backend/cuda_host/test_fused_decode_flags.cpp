// DS_FUSED_DECODE's parser (src/backend/cuda/fused_decode_flags.h), checked in the CPU build:
// "0" none, "1" all eight (route, shared, norm, qpe, olat, silu16, kvrope, uv), a comma list those
// named (shared implies route), unknown names reported and ignored. Unset is not parsed: the
// runner keeps its defaults (route, norm, qpe, olat, silu16, kvrope, uv; shared off), checked against
// CudaRunnerOptions in the CUDA build only.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/fused_decode_flags.h"

namespace ds::cuda {
namespace {

std::string Str(const FusedDecodeFlags& f) {
  return std::string(f.route ? "R" : "-") + (f.shared ? "S" : "-") + (f.norm ? "N" : "-") + (f.qpe ? "Q" : "-") +
         (f.olat ? "O" : "-") + (f.silu16 ? "U" : "-") + (f.kvrope ? "K" : "-") + (f.uv ? "W" : "-");
}

TEST(FusedDecodeFlags, ZeroAndOne) {
  EXPECT_EQ(Str(ParseFusedDecodeFlags("0")), "--------");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("1")), "RSNQOUKW");
  EXPECT_TRUE(ParseFusedDecodeFlags("1").unknown.empty());
  EXPECT_TRUE(ParseFusedDecodeFlags("0").unknown.empty());
}

TEST(FusedDecodeFlags, Lists) {
  EXPECT_EQ(Str(ParseFusedDecodeFlags("olat")), "----O---");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("silu16")), "-----U--");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,norm,qpe")), "R-NQ----");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,norm,qpe,olat")), "R-NQO---");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,norm,qpe,silu16")), "R-NQ-U--");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,norm,qpe,olat,silu16")), "R-NQOU--");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,shared,norm,qpe,olat,silu16")), "RSNQOU--");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,shared,norm,qpe,olat,silu16,kvrope")), "RSNQOUK-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,shared,norm,qpe,olat,silu16,kvrope,uv")), "RSNQOUKW");  // == "1"
  EXPECT_EQ(Str(ParseFusedDecodeFlags("uv,olat")), "----O--W");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("kvrope")), "------K-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("route,norm,qpe,kvrope")), "R-NQ--K-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("kvrope,qpe")), "---Q--K-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("olat,silu16,kvrope")), "----OUK-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags(",kvrope,")), "------K-");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("qpe,olat,norm")), "--NQO---");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("silu16,olat")), "----OU--");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("shared")), "RS------");  // shared implies route
  EXPECT_EQ(Str(ParseFusedDecodeFlags("")), "--------");
  EXPECT_EQ(Str(ParseFusedDecodeFlags(",olat,")), "----O---");
  EXPECT_EQ(Str(ParseFusedDecodeFlags(",silu16,,")), "-----U--");
  EXPECT_TRUE(ParseFusedDecodeFlags("route,norm,qpe,olat").unknown.empty());
  EXPECT_TRUE(ParseFusedDecodeFlags("route,norm,qpe,olat,silu16").unknown.empty());
  EXPECT_TRUE(ParseFusedDecodeFlags("route,shared,norm,qpe,olat,silu16,kvrope").unknown.empty());
}

TEST(FusedDecodeFlags, UnknownNamesAreReportedAndIgnored) {
  const FusedDecodeFlags f = ParseFusedDecodeFlags("norm,olats,1, qpe");
  EXPECT_EQ(Str(f), "--N-----");
  EXPECT_EQ(f.unknown, "olats,1, qpe");
  // Names match whole and exactly (case, spaces).
  const FusedDecodeFlags g = ParseFusedDecodeFlags("silu,silu16x,SILU16, silu16,silu16");
  EXPECT_EQ(Str(g), "-----U--");
  EXPECT_EQ(g.unknown, "silu,silu16x,SILU16, silu16");
  const FusedDecodeFlags k = ParseFusedDecodeFlags("kv,rope,kvrope2,KVROPE,kv_rope,kvrope");
  EXPECT_EQ(Str(k), "------K-");
  EXPECT_EQ(k.unknown, "kv,rope,kvrope2,KVROPE,kv_rope");
  // "1" / "0" only mean all / none alone.
  EXPECT_EQ(Str(ParseFusedDecodeFlags("1,olat")), "----O---");
  EXPECT_EQ(ParseFusedDecodeFlags("1,olat").unknown, "1");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("0,silu16")), "-----U--");
  EXPECT_EQ(ParseFusedDecodeFlags("0,silu16").unknown, "0");
  EXPECT_EQ(Str(ParseFusedDecodeFlags("1,kvrope")), "------K-");
  EXPECT_EQ(ParseFusedDecodeFlags("1,kvrope").unknown, "1");
}

// DS_PDL (CudaRunnerOptions::pdl): 1 / on, 0 / off; anything else is not recognised (-1: the
// hook keeps the default, off, and warns).
TEST(PdlFlag, OnOffAndUnknown) {
  EXPECT_EQ(ParsePdlFlag("1"), 1);
  EXPECT_EQ(ParsePdlFlag("on"), 1);
  EXPECT_EQ(ParsePdlFlag("0"), 0);
  EXPECT_EQ(ParsePdlFlag("off"), 0);
  for (const char* v : {"", "2", "yes", "true", "ON", " 1", "1 ", "01"}) EXPECT_EQ(ParsePdlFlag(v), -1) << '"' << v << '"';
}

}  // namespace
}  // namespace ds::cuda
