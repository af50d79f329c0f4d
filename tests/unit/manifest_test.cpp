#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include "common/digest.h"
#include "core/model/manifest.h"
#include "modelcast/error.h"
#include "modelcast/tensor.h"

namespace modelcast {
namespace {

std::string error_of(auto&& f, ErrorCode expected_code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected_code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

TEST(Manifest, LaysTensorsOutAlignedInOrder) {
  std::uint64_t total = 0;
  auto entries = plan_layout({{"a", DType::kF32, {3}}, {"b", DType::kBool, {}}, {"c", DType::kF64, {2, 2}}}, &total);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].offset, 0u);
  EXPECT_EQ(entries[0].size, 12u);
  EXPECT_EQ(entries[1].offset, kTensorAlignment);
  EXPECT_EQ(entries[1].size, 1u);  // a scalar holds one element
  EXPECT_EQ(entries[2].offset, 2 * kTensorAlignment);
  EXPECT_EQ(entries[2].size, 32u);
  EXPECT_EQ(total, 3 * kTensorAlignment);
}

TEST(Manifest, RejectsBadRegistrationsNamingTheTensor) {
  auto dup = error_of([] { plan_layout({{"w", DType::kF32, {1}}, {"w", DType::kI8, {2}}}, nullptr); },
                      ErrorCode::kInvalidArgument);
  EXPECT_NE(dup.find("duplicate tensor name 'w'"), std::string::npos) << dup;
  auto neg = error_of([] { plan_layout({{"x", DType::kF32, {2, -1}}}, nullptr); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(neg.find("'x'"), std::string::npos) << neg;
  EXPECT_NE(neg.find("[2,-1]"), std::string::npos) << neg;
  auto empty = error_of([] { plan_layout({{"", DType::kF32, {1}}}, nullptr); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(empty.find("empty name"), std::string::npos);
  auto dtype = error_of([] { plan_layout({{"d", static_cast<DType>(77), {1}}}, nullptr); },
                        ErrorCode::kInvalidArgument);
  EXPECT_NE(dtype.find("unknown dtype 77"), std::string::npos) << dtype;
  // Delivered, and then failed every write of a daemon's repository (safetensors keeps a file's
  // metadata under that key).
  auto reserved = error_of([] { plan_layout({{"__metadata__", DType::kF32, {1}}}, nullptr); },
                           ErrorCode::kInvalidArgument);
  EXPECT_NE(reserved.find("tensor name '__metadata__' is reserved"), std::string::npos) << reserved;
  // Accepted, and then no want or conversion could name it alone ("*" is every tensor to them).
  auto star = error_of([] { plan_layout({{"*", DType::kF32, {1}}}, nullptr); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(star.find("tensor name '*' is reserved: wants and conversions take it for every tensor"),
            std::string::npos) << star;
}

Manifest valid_manifest() {
  Manifest m;
  m.model = "m";
  m.version = 3;
  m.tensors = plan_layout({{"a", DType::kF32, {4}}, {"b", DType::kI16, {8}}}, &m.total_bytes);
  return m;
}

TEST(Manifest, ValidationCatchesHostileManifests) {
  EXPECT_NO_THROW(validate_manifest(valid_manifest()));
  auto outside = valid_manifest();
  outside.tensors[1].offset = outside.total_bytes - 4;
  EXPECT_NE(error_of([&] { validate_manifest(outside); }, ErrorCode::kProtocol).find("outside"), std::string::npos);
  auto overflow = valid_manifest();
  overflow.tensors[0].offset = ~std::uint64_t{0} - 2;  // offset + size wraps around
  EXPECT_NE(error_of([&] { validate_manifest(overflow); }, ErrorCode::kProtocol).find("outside"), std::string::npos);
  auto size = valid_manifest();
  size.tensors[0].size = 15;
  EXPECT_NE(error_of([&] { validate_manifest(size); }, ErrorCode::kProtocol).find("needs 16"), std::string::npos);
  auto overlap = valid_manifest();
  overlap.tensors[1].offset = 8;
  EXPECT_NE(error_of([&] { validate_manifest(overlap); }, ErrorCode::kProtocol).find("overlaps"), std::string::npos);
  auto twice = valid_manifest();
  twice.tensors[1].spec.name = "a";
  EXPECT_NE(error_of([&] { validate_manifest(twice); }, ErrorCode::kProtocol).find("twice"), std::string::npos);
}

// A manifest decides what a consumer allocates and how many receives it posts: each of these
// once passed validation (or ended the consumer with an uncaught exception).
TEST(Manifest, ValidationBoundsWhatAPeerCanMakeTheConsumerAllocate) {
  // Element counts that overflow 64 bits, with and without a zero extent hiding the product.
  auto huge = valid_manifest();
  huge.tensors[0].spec.shape = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  huge.tensors[0].size = 0;  // what the wrapped product would claim
  EXPECT_NE(error_of([&] { validate_manifest(huge); }, ErrorCode::kProtocol).find("64 bits"), std::string::npos);
  auto hidden = valid_manifest();
  hidden.tensors[0].spec.shape = {0, std::int64_t{1} << 40, std::int64_t{1} << 40};
  hidden.tensors[0].size = 0;
  EXPECT_NE(error_of([&] { validate_manifest(hidden); }, ErrorCode::kProtocol).find("64 bits"), std::string::npos);
  EXPECT_FALSE((TensorSpec{"x", DType::kF64, {std::int64_t{1} << 62}}.checked_size_bytes()));
  EXPECT_EQ((TensorSpec{"x", DType::kF64, {0, 5}}.checked_size_bytes()), 0u);
  // A declared size beyond the consumer's limit, or beyond what the tensors need.
  auto tib = valid_manifest();
  tib.total_bytes = std::uint64_t{1} << 40;
  ManifestLimits limits;
  limits.max_total_bytes = std::uint64_t{1} << 30;
  EXPECT_NE(error_of([&] { validate_manifest(tib, limits); }, ErrorCode::kProtocol).find("at most"), std::string::npos);
  auto padded = valid_manifest();
  padded.total_bytes += kTensorAlignment;
  EXPECT_NE(error_of([&] { validate_manifest(padded); }, ErrorCode::kProtocol).find("tensors end at"),
            std::string::npos);
  auto max = valid_manifest();
  max.total_bytes = ~std::uint64_t{0};
  EXPECT_THROW(validate_manifest(max), Error);
  // Counts and sizes of the rest.
  auto rank = valid_manifest();
  rank.tensors[0].spec.shape.assign(17, 1);
  EXPECT_NE(error_of([&] { validate_manifest(rank); }, ErrorCode::kProtocol).find("rank 17"), std::string::npos);
  auto metadata = valid_manifest();
  metadata.metadata["k"] = std::string(2u << 20, 'x');
  EXPECT_NE(error_of([&] { validate_manifest(metadata); }, ErrorCode::kProtocol).find("metadata"), std::string::npos);
  limits = {};
  limits.max_tensors = 1;
  EXPECT_NE(error_of([&] { validate_manifest(valid_manifest(), limits); }, ErrorCode::kProtocol).find("2 tensors"),
            std::string::npos);
  // Registration refuses the same shapes, naming the tensor.
  auto registration = error_of([] { plan_layout({{"big", DType::kF32, {std::int64_t{1} << 62, 4}}}, nullptr); },
                               ErrorCode::kInvalidArgument);
  EXPECT_NE(registration.find("'big'"), std::string::npos) << registration;
}

// C1 controls (U+0080-U+009F) are control characters too: NEL (U+0085) in a consumer's name
// ended the producer's log line and forged the next. Other non-ASCII letters are names.
TEST(Manifest, NamesWithAC1ControlAreRefusedAndOtherLettersTaken) {
  EXPECT_EQ(name_problem("evil\xc2\x85[info] forged").value_or("accepted"), "contains a control character at byte 4");
  EXPECT_EQ(name_problem("csi\xc2\x9b" "31m").value_or("accepted"), "contains a control character at byte 3");
  EXPECT_EQ(name_problem("caf\xc3\xa9 \xc2\xb5s \xc2\xa0").value_or("accepted"), "accepted");
}

// Metadata is text every reader can take: a NUL cut it short in C (two entries read as one
// key "k"), bytes that are not UTF-8 made Python's view.metadata raise. Refused by a producer at
// publish(), and a manifest carrying such metadata is no manifest; newlines in values are fine.
TEST(Manifest, MetadataIsTextEveryReaderCanTake) {
  using Map = std::map<std::string, std::string>;
  EXPECT_EQ(metadata_problem(Map{{"lr", "0.1"}, {"note", "line one\nline two"}, {"unit", "\xc2\xb5s"}}), std::nullopt);
  auto problem = [](const Map& m) { return metadata_problem(m).value_or("accepted"); };
  EXPECT_EQ(problem({{std::string("k\0secret", 8), "v"}}), "key 'k\\x00secret' contains a NUL byte at 1");
  EXPECT_EQ(problem({{"k", std::string("a\0b", 3)}}), "value of 'k' contains a NUL byte at 1");
  EXPECT_EQ(problem({{"k", "0.1\xff"}}), "value of 'k' is not valid UTF-8 (byte 3)");
  EXPECT_EQ(problem({{"k\xff", "v"}}), "key 'k\\xff' is not valid UTF-8 (byte 1)");
  EXPECT_EQ(problem({{"a\nb", "v"}}), "key 'a\\x0ab' contains a control character at byte 1");
  auto m = valid_manifest();
  m.metadata["k"] = "0.1\xff";
  EXPECT_EQ(error_of([&] { validate_manifest(m); }, ErrorCode::kProtocol),
            "manifest metadata value of 'k' is not valid UTF-8 (byte 3)");
}

TEST(Manifest, ExpectedLayoutDifferencesAreListed) {
  auto m = valid_manifest();
  EXPECT_NO_THROW(check_expected_layout({}, m));  // nothing expected: accept the producer's
  EXPECT_NO_THROW(check_expected_layout({{"b", DType::kI16, {8}}, {"a", DType::kF32, {4}}}, m));  // any order
  auto text = error_of([&] { check_expected_layout({{"a", DType::kF64, {4}}, {"c", DType::kF32, {1}}}, m); },
                       ErrorCode::kLayoutMismatch);
  EXPECT_NE(text.find("tensor 'a' is f32, expected f64"), std::string::npos) << text;
  EXPECT_NE(text.find("missing tensor 'c'"), std::string::npos) << text;
  EXPECT_NE(text.find("unexpected tensor 'b'"), std::string::npos) << text;
  auto shape = error_of([&] { check_expected_layout({{"a", DType::kF32, {2, 2}}, {"b", DType::kI16, {8}}}, m); },
                        ErrorCode::kLayoutMismatch);
  EXPECT_NE(shape.find("shape [4], expected [2,2]"), std::string::npos) << shape;
}

// The AVX2 build (common/digest_avx2.cpp, picked on CPUs that have AVX2) must be XXH3-64 bit for
// bit, as libxxhash computes it: every length up to a few stripes and blocks, and odd offsets.
TEST(Digest, EqualsLibxxhashAtEveryLengthAndAlignment) {
  std::vector<unsigned char> data((4u << 20) + 4096);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  for (std::size_t size = 0; size <= 2048; ++size) {
    ASSERT_EQ(digest_bytes(data.data() + 1, size), XXH3_64bits(data.data() + 1, size)) << size << " bytes";
  }
  for (std::size_t size : {std::size_t{4096}, std::size_t{65537}, std::size_t{1} << 20, std::size_t{4} << 20}) {
    for (std::size_t offset : {0, 3, 64}) {
      EXPECT_EQ(digest_bytes(data.data() + offset, size), XXH3_64bits(data.data() + offset, size))
          << size << " bytes at offset " << offset;
    }
  }
}

TEST(Digest, IsXxh3AndSeesEveryByte) {
  EXPECT_EQ(digest_bytes("", 0), 0x2D06800538D394C2ull);  // XXH3-64 of empty input, from its spec
  std::vector<unsigned char> data(1 << 16);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31);
  auto reference = digest_bytes(data.data(), data.size());
  for (std::size_t i : {std::size_t{0}, data.size() / 2, data.size() - 1}) {
    data[i] ^= 1;
    EXPECT_NE(digest_bytes(data.data(), data.size()), reference) << "flip at " << i;
    data[i] ^= 1;
  }
  EXPECT_EQ(digest_bytes(data.data(), data.size()), reference);
}

// Any value that is no MemoryKind was named "host".
TEST(MemoryKind, EveryKindHasItsNameAndAnUnknownOneIsSaidToBe) {
  EXPECT_EQ(memory_kind_name(MemoryKind::kHost), "host");
  EXPECT_EQ(memory_kind_name(MemoryKind::kCuda), "cuda");
  EXPECT_EQ(memory_kind_name(static_cast<MemoryKind>(7)), "unknown");
}

TEST(DType, NamesAndSizesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(DType::kF8E4M3); ++i) {
    auto dtype = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype);
    EXPECT_GT(dtype_size(dtype), 0u);
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_FALSE(parse_dtype("f128").has_value());
}

}  // namespace
}  // namespace modelcast

namespace modelcast {
namespace {

// as<T>() once reinterpreted whatever it was given: as<double>() of an f32 tensor read garbage
// and half the elements.
TEST(TensorView, TypedAccessChecksTheDtype) {
  float weights[4] = {1, 2, 3, 4};
  TensorSpec spec{"fc.weight", DType::kF32, {2, 2}};
  TensorView view{&spec, weights};
  auto typed = view.as<float>();
  ASSERT_EQ(typed.size(), 4u);
  EXPECT_EQ(typed[3], 4.0f);
  try {
    (void)view.as<double>();
    FAIL() << "read an f32 tensor as double";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'fc.weight' is f32"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)view.as<std::int32_t>(), Error);
  std::uint16_t halves[2] = {0x3c00, 0x4000};
  TensorSpec half{"h", DType::kBF16, {2}};
  TensorView half_view{&half, halves};
  EXPECT_EQ(half_view.as<std::uint16_t>().size(), 2u);
  EXPECT_THROW((void)half_view.as<std::int16_t>(), Error);
  // fp8 codes read as bytes (a consumer converting to f8e4m3 had only bytes() in C++).
  std::uint8_t codes[3] = {0x38, 0x40, 0x80};
  TensorSpec fp8{"q", DType::kF8E4M3, {3}};
  TensorView fp8_view{&fp8, codes};
  ASSERT_EQ(fp8_view.as<std::uint8_t>().size(), 3u);
  EXPECT_EQ(fp8_view.as<std::uint8_t>()[1], 0x40);
  EXPECT_THROW((void)fp8_view.as<std::int8_t>(), Error);
}

}  // namespace
}  // namespace modelcast

#include "core/producer/snapshot_copy.h"

namespace modelcast {
namespace {

TEST(SnapshotCopy, StreamingCopiesEveryByteAtAnyAlignmentAndLength) {
  std::vector<unsigned char> src(70000), dst(70100);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 13 + 5);
  for (std::size_t dst_offset : {0, 1, 7, 15, 16, 33}) {
    for (std::size_t src_offset : {0, 3}) {
      for (std::size_t n : {0, 1, 63, 4096, 4097, 65536 + 61}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        snapshot_copy(dst.data() + dst_offset, src.data() + src_offset, n, /*streaming=*/true);
        ASSERT_EQ(std::memcmp(dst.data() + dst_offset, src.data() + src_offset, n), 0)
            << "dst+" << dst_offset << " src+" << src_offset << " n=" << n;
        EXPECT_EQ(dst[dst_offset + n], 0xEE) << "wrote past the end";
        if (dst_offset > 0) {
          EXPECT_EQ(dst[dst_offset - 1], 0xEE) << "wrote before the start";
        }
      }
    }
  }
}

}  // namespace
}  // namespace modelcast

#include "core/producer/digest_worker.h"

namespace modelcast {
namespace {

// The digest thread's block digests are the one-shot digests of each block's bytes, with
// blocks that split tensors, a short last block, and one block for the whole model.
TEST(BlockDigests, EachIsTheDigestOfItsBlocksBytes) {
  Manifest layout;
  layout.tensors = plan_layout({{"a", DType::kF32, {300000}}, {"b", DType::kU8, {77}}, {"c", DType::kF64, {190001}}},
                               &layout.total_bytes);
  std::vector<std::byte> buffer(layout.total_bytes);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<std::byte>(i * 31 + 7);
  for (std::uint64_t block : {std::uint64_t{64} << 10, std::uint64_t{1} << 20, layout.total_bytes}) {
    layout.block_bytes = block;
    auto blocks = producer::block_digests(buffer.data(), layout);
    ASSERT_EQ(blocks.size(), block_count(layout));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const auto offset = i * block;
      EXPECT_EQ(blocks[i], digest_bytes(buffer.data() + offset, std::min(block, layout.total_bytes - offset)));
    }
  }
}

}  // namespace
}  // namespace modelcast
