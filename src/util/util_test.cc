#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "util/dtype.h"
#include "util/escapes.h"
#include "util/fp16.h"
#include "util/huge_page_arena.h"
#include "util/memory.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: {}", x);
  return x / 2;
}

Result<int> Quarter(int x) {
  DSPARK_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(ResidentBytes, GrowsWhenMemoryIsTouched) {
  const uint64_t before = ResidentBytes();
  ASSERT_GT(before, 0u);
  std::vector<uint8_t> block(64 << 20);
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<uint8_t>(i);
  EXPECT_GE(ResidentBytes(), before + (48u << 20));
  EXPECT_EQ(block[4096], 0u);  // keeps the block alive and touched
}

TEST(Status, PropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_EQ(r.status().WithContext("ctx: ").message(), "ctx: odd: 3");
}

TEST(Escapes, ReplacesLlamaCppSequencesAndKeepsOtherBackslashes) {
  EXPECT_EQ(ProcessEscapes(R"(def f():\n    """Doc."""\n)"), "def f():\n    \"\"\"Doc.\"\"\"\n");
  EXPECT_EQ(ProcessEscapes(R"(a\tb\rc\\d\'e\"f)"), "a\tb\rc\\d'e\"f");
  EXPECT_EQ(ProcessEscapes(R"(\x41\x4a\x7)"), "AJ\x07");
  EXPECT_EQ(ProcessEscapes(R"(\x41B)"), "AB");  // at most two hex digits
  // Not escapes: kept byte for byte.
  EXPECT_EQ(ProcessEscapes(R"(C:\dir\file \d+ \xg)"), R"(C:\dir\file \d+ \xg)");
  EXPECT_EQ(ProcessEscapes("end\\"), "end\\");
  EXPECT_EQ(ProcessEscapes("one\\ backslash at the end\\"), "one\\ backslash at the end\\");
  EXPECT_EQ(ProcessEscapes(""), "");
}

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> hits(97);
      pool.ParallelFor(97, [&](int64_t i, int t) {
        ASSERT_LT(t, threads);
        hits[i].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, RangesCoverInputWithoutOverlap) {
  ThreadPool pool(2);
  std::vector<int> seen(1000, 0);
  pool.ParallelRange(1000, 7, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) seen[i]++;
  });
  for (int v : seen) EXPECT_EQ(v, 1);
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << "half bits " << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.5f)), 1.5f);
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);  // tie -> even
}

TEST(DType, GeometryMatchesGgml) {
  EXPECT_EQ(RowBytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(RowBytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(DTypeFromName("Q4_K"), DType::kQ4_K);
  EXPECT_EQ(DTypeFromName("bf16"), DType::kBF16);
  EXPECT_FALSE(DTypeFromName("q9_9").has_value());
  EXPECT_FALSE(GetDTypeInfo(4).has_value());  // removed Q4_2
}

TEST(HugePageArena, HandsOutAlignedDisjointWritableBlocks) {
  HugePageArena arena;
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  // Small blocks share a region; one larger than a region gets its own; then small ones again.
  for (size_t n : {size_t{100}, size_t{4096}, size_t{1} << 20, HugePageArena::kRegionBytes + 12345, size_t{7},
                   size_t{3} << 20}) {
    auto* p = static_cast<uint8_t*>(arena.Allocate(n, 64));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    std::memset(p, static_cast<int>(blocks.size() + 1), n);
    blocks.emplace_back(p, n);
  }
  // Every block still holds its own fill: none overlapped another.
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto [p, n] = blocks[b];
    EXPECT_EQ(p[0], b + 1);
    EXPECT_EQ(p[n - 1], b + 1);
    for (size_t o = 0; o < blocks.size(); ++o) {
      if (o == b) continue;
      const bool disjoint = p + n <= blocks[o].first || blocks[o].first + blocks[o].second <= p;
      EXPECT_TRUE(disjoint) << b << " overlaps " << o;
    }
  }
  size_t total = 0;
  for (const auto& blk : blocks) total += blk.second;
  EXPECT_EQ(arena.allocated(), total);
  EXPECT_GE(arena.reserved(), total);
  auto* page = static_cast<uint8_t*>(arena.Allocate(10, HugePageArena::kHugePage));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(page) % HugePageArena::kHugePage, 0u);
}

}  // namespace
}  // namespace dspark
