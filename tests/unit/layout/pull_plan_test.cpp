// Pull plans: a random global model is cut into the pieces of M producer ranks (dim-0, dim-1,
// replicated and mixed layouts), the plan's ranges are executed with memcpy into the consumer's
// destination buffers, and every byte of every destination is compared with the global tensors
// (and written exactly once). Then the spreading of replicated regions and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/layout/pull_plan.h"
#include "modelcast/error.h"

namespace {

using modelcast::DType;
using modelcast::Error;
using modelcast::ErrorCode;
using modelcast::layout::Box;
using modelcast::layout::ConsumerLayout;
using modelcast::layout::Piece;
using modelcast::layout::PieceCatalog;
using modelcast::layout::plan_pulls;
using modelcast::layout::PlanOptions;
using modelcast::layout::PullPlan;
using modelcast::layout::PullRange;
using modelcast::layout::shard_box;
using modelcast::layout::PullWant;
using Shape = std::vector<std::int64_t>;

struct GlobalTensor {
  std::string name;
  Shape shape;
  DType dtype;
  std::size_t element_size;
  std::vector<std::uint8_t> bytes;
};

// Shapes chosen to cover ranks 0 to 3, sizes no split divides (33, 7, 5), and every dtype size.
std::vector<GlobalTensor> make_model() {
  std::vector<GlobalTensor> model{
      {"attn.weight", {64, 48}, DType::kF32, 4, {}}, {"mlp.weight", {40, 96}, DType::kBF16, 2, {}},
      {"odd.weight", {33, 7}, DType::kF16, 2, {}},   {"norm.bias", {24}, DType::kF32, 4, {}},
      {"scale", {}, DType::kF64, 8, {}},             {"experts", {6, 10, 5}, DType::kI8, 1, {}},
  };
  std::mt19937 rng(2024);
  for (auto& t : model) {
    std::size_t n = t.element_size;
    for (auto s : t.shape) n *= static_cast<std::size_t>(s);
    t.bytes.resize(n);
    for (auto& b : t.bytes) b = static_cast<std::uint8_t>(rng());
  }
  return model;
}

// The bytes of `box` of a global tensor, gathered element by element (independent of the runs
// code under test).
std::vector<std::uint8_t> extract(const GlobalTensor& t, const Box& box) {
  std::vector<std::uint8_t> out;
  if (box.empty()) return out;
  std::vector<std::int64_t> i(box.offsets().begin(), box.offsets().end());
  while (true) {
    std::uint64_t flat = 0;
    for (std::size_t d = 0; d < i.size(); ++d) flat = flat * static_cast<std::uint64_t>(t.shape[d]) + static_cast<std::uint64_t>(i[d]);
    out.insert(out.end(), t.bytes.begin() + static_cast<std::ptrdiff_t>(flat * t.element_size),
               t.bytes.begin() + static_cast<std::ptrdiff_t>((flat + 1) * t.element_size));
    std::size_t d = box.rank();
    while (true) {
      if (d == 0) return out;
      --d;
      if (++i[d] < box.end(d)) break;
      i[d] = box.offset(d);
    }
  }
}

enum class Split { kDim0, kDim1, kReplicated, kMixed, kTwoByTwo };

const char* split_name(Split s) {
  switch (s) {
    case Split::kDim0: return "dim0";
    case Split::kDim1: return "dim1";
    case Split::kReplicated: return "replicated";
    case Split::kMixed: return "mixed";
    case Split::kTwoByTwo: return "tp2xdp2";
  }
  return "?";
}

// Along `dim` when the tensor has it, else along its last dimension, else (a scalar) whole.
Box shard_or_whole(const Shape& shape, std::size_t dim, std::size_t k, std::size_t n) {
  if (shape.empty()) return Box();
  return shard_box(shape, std::min(dim, shape.size() - 1), k, n);
}

// The pieces rank r of m registers under `split`.
std::vector<Piece> pieces_of(const std::vector<GlobalTensor>& model, Split split, std::size_t r, std::size_t m) {
  std::vector<Piece> out;
  for (std::size_t t = 0; t < model.size(); ++t) {
    const auto& g = model[t];
    auto add = [&](Box box) { out.push_back({g.name, g.shape, g.dtype, std::move(box)}); };
    switch (split) {
      case Split::kDim0: add(shard_or_whole(g.shape, 0, r, m)); break;
      case Split::kDim1: add(shard_or_whole(g.shape, 1, r, m)); break;
      case Split::kReplicated: add(Box::whole(g.shape)); break;
      case Split::kMixed:
        // Per tensor another scheme; attn.weight as two pieces per rank (shards r and r + m of 2m).
        if (t == 0) {
          add(shard_or_whole(g.shape, 0, r, 2 * m));
          add(shard_or_whole(g.shape, 0, r + m, 2 * m));
        } else if (t % 3 == 1) {
          add(shard_or_whole(g.shape, 1, r, m));
        } else if (t % 3 == 2) {
          add(Box::whole(g.shape));
        } else {
          add(shard_or_whole(g.shape, 0, r, m));
        }
        break;
      case Split::kTwoByTwo:
        // Tensor parallel within a data-parallel pair: ranks r and r + m/2 hold the same shard.
        add(shard_or_whole(g.shape, t % 2, r % (m / 2), m / 2));
        break;
    }
  }
  return out;
}

struct Want {
  std::string name;
  ConsumerLayout layout;
};

// What a consumer may want: the whole model, TP halves and quarters along either dim (each
// consumer of a TP group wants its shard), one tensor alone, or all shards as separate boxes.
std::vector<Want> wants_for(const std::vector<GlobalTensor>& model) {
  std::vector<Want> out;
  out.push_back({"whole", {}});
  for (std::size_t n : {2, 4}) {
    for (std::size_t dim : {0, 1}) {
      for (std::size_t k = 0; k < n; ++k) {
        ConsumerLayout layout;
        for (const auto& g : model) layout.tensors[g.name] = PullWant::of({shard_or_whole(g.shape, dim, k, n)});
        out.push_back({"tp" + std::to_string(n) + "-dim" + std::to_string(dim) + "-rank" + std::to_string(k), layout});
      }
    }
  }
  for (const auto& g : model) {
    ConsumerLayout layout;
    layout.unlisted_whole = false;
    layout.tensors[g.name] = PullWant::whole();
    out.push_back({"only-" + g.name, layout});
  }
  ConsumerLayout all_quarters;
  for (const auto& g : model) {
    std::vector<Box> boxes;
    for (std::size_t k = 0; k < 4; ++k) boxes.push_back(shard_or_whole(g.shape, 1, k, 4));
    if (g.shape.empty()) boxes.resize(1);  // a scalar has one box
    all_quarters.tensors[g.name] = PullWant::of(boxes);
  }
  out.push_back({"quarters-as-boxes", all_quarters});
  ConsumerLayout one_half_nothing_else;
  one_half_nothing_else.unlisted_whole = false;
  one_half_nothing_else.tensors["mlp.weight"] = PullWant::of({shard_box(model[1].shape, 1, 1, 2)});
  one_half_nothing_else.tensors["attn.weight"] = PullWant::nothing();
  out.push_back({"one-half", one_half_nothing_else});
  return out;
}

// Executes the plan as a data path would and checks every destination byte.
void execute_and_check(const std::vector<GlobalTensor>& model, const PieceCatalog& catalog,
                       const std::vector<std::vector<std::vector<std::uint8_t>>>& buffers, const PullPlan& plan,
                       const std::string& what) {
  std::vector<std::vector<std::uint8_t>> dest(plan.destinations.size());
  std::vector<std::vector<std::uint8_t>> writes(plan.destinations.size());
  for (std::size_t d = 0; d < dest.size(); ++d) {
    dest[d].assign(plan.destinations[d].bytes, 0);
    writes[d].assign(plan.destinations[d].bytes, 0);
  }
  ASSERT_EQ(plan.by_rank.size(), catalog.ranks());
  for (std::size_t r = 0; r < plan.by_rank.size(); ++r) {
    std::uint64_t rank_bytes = 0;
    const auto& ranges = plan.by_rank[r];
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const PullRange& range = ranges[i];
      ASSERT_LT(range.piece, buffers[r].size()) << what;
      ASSERT_LT(range.destination, dest.size()) << what;
      const auto& src = buffers[r][range.piece];
      auto& dst = dest[range.destination];
      ASSERT_GT(range.length, 0u) << what;
      ASSERT_GT(range.count, 0u) << what;
      if (range.count == 1) {
        EXPECT_EQ(range.src_stride + range.dst_stride, 0u) << what;
      }
      for (std::uint64_t k = 0; k < range.count; ++k) {
        const std::uint64_t s = range.src_offset + k * range.src_stride;
        const std::uint64_t t = range.dst_offset + k * range.dst_stride;
        ASSERT_LE(s + range.length, src.size()) << what;
        ASSERT_LE(t + range.length, dst.size()) << what;
        std::memcpy(dst.data() + t, src.data() + s, range.length);
        for (std::uint64_t b = 0; b < range.length; ++b) ++writes[range.destination][t + b];
      }
      rank_bytes += range.bytes();
      if (i > 0) {
        const PullRange& prev = ranges[i - 1];
        // Sorted by piece and first source offset, and coalesced: no single range continues the
        // previous one.
        EXPECT_TRUE(prev.piece < range.piece || (prev.piece == range.piece && prev.src_offset < range.src_offset))
            << what << " rank " << r << " range " << i;
        EXPECT_FALSE(prev.piece == range.piece && prev.destination == range.destination && prev.count == 1 &&
                     range.count == 1 && prev.src_offset + prev.length == range.src_offset &&
                     prev.dst_offset + prev.length == range.dst_offset)
            << what << " rank " << r << " range " << i << " not coalesced";
      }
    }
    EXPECT_EQ(rank_bytes, plan.bytes_by_rank[r]) << what;
  }
  std::uint64_t wanted = 0;
  for (std::size_t d = 0; d < dest.size(); ++d) {
    const auto& destination = plan.destinations[d];
    wanted += destination.bytes;
    auto g = std::find_if(model.begin(), model.end(), [&](const auto& t) { return t.name == destination.tensor; });
    ASSERT_NE(g, model.end());
    EXPECT_EQ(destination.dtype, g->dtype);
    EXPECT_EQ(destination.bytes, destination.box.volume() * g->element_size);
    EXPECT_EQ(writes[d], std::vector<std::uint8_t>(writes[d].size(), 1))
        << what << ": " << destination.tensor << " " << destination.box.to_string() << " not written exactly once";
    EXPECT_EQ(dest[d], extract(*g, destination.box)) << what << ": " << destination.tensor << " "
                                                      << destination.box.to_string();
  }
  EXPECT_EQ(plan.total_bytes(), wanted) << what;
}

