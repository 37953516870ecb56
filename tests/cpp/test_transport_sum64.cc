// The payload hash of XCCL_CHECKSUM=1 (common/sum64.h): the fast paths against the
// definition, pieces cut anywhere, the copy, and what it is sure to catch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "common/sum64.h"

namespace {

std::vector<unsigned char> pattern(size_t n, uint32_t seed) {
  std::vector<unsigned char> v(n);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

// The value is part of the wire format (a sender's and a receiver's build must agree):
// pinned here, so that a change to the constants is a deliberate one.
TEST(Sum64, PinnedValues) {
  EXPECT_EQ(xccl::sum64Extend(0, 0, "", 0), 0u);
  EXPECT_EQ(xccl::sum64Extend(0, 0, "123456789", 9), xccl::sum64Reference(0, 0, "123456789", 9));
  EXPECT_EQ(xccl::sum64Reference(0, 0, "123456789", 9), 0x0000000086740797ull)
      << "one step: its B is 0";
  std::vector<unsigned char> ramp(1000);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i * 37 + 11);
  EXPECT_EQ(xccl::sum64Reference(0, 0, ramp.data(), ramp.size()), 0xfe580e2a79dcc68cull);
  EXPECT_EQ(xccl::sum64Extend(0, 0, ramp.data(), ramp.size()), 0xfe580e2a79dcc68cull);
  const std::vector<unsigned char> zeros(4096, 0);
  EXPECT_EQ(xccl::sum64Extend(0, 0, zeros.data(), zeros.size()), 0u) << "zeros add nothing";
}

class Sum64Paths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { xccl::sum64AllowVector(GetParam()); }
  void TearDown() override { xccl::sum64AllowVector(true); }
};
INSTANTIATE_TEST_SUITE_P(VectorAndPortable, Sum64Paths, ::testing::Bool());

TEST_P(Sum64Paths, MatchTheDefinitionAtEveryOffsetAndLength) {
  const auto data = pattern(3 * 1024 + 37, 11);
  for (size_t at :
       {0, 1, 2, 3, 4, 5, 31, 32, 60, 63, 64, 65, 1020, 1023, 1024, 1027, 4096 * 3 + 2}) {
    for (size_t n :
         {0, 1, 2, 3, 4, 7, 8, 31, 32, 33, 63, 64, 65, 1000, 1024, 1029, 3 * 1024 + 37}) {
      if (n > data.size()) continue;
      const uint64_t want = xccl::sum64Reference(5, at, data.data(), n);
      EXPECT_EQ(xccl::sum64Extend(5, at, data.data(), n), want) << at << " " << n;
      std::vector<unsigned char> out(n + 8, 0xEE);
      EXPECT_EQ(xccl::sum64Copy(5, at, out.data() + 3, data.data(), n), want) << at << " " << n;
      EXPECT_EQ(std::memcmp(out.data() + 3, data.data(), n), 0) << at << " " << n;
      for (size_t k : {size_t{0}, size_t{1}, size_t{2}, n + 3, n + 4, n + 7}) {
        EXPECT_EQ(out[k], 0xEE) << "nothing written outside the copy: " << at << " " << n;
      }
    }
  }
}

TEST_P(Sum64Paths, StreamingCopyMatchesTheDefinition) {
  const auto data = pattern(70000, 13);
  auto* out = static_cast<unsigned char*>(std::aligned_alloc(64, 70016));
  ASSERT_NE(out, nullptr);
  for (size_t at : {0, 64, 65, 4096}) {
    for (size_t n : {4096, 4099, 65536, 69000}) {
      std::memset(out, 0xEE, 70016);
      // dst aligned as the message is (at's place in a 64-byte step), as torch's buffers are
      unsigned char* dst = out + at % 64;
      EXPECT_EQ(xccl::sum64Copy(9, at, dst, data.data(), n, /*streaming=*/true),
                xccl::sum64Reference(9, at, data.data(), n))
          << at << " " << n;
      EXPECT_EQ(std::memcmp(dst, data.data(), n), 0) << at << " " << n;
      EXPECT_EQ(dst[n], 0xEE) << "nothing past the end";
    }
  }
  std::free(out);
}

