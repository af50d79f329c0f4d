// A model trained sharded, for the tests of producer ranks: M in-process producer ranks, each
// registering its pieces of a global model (dim-0 pieces, dim-1 pieces, replicated ones, one held
// by one rank only) and publishing on its own, and a check of what a consumer assembled against
// the global tensors cut element by element (host or device views).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "device/device_runtime.h"
#include "modelcast/consumer.h"
#include "modelcast/producer.h"
#include "reference_box.h"

namespace rankedmodel {

using modelcast::DType;
using modelcast::TensorWant;

struct Global {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
  std::size_t element_size() const { return modelcast::dtype_size(dtype); }
};

// Values of every element are a function of (tensor, index, step), so any byte from another step
// or another place shows. `w_rows`: the rows of "w" (a trainer restarted with a smaller model).
inline std::vector<Global> global_model(std::int64_t step, std::int64_t w_rows = 2048) {
  std::vector<Global> model{{"w", DType::kF32, {w_rows, 40}, {}},  // split along dim 0 across ranks
                            {"e", DType::kI16, {30, 64}, {}},      // split along dim 1
                            {"b", DType::kF32, {40}, {}},          // replicated on every rank
                            {"emb", DType::kF32, {4096, 128}, {}},  // replicated too, 2 MiB
                            {"head", DType::kI32, {10, 7}, {}}};   // held whole by the last rank
  for (std::size_t t = 0; t < model.size(); ++t) {
    auto& g = model[t];
    std::int64_t n = 1;
    for (auto e : g.shape) n *= e;
    g.bytes.resize(static_cast<std::size_t>(n) * g.element_size());
    std::mt19937_64 rng(static_cast<std::uint64_t>(step) * 1000 + t);
    for (auto& b : g.bytes) b = static_cast<std::byte>(rng());
    if (g.dtype == DType::kF32) {  // finite floats: NaN patterns compare by bytes anyway
      auto* f = reinterpret_cast<float*>(g.bytes.data());
      for (std::int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(step * 100000 + static_cast<std::int64_t>(t) * 10000 + i);
    }
  }
  return model;
}

inline std::vector<std::byte> cut(const Global& t, const std::vector<std::int64_t>& offset,
                           const std::vector<std::int64_t>& extent) {
  return testing_support::cut_box(t.bytes.data(), t.shape, t.element_size(), offset, extent);
}

inline std::pair<std::int64_t, std::int64_t> chunk(std::int64_t size, std::size_t k, std::size_t n) {
  return testing_support::chunk_of(size, k, n);
}

// One producer rank: its pieces of the global model, copied out of it at each publish.
struct Rank {
  std::uint32_t rank, ranks;
  std::int64_t w_rows;
  std::vector<Global> pieces;  // each piece's own bytes
  std::vector<std::vector<std::int64_t>> offsets, globals;
  std::unique_ptr<modelcast::Producer> producer;

  // `hole`: the last rank registers no piece of "w", whose last rows then belong to nobody.
  // `relay_fanout`, `run_id`: the producer's options.
  Rank(std::uint32_t r, std::uint32_t m, std::vector<std::string> endpoints, const std::string& bind, bool hole = false,
       std::int64_t rows = 2048, std::size_t relay_fanout = 0, const std::string& run_id = "")
      : rank(r), ranks(m), w_rows(rows) {
    const auto model = global_model(0, w_rows);
    for (const auto& g : model) {
      std::vector<std::int64_t> offset(g.shape.size(), 0), extent = g.shape;
      if (g.name == "w") std::tie(offset[0], extent[0]) = chunk(g.shape[0], r, m);
      if (g.name == "e") std::tie(offset[1], extent[1]) = chunk(g.shape[1], r, m);
      if (g.name == "head" && r != m - 1) continue;
      if (g.name == "w" && hole && r == m - 1) continue;
      pieces.push_back({g.name, g.dtype, extent, cut(g, offset, extent)});
      offsets.push_back(offset);
      globals.push_back(g.shape);
    }
    modelcast::ProducerOptions options;
    options.model_name = "sharded";
    options.control_endpoint = bind;
    options.transfer_chunk_bytes = 64 << 10;
    options.relay_fanout = relay_fanout;
    options.rank = r;
    options.rank_count = m;
    options.run_id = run_id;
    if (r == 0) options.rank_endpoints = std::move(endpoints);
    producer = std::make_unique<modelcast::Producer>(options);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      modelcast::TensorRef ref{{pieces[i].name, pieces[i].dtype, pieces[i].shape}, pieces[i].bytes.data()};
      ref.global_shape = globals[i];
      ref.global_offset = offsets[i];
      producer->register_tensor(ref);
    }
    producer->prepare();
  }

  void publish(std::int64_t step) {
    const auto model = global_model(step, w_rows);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      for (const auto& g : model) {
        if (g.name != pieces[i].name) continue;
        // Into the registered memory: the producer copies from the pointers it was given.
        const auto fresh = cut(g, offsets[i], pieces[i].shape);
        std::memcpy(pieces[i].bytes.data(), fresh.data(), fresh.size());
      }
    }
    producer->publish(step);
  }
};