TEST(PullPlan, EveryLayoutAssemblesEveryWantedBoxByteForByte) {
  const auto model = make_model();
  const auto wants = wants_for(model);
  int plans = 0;
  for (std::size_t m : {1, 2, 4}) {
    for (Split split : {Split::kDim0, Split::kDim1, Split::kReplicated, Split::kMixed, Split::kTwoByTwo}) {
      if (split == Split::kTwoByTwo && m < 4) continue;
      std::vector<std::vector<Piece>> pieces(m);
      std::vector<std::vector<std::vector<std::uint8_t>>> buffers(m);
      for (std::size_t r = 0; r < m; ++r) {
        pieces[r] = pieces_of(model, split, r, m);
        for (const Piece& p : pieces[r]) {
          auto g = std::find_if(model.begin(), model.end(), [&](const auto& t) { return t.name == p.tensor; });
          buffers[r].push_back(extract(*g, p.box));
        }
      }
      PieceCatalog catalog(pieces);
      for (std::uint64_t min_split : {std::uint64_t{1} << 20, std::uint64_t{16}}) {
        for (const Want& want : wants) {
          const std::string what = "M=" + std::to_string(m) + " " + split_name(split) + " want " + want.name +
                                   " min_split " + std::to_string(min_split);
          PullPlan plan = plan_pulls(catalog, want.layout, PlanOptions{min_split});
          execute_and_check(model, catalog, buffers, plan, what);
          ++plans;
          if (HasFailure()) return;
        }
      }
    }
  }
  EXPECT_EQ(plans, 2 * static_cast<int>(wants.size()) * (4 + 4 + 4 + 1));
}