TEST_P(Sum64Paths, AddingFloatsHashesWhatWasAddedAndAddsAsAPlainLoop) {
  const auto raw = pattern(4 * 3000, 17);
  std::vector<float> b(3000), a(3000);
  std::memcpy(b.data(), raw.data(), raw.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.37f - 100.0f;
  for (auto& x : b) {
    if (!std::isfinite(x)) x = 1.5f;  // the pattern's bytes as floats, NaN and inf left out
  }
  for (size_t at : {0, 4, 60, 64, 68, 1024, 4096 + 12}) {
    for (size_t count : {0, 1, 15, 16, 17, 31, 32, 100, 1000, 3000}) {
      std::vector<float> out(count + 1, -7.0f), inPlace(a.begin(), a.begin() + count);
      const uint64_t h = xccl::sum64AddFloats(3, at, out.data(), a.data(), b.data(), count);
      EXPECT_EQ(h, xccl::sum64Reference(3, at, b.data(), count * 4)) << at << " " << count;
      for (size_t i = 0; i < count; ++i) {
        const float want = a[i] + b[i];
        ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << at << " " << count << " " << i;
      }
      EXPECT_EQ(out[count], -7.0f) << "nothing past the end";
      EXPECT_EQ(xccl::sum64AddFloats(3, at, inPlace.data(), inPlace.data(), b.data(), count), h);
      EXPECT_EQ(std::memcmp(inPlace.data(), out.data(), count * 4), 0) << "dst == a";
    }
  }
  // A piece that starts inside a word of the message: hashed as the definition says.
  std::vector<float> out(10);
  EXPECT_EQ(xccl::sum64AddFloats(0, 2, out.data(), a.data(), b.data(), 10),
            xccl::sum64Reference(0, 2, b.data(), 40));
}

// float16 and bfloat16 sums: b holds every kind of value the pattern's bytes make (NaNs,
// infinities, subnormals); a is finite, so each result has one NaN operand at most and its
// bits are defined. Results against half.h's scalar add, the hash against the definition.
TEST_P(Sum64Paths, AddingHalvesHashesWhatWasAddedAndAddsAsThePortableLoop) {
  const size_t kMax = 3000;
  const auto raw = pattern(2 * kMax, 19);
  std::vector<uint16_t> b(kMax), a(kMax);
  std::memcpy(b.data(), raw.data(), raw.size());
  for (bool bf16 : {false, true}) {
    auto toBits = [bf16](float f) {
      return bf16 ? xccl::fromFloat(f, static_cast<xccl::BFloat16*>(nullptr)).bits
                  : xccl::fromFloat(f, static_cast<xccl::Half*>(nullptr)).bits;
    };
    auto toFloat = [bf16](uint16_t v) {
      return bf16 ? xccl::toFloat(xccl::BFloat16{v}) : xccl::toFloat(xccl::Half{v});
    };
    for (size_t i = 0; i < kMax; ++i) a[i] = toBits(static_cast<float>(i) * 0.37f - 100.0f);
    for (size_t at : {0, 2, 6, 62, 64, 66, 1024, 4096 + 12, 1}) {
      for (size_t count : {0, 1, 31, 32, 33, 63, 64, 65, 100, 1000, 3000}) {
        std::vector<uint16_t> out(count + 1, 0xEEEE), inPlace(a.begin(), a.begin() + count);
        const uint64_t h = xccl::sum64AddHalves(3, at, out.data(), a.data(), b.data(), count, bf16);
        EXPECT_EQ(h, xccl::sum64Reference(3, at, b.data(), count * 2))
            << bf16 << " " << at << " " << count;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], toBits(toFloat(a[i]) + toFloat(b[i])))
              << "bf16 " << bf16 << " at " << at << " count " << count << " element " << i;
        }
        EXPECT_EQ(out[count], 0xEEEE) << "nothing past the end";
        EXPECT_EQ(
            xccl::sum64AddHalves(3, at, inPlace.data(), inPlace.data(), b.data(), count, bf16), h);
        EXPECT_EQ(std::memcmp(inPlace.data(), out.data(), count * 2), 0) << "dst == a";
      }
    }
  }
}