// Ranks 1.. first (any port), then rank 0 told their endpoints, at `bind0`.
struct Ranks {
  std::vector<std::unique_ptr<Rank>> ranks;
  explicit Ranks(std::uint32_t m, bool hole = false, const std::string& bind0 = "tcp://127.0.0.1:0",
                 std::size_t relay_fanout = 0, const std::string& run_id = "") {
    ranks.resize(m);
    std::vector<std::string> endpoints(m);
    for (std::uint32_t r = 1; r < m; ++r) {
      ranks[r] = std::make_unique<Rank>(r, m, std::vector<std::string>{}, "tcp://127.0.0.1:0", hole, 2048, relay_fanout,
                                        run_id);
      endpoints[r] = ranks[r]->producer->control_endpoint();
    }
    ranks[0] = std::make_unique<Rank>(0, m, endpoints, bind0, hole, 2048, relay_fanout, run_id);
  }
  // Every rank again at the endpoint it had (`endpoints`, rank 0's first), "w" of `w_rows` rows.
  Ranks(const std::vector<std::string>& endpoints, std::int64_t w_rows) {
    const auto m = static_cast<std::uint32_t>(endpoints.size());
    ranks.resize(m);
    std::vector<std::string> told = endpoints;
    told[0].clear();  // as rank 0 was told them above
    for (std::uint32_t r = 1; r < m; ++r) {
      ranks[r] = std::make_unique<Rank>(r, m, std::vector<std::string>{}, endpoints[r], false, w_rows);
    }
    ranks[0] = std::make_unique<Rank>(0, m, told, endpoints[0], false, w_rows);
  }
  std::string endpoint() const { return ranks[0]->producer->control_endpoint(); }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> all;
    for (const auto& r : ranks) all.push_back(r->producer->control_endpoint());
    return all;
  }
  void publish(std::int64_t step) {
    for (auto& r : ranks) r->publish(step);
  }
};

// Empty if `view` holds, of every tensor of step `step`, what `boxes_of` says is wanted of it
// (nullopt: the whole tensor; an empty list: none of it), each part with its place; "w" of
// `w_rows` rows.
template <typename BoxesOf>
std::string check(const modelcast::ModelView& view, std::int64_t step, BoxesOf&& boxes_of, std::int64_t w_rows = 2048) {
  if (view.step() != step) return "step " + std::to_string(view.step()) + ", expected " + std::to_string(step);
  for (const auto& g : global_model(step, w_rows)) {
    std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> box = boxes_of(g);
    auto v = view.find(g.name);
    if (box && box->second.empty()) {
      if (v) return "'" + g.name + "' is there, not wanted";
      continue;
    }
    if (!v) return "'" + g.name + "' is missing";
    std::vector<std::int64_t> offset(g.shape.size(), 0), extent = g.shape;
    if (box) std::tie(offset, extent) = *box;
    if (v->shape() != extent) return "'" + g.name + "' has another shape";
    const bool whole = offset == std::vector<std::int64_t>(g.shape.size(), 0) && extent == g.shape;
    if (whole ? v->is_part() : !v->is_part()) return "'" + g.name + "' part or whole wrongly";
    if (!whole && std::vector<std::int64_t>(v->box_offset.begin(), v->box_offset.end()) != offset) {
      return "'" + g.name + "' offset";
    }
    auto expected = cut(g, offset, extent);
    std::vector<std::byte> held(v->size_bytes());
    if (v->spec->memory == modelcast::MemoryKind::kCuda) {  // copied back from the device
      auto& runtime = modelcast::device::require_device_runtime("a device view");
      if (!held.empty()) runtime.copy_async(held.data(), v->data, held.size(), nullptr);
      runtime.synchronize_stream(nullptr);
    } else if (!held.empty()) {
      std::memcpy(held.data(), v->data, held.size());
    }
    if (held != expected) {
      return "'" + g.name + "' differs at step " + std::to_string(step);
    }
  }
  return {};
}

// What a check wants of a tensor: nullopt for all of it, an empty box for none, else one box.
using Boxes = std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>>;

// What shard k of n along `dim` keeps of each tensor (TensorWant::shard under "*": a tensor
// without that dimension whole).
inline auto shard_of(std::size_t dim, std::size_t k, std::size_t n) {
  return [=](const Global& g) -> Boxes {
    if (dim >= g.shape.size()) return std::nullopt;
    std::vector<std::int64_t> offset(g.shape.size(), 0), extent = g.shape;
    std::tie(offset[dim], extent[dim]) = chunk(g.shape[dim], k, n);
    return std::make_pair(offset, extent);
  };
}

inline modelcast::ConsumerOptions options_for(const std::string& endpoint, std::vector<TensorWant> wants = {}) {
  modelcast::ConsumerOptions o;
  o.producer_endpoint = endpoint;
  o.model_name = "sharded";
  o.wants = std::move(wants);
  return o;
}

}  // namespace rankedmodel