TEST(PullPlan, ShardsOfTheProducersLayoutAreOneRangePerPiece) {
  // Producer and consumer both split along dim 0 into 4: consumer k pulls rank k's piece whole.
  Shape shape{1024, 256};
  std::vector<std::vector<Piece>> pieces(4);
  for (std::size_t r = 0; r < 4; ++r) pieces[r].push_back({"w", shape, DType::kBF16, shard_box(shape, 0, r, 4)});
  PieceCatalog catalog(pieces);
  ConsumerLayout layout;
  layout.tensors["w"] = PullWant::of({shard_box(shape, 0, 2, 4)});
  PullPlan plan = plan_pulls(catalog, layout);
  EXPECT_EQ(plan.by_rank[2], (std::vector<PullRange>{{0, 0, 256u * 256 * 2, 0, 0}}));
  EXPECT_TRUE(plan.by_rank[0].empty() && plan.by_rank[1].empty() && plan.by_rank[3].empty());
  // Resharded along the other dimension: the 256 rows of each rank's piece in one strided range.
  layout.tensors["w"] = PullWant::of({shard_box(shape, 1, 0, 2)});
  plan = plan_pulls(catalog, layout);
  for (std::uint64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(plan.by_rank[r], (std::vector<PullRange>{{0, 0, 128 * 2, 0, r * 256 * 128 * 2, 256, 256 * 2, 128 * 2}}));
    EXPECT_EQ(plan.bytes_by_rank[r], 256u * 128 * 2);
  }
}