TEST_P(Sum64Paths, PiecesCutAnywhereAddUpToTheWhole) {
  const auto data = pattern(200003, 7);
  const uint64_t whole = xccl::sum64Extend(0, 0, data.data(), data.size());
  for (size_t piece : {1, 3, 7, 64, 1021, 4093, 65536}) {
    uint64_t h = 0;
    for (size_t at = 0; at < data.size(); at += piece) {
      h = xccl::sum64Extend(h, at, data.data() + at, std::min(piece, data.size() - at));
    }
    EXPECT_EQ(h, whole) << piece;
  }
  // In any order: the pieces are terms of one sum.
  uint64_t backwards = 0;
  for (size_t end = data.size(); end > 0;) {
    const size_t at = end > 777 ? end - 777 : 0;
    backwards = xccl::sum64Extend(backwards, at, data.data() + at, end - at);
    end = at;
  }
  EXPECT_EQ(backwards, whole);
}

TEST(Sum64, CatchesEverySingleBitFlipAndEveryChangedWord) {
  auto data = pattern(4099, 3);
  const uint64_t whole = xccl::sum64Extend(0, 0, data.data(), data.size());
  for (size_t byte = 0; byte < data.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      data[byte] ^= static_cast<unsigned char>(1u << bit);
      ASSERT_NE(xccl::sum64Extend(0, 0, data.data(), data.size()), whole) << byte << ":" << bit;
      data[byte] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  // Any other value in one word, whatever it is: the extremes and a spread between.
  for (size_t word = 0; word < data.size() / 4; word += 13) {
    uint32_t saved;
    std::memcpy(&saved, data.data() + 4 * word, 4);
    for (uint32_t v : {0u, 0xFFFFFFFFu, saved ^ 0x80000001u, saved + 1, saved - 1}) {
      if (v == saved) continue;
      std::memcpy(data.data() + 4 * word, &v, 4);
      ASSERT_NE(xccl::sum64Extend(0, 0, data.data(), data.size()), whole) << word;
    }
    std::memcpy(data.data() + 4 * word, &saved, 4);
  }
}

TEST(Sum64, CatchesMovedWordsAndBlocksAndAZeroedBlock) {
  auto data = pattern(16384, 5);
  const uint64_t whole = xccl::sum64Extend(0, 0, data.data(), data.size());
  auto differs = [&] { return xccl::sum64Extend(0, 0, data.data(), data.size()) != whole; };
  for (size_t a : {0, 4, 1020, 1024, 9000}) {
    const size_t b = a + 4;
    std::swap_ranges(data.begin() + a, data.begin() + a + 4, data.begin() + b);
    EXPECT_TRUE(differs()) << "words at " << a << " and " << b << " swapped";
    std::swap_ranges(data.begin() + a, data.begin() + a + 4, data.begin() + b);
  }
  // Whole 1 KiB blocks swapped: the same lanes, told apart by their steps (B).
  std::swap_ranges(data.begin(), data.begin() + 1024, data.begin() + 4096);
  EXPECT_TRUE(differs()) << "blocks 0 and 4 swapped";
  std::swap_ranges(data.begin(), data.begin() + 1024, data.begin() + 4096);
  std::vector<unsigned char> saved(data.begin() + 2048, data.begin() + 3072);
  std::fill(data.begin() + 2048, data.begin() + 3072, 0);
  EXPECT_TRUE(differs()) << "a block zeroed";
  std::copy(saved.begin(), saved.end(), data.begin() + 2048);
  EXPECT_FALSE(differs());
}

}  // namespace
