// Which blocks a consumer that keeps parts of tensors receives: TensorSelection::blocks against a
// brute-force marking of every wanted element's bytes, over random shapes, parts and block sizes.
#include <gtest/gtest.h>

#include <random>

#include "core/model/manifest.h"
#include "core/model/tensor_selection.h"
#include "modelcast/error.h"

namespace modelcast {
namespace {

// The blocks holding a byte of box [offset, offset + extent) of a row-major tensor placed at
// `at`, found one element at a time.
void mark_elements(std::vector<bool>& blocks, std::uint64_t block_bytes, std::uint64_t at,
                   const std::vector<std::int64_t>& shape, std::size_t size, const std::vector<std::int64_t>& offset,
                   const std::vector<std::int64_t>& extent) {
  std::int64_t volume = 1;
  for (auto e : extent) volume *= e;
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::int64_t n = 0; n < volume; ++n) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + offset[d] + index[d];
    const std::uint64_t first = at + static_cast<std::uint64_t>(flat) * size;
    for (std::uint64_t b = first / block_bytes; b <= (first + size - 1) / block_bytes; ++b) blocks[b] = true;
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
  }
}

TEST(TensorSelection, BlocksAreExactlyThoseHoldingWantedBytes) {
  std::mt19937_64 rng(7);
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  for (int round = 0; round < 200; ++round) {
    std::vector<TensorSpec> specs;
    const int tensors = static_cast<int>(pick(1, 4));
    for (int i = 0; i < tensors; ++i) {
      std::vector<std::int64_t> shape(static_cast<std::size_t>(pick(1, 3)));
      for (auto& e : shape) e = pick(1, 40);
      specs.push_back({"t" + std::to_string(i), i % 2 ? DType::kBF16 : DType::kF32, shape});
    }
    Manifest m;
    m.version = 1;
    m.tensors = plan_layout(specs, &m.total_bytes);
    m.block_bytes = static_cast<std::uint64_t>(pick(1, 600));
    m.block_digests.assign((m.total_bytes + m.block_bytes - 1) / m.block_bytes, 0);
    std::vector<TensorWant> wants;
    std::vector<bool> expected(m.block_digests.size(), false);
    for (const auto& t : m.tensors) {
      const auto& shape = t.spec.shape;
      const auto kind = pick(0, 3);
      if (kind == 0) {  // whole
        wants.push_back(TensorWant::whole(t.spec.name));
        mark_elements(expected, m.block_bytes, t.offset, shape, dtype_size(t.spec.dtype), std::vector<std::int64_t>(shape.size(), 0), shape);
      } else if (kind == 1) {  // nothing
        wants.push_back(TensorWant::nothing(t.spec.name));
      } else {  // one box anywhere
        std::vector<std::int64_t> offset(shape.size()), extent(shape.size());
        for (std::size_t d = 0; d < shape.size(); ++d) {
          offset[d] = pick(0, shape[d] - 1);
          extent[d] = pick(0, shape[d] - offset[d]);
        }
        wants.push_back(TensorWant::of(t.spec.name, {{offset, extent}}));
        mark_elements(expected, m.block_bytes, t.offset, shape, dtype_size(t.spec.dtype), offset, extent);
      }
    }
    auto selection = TensorSelection::resolve(wants, m);
    auto blocks = selection.blocks(m);
    if (selection.everything()) {
      EXPECT_TRUE(blocks.empty());
      continue;
    }
    ASSERT_EQ(blocks, expected) << "round " << round << ", block bytes " << m.block_bytes;
  }
}

TEST(TensorSelection, AShardUnderTheWildcardKeepsWholeWhatLacksTheDimension) {
  Manifest m;
  m.version = 3;
  m.tensors = plan_layout({{"w", DType::kF32, {8, 6}}, {"b", DType::kF32, {6}}, {"s", DType::kF32, {}}}, &m.total_bytes);
  auto selection = TensorSelection::resolve({TensorWant::shard("*", 1, 1, 4)}, m);
  ASSERT_EQ(selection.kept().size(), 3u);
  EXPECT_FALSE(selection.kept()[0].whole);
  EXPECT_EQ(selection.kept()[0].parts.at(0), layout::Box({0, 2}, {8, 2}));
  EXPECT_TRUE(selection.kept()[1].whole);  // a bias has no dimension 1: replicated
  EXPECT_TRUE(selection.kept()[2].whole);
  EXPECT_FALSE(selection.everything());
  EXPECT_EQ(selection.wanted_bytes(), 8u * 2 * 4 + 6 * 4 + 4);
  // Named, a tensor without the dimension is an error naming it.
  try {
    TensorSelection::resolve({TensorWant::shard("b", 1, 0, 2)}, m);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

// A box of another rank than its tensor's was reported as lying outside it, which sent the user
// looking at offsets rather than at the number of dimensions.
TEST(TensorSelection, ABoxOfAnotherRankIsNamedSo) {
  Manifest m;
  m.version = 1;
  m.tensors = plan_layout({{"w", DType::kF32, {8, 6}}}, &m.total_bytes);
  TensorWant want{"w", TensorWant::Kind::kBoxes, 0, 0, 1, {}};
  want.boxes.push_back({{0}, {1}});
  try {
    TensorSelection::resolve({want}, m);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
    EXPECT_NE(std::string(e.what()).find("has 2 dimensions; the wanted box [0:1] has 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace modelcast