TEST(PullPlan, ReplicatedTensorIsSpreadEvenlyOverItsOwners) {
  Shape shape{1024, 256};  // 1 MiB of f32
  std::vector<std::vector<Piece>> pieces(4);
  for (auto& rank : pieces) rank.push_back({"emb", shape, DType::kF32, Box::whole(shape)});
  PullPlan plan = plan_pulls(PieceCatalog(pieces), {}, PlanOptions{4096});
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(plan.bytes_by_rank[r], 256u * 1024) << "rank " << r;
    ASSERT_EQ(plan.by_rank[r].size(), 1u);  // one dim-0 slab each
  }
  // Below the split threshold the tensor comes whole from one rank, the lowest.
  plan = plan_pulls(PieceCatalog(pieces), {}, PlanOptions{std::uint64_t{4} << 20});
  EXPECT_EQ(plan.bytes_by_rank, (std::vector<std::uint64_t>{1u << 20, 0, 0, 0}));
}

TEST(PullPlan, SmallReplicatedTensorsBalanceAcrossTheModel) {
  // 100 replicated 4 KiB tensors over 4 ranks: 25 each; rank 0 also has a 64 KiB tensor of its
  // own, so the replicated ones go to the other three first.
  std::vector<std::vector<Piece>> pieces(4);
  for (int t = 0; t < 100; ++t) {
    char name[16];
    std::snprintf(name, sizeof name, "bias.%03d", t);
    for (auto& rank : pieces) rank.push_back({name, {1024}, DType::kF32, Box({0}, {1024})});
  }
  PullPlan plan = plan_pulls(PieceCatalog(pieces), {});
  EXPECT_EQ(plan.bytes_by_rank, (std::vector<std::uint64_t>(4, 25u * 4096)));

  pieces[0].push_back({"own", {16384}, DType::kF32, Box({0}, {16384})});
  plan = plan_pulls(PieceCatalog(pieces), {});
  // 464 KiB in all: the replicated tensors first fill ranks 1-3 up to rank 0's 64 KiB, then
  // spread evenly over all four.
  EXPECT_EQ(plan.bytes_by_rank, (std::vector<std::uint64_t>(4, 116u * 1024)));
}

TEST(PullPlan, PartlyReplicatedRegionGoesToItsOwnersOnly) {
  // Rank 0 holds rows 0:6, rank 1 rows 4:10, rank 2 rows 8:10: rows 4:6 belong to 0 and 1, 8:10 to
  // 1 and 2. Spread with a tiny split size, no row is pulled twice and each comes from an owner.
  Shape shape{10, 4};
  std::vector<std::vector<Piece>> pieces(3);
  pieces[0].push_back({"w", shape, DType::kU8, Box({0, 0}, {6, 4})});
  pieces[1].push_back({"w", shape, DType::kU8, Box({4, 0}, {6, 4})});
  pieces[2].push_back({"w", shape, DType::kU8, Box({8, 0}, {2, 4})});
  PullPlan plan = plan_pulls(PieceCatalog(pieces), {}, PlanOptions{1});
  EXPECT_EQ(plan.total_bytes(), 40u);
  // Rank 0 alone owns rows 0:4 (16 bytes) and rank 1 rows 6:8 (8): the shared rows go to the less
  // loaded owner one row at a time, rows 4 and 5 to rank 1, rows 8 and 9 to rank 2.
  EXPECT_EQ(plan.bytes_by_rank, (std::vector<std::uint64_t>{16, 16, 8}));
}

TEST(PullPlan, SlabsOfOneCutThatGoToOneRankMergeIntoOneStridedRange) {
  // "w" [8, 4] is replicated on ranks 0 and 1; rank 1 is busy with "x". The consumer's dim-1
  // half of w is split into two 4-row slabs, both go to rank 0 and come back as one range.
  Shape shape{8, 4};
  std::vector<std::vector<Piece>> pieces(2);
  pieces[0].push_back({"w", shape, DType::kU8, Box::whole(shape)});
  pieces[1].push_back({"w", shape, DType::kU8, Box::whole(shape)});
  pieces[1].push_back({"x", {100}, DType::kU8, Box({0}, {100})});
  ConsumerLayout layout;
  layout.tensors["w"] = PullWant::of({shard_box(shape, 1, 1, 2)});
  PullPlan plan = plan_pulls(PieceCatalog(pieces), layout, PlanOptions{1});
  EXPECT_EQ(plan.by_rank[0], (std::vector<PullRange>{{0, 2, 2, 0, 0, 8, 4, 2}}));
}

TEST(PullPlan, PlanDependsOnlyOnTheInputsNotOnRegistrationOrder) {
  const auto model = make_model();
  std::vector<std::vector<Piece>> pieces(4), reversed(4);
  for (std::size_t r = 0; r < 4; ++r) {
    pieces[r] = pieces_of(model, Split::kReplicated, r, 4);
    reversed[r] = pieces[r];
    std::reverse(reversed[r].begin(), reversed[r].end());
  }
  PullPlan a = plan_pulls(PieceCatalog(pieces), {}, PlanOptions{64});
  PullPlan b = plan_pulls(PieceCatalog(pieces), {}, PlanOptions{64});
  PullPlan c = plan_pulls(PieceCatalog(reversed), {}, PlanOptions{64});
  EXPECT_EQ(a.by_rank, b.by_rank);
  EXPECT_EQ(a.bytes_by_rank, c.bytes_by_rank);
  ASSERT_EQ(a.destinations.size(), c.destinations.size());
  for (std::size_t d = 0; d < a.destinations.size(); ++d) EXPECT_EQ(a.destinations[d].tensor, c.destinations[d].tensor);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(a.by_rank[r].size(), c.by_rank[r].size());
}

// The Error thrown by f, or a failure.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorCode::kState, "");
}

TEST(PullPlan, MissingBoxIsRefusedNamingTensorAndBox) {
  Shape shape{1024, 1024};
  std::vector<std::vector<Piece>> pieces(2);
  pieces[0].push_back({"w", shape, DType::kF32, Box({0, 256}, {1024, 768})});
  pieces[1].push_back({"w", shape, DType::kF32, Box({0, 0}, {512, 256})});
  PieceCatalog catalog(pieces);
  Error e = error_of([&] { plan_pulls(catalog, {}); });
  EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
  EXPECT_EQ(std::string(e.what()), "tensor 'w': no rank owns [512:1024, 0:256] (wanted [0:1024, 0:1024])");
  // A box inside what is owned plans; one reaching into the hole names only the part missing.
  ConsumerLayout layout;
  layout.tensors["w"] = PullWant::of({Box({0, 0}, {512, 1024})});
  EXPECT_EQ(plan_pulls(catalog, layout).total_bytes(), 512u * 1024 * 4);
  layout.tensors["w"] = PullWant::of({Box({500, 100}, {20, 200})});
  e = error_of([&] { plan_pulls(catalog, layout); });
  EXPECT_NE(std::string(e.what()).find("no rank owns [512:520, 100:256]"), std::string::npos) << e.what();
}

TEST(PullPlan, RefusesUnknownTensorsAndBadWants) {
  Shape shape{8, 8};
  std::vector<std::vector<Piece>> pieces(1);
  pieces[0].push_back({"w", shape, DType::kF32, Box::whole(shape)});
  PieceCatalog catalog(pieces);
  ConsumerLayout layout;
  layout.tensors["v"] = PullWant::whole();
  Error e = error_of([&] { plan_pulls(catalog, layout); });
  EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();

  layout.tensors.clear();
  layout.tensors["w"] = PullWant::of({Box({4, 0}, {5, 8})});
  e = error_of([&] { plan_pulls(catalog, layout); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("[4:9, 0:8]"), std::string::npos) << e.what();

  layout.tensors["w"] = PullWant::of({Box({0}, {8})});
  EXPECT_EQ(error_of([&] { plan_pulls(catalog, layout); }).code(), ErrorCode::kInvalidArgument);

  layout.tensors["w"] = PullWant::of({Box({0, 0}, {4, 8}), Box({3, 0}, {2, 8})});
  e = error_of([&] { plan_pulls(catalog, layout); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();

  // Adjacent boxes and an empty one are fine.
  layout.tensors["w"] = PullWant::of({Box({0, 0}, {4, 8}), Box({4, 0}, {4, 8}), Box({8, 0}, {0, 8})});
  PullPlan plan = plan_pulls(catalog, layout);
  EXPECT_EQ(plan.destinations.size(), 3u);
  EXPECT_EQ(plan.total_bytes(), 256u);
  EXPECT_THROW(plan_pulls(catalog, {}, PlanOptions{0}), Error);
}

TEST(PullPlan, CatalogRefusesDisagreeingOutOfShapeAndOverlappingPieces) {
  Shape shape{8, 8};
  auto catalog_error = [&](std::vector<std::vector<Piece>> pieces) {
    return error_of([&] { PieceCatalog catalog(std::move(pieces)); });
  };
  Error e = catalog_error({{{"w", shape, DType::kF32, Box({0, 0}, {4, 8})}},
                          {{"w", {8, 9}, DType::kF32, Box({4, 0}, {4, 8})}}});
  EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(std::string(e.what()).find("tensor 'w': rank 1 registers it as [8, 9] f32 but rank 0 as [8, 8] f32"),
            std::string::npos)
      << e.what();
  e = catalog_error({{{"w", shape, DType::kF32, Box({0, 0}, {4, 8})}},
                     {{"w", shape, DType::kBF16, Box({4, 0}, {4, 8})}}});
  EXPECT_EQ(e.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();

  e = catalog_error({{{"w", shape, DType::kF32, Box({6, 0}, {4, 8})}}});
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("[6:10, 0:8]"), std::string::npos) << e.what();
  EXPECT_EQ(catalog_error({{{"w", shape, DType::kF32, Box({0}, {4})}}}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(catalog_error({{{"w", shape, static_cast<DType>(200), Box({0, 0}, {4, 8})}}}).code(),
            ErrorCode::kInvalidArgument);

  e = catalog_error({{{"w", shape, DType::kF32, Box({0, 0}, {5, 8})}, {"w", shape, DType::kF32, Box({4, 0}, {4, 8})}}});
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  // The same boxes on two ranks replicate; adjacent boxes on one rank are fine.
  PieceCatalog fine({{{"w", shape, DType::kF32, Box({0, 0}, {4, 8})}, {"w", shape, DType::kF32, Box({4, 0}, {4, 8})}},
                     {{"w", shape, DType::kF32, Box({0, 0}, {5, 8})}}});
  EXPECT_EQ(fine.find("w")->pieces.size(), 3u);
  EXPECT_EQ(fine.find("v"), nullptr);
}

TEST(PullPlan, ThousandTensorsOnEightRanksWithFourBoxesEach) {
  // The planning scale of a large model (no timing asserted; gtest prints the time taken): 1,000
  // tensors split along dim 0 over 8 ranks, a consumer wanting each tensor as 4 dim-0 quarters,
  // then as 4 dim-1 quarters (cutting across every piece's rows).
  std::vector<std::vector<Piece>> pieces(8);
  Shape shape{256, 128};
  for (int t = 0; t < 1000; ++t) {
    std::string name = "layer." + std::to_string(t);
    for (std::size_t r = 0; r < 8; ++r) pieces[r].push_back({name, shape, DType::kBF16, shard_box(shape, 0, r, 8)});
  }
  PieceCatalog catalog(pieces);
  for (std::size_t dim : {0, 1}) {
    ConsumerLayout layout;
    for (const auto& t : catalog.tensors()) {
      std::vector<Box> quarters;
      for (std::size_t k = 0; k < 4; ++k) quarters.push_back(shard_box(shape, dim, k, 4));
      layout.tensors[t.name] = PullWant::of(std::move(quarters));
    }
    PullPlan plan = plan_pulls(catalog, layout);
    EXPECT_EQ(plan.destinations.size(), 4000u);
    EXPECT_EQ(plan.total_bytes(), 1000u * 256 * 128 * 2);
    std::size_t ranges = 0;
    for (const auto& r : plan.by_rank) ranges += r.size();
    // dim 0: each rank's piece is half of a quarter: one range per piece. dim 1: a strided
    // range (32 rows) per piece and quarter.
    EXPECT_EQ(ranges, dim == 0 ? 8000u : 8000u * 4);
  }
}

}  // namespace
