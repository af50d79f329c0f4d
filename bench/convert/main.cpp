// What a consumer's conversions cost (ConsumerOptions::conversions): each conversion the
// consumer offers, over one tensor of --mib MiB in the source dtype, against a memcpy of the
// same source bytes into a warm buffer in the same run (the ceiling: a conversion reads the
// source and writes the result, as the copy does). Medians of --reps runs; the conversion runs
// on the consumer's service thread after a version is verified, so it adds to update_ms.
// Table, or --json: rows {from, to, scale_block, mib, convert_ms, memcpy_ms, gb_s, x_memcpy}.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/layout/convert.h"

using modelcast::layout::Format;
namespace layout = modelcast::layout;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Case {
  Format from, to;
  std::size_t block;  // fp8: elements per scale, 0 = one per tensor
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast-convert-bench: what each consumer conversion costs against memcpy"};
  std::size_t mib = 256;
  int reps = 7;
  bool json = false;
  // Bounded: mib << 20 past 64 bits wrapped to 0 bytes and every row timed nothing.
  app.add_option("--mib", mib, "size of the source tensor in MiB (1 to 65536)")->check(CLI::Range(1, 65536));
  app.add_option("--reps", reps, "timed runs per case (median; 1 to 1000)")->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "print the rows as JSON");
  CLI11_PARSE(app, argc, argv);

  const std::vector<Case> cases = {
      {Format::kF32, Format::kBF16, 0}, {Format::kF32, Format::kF16, 0},    {Format::kBF16, Format::kF32, 0},
      {Format::kF16, Format::kF32, 0},  {Format::kBF16, Format::kF16, 0},   {Format::kF32, Format::kF8E4M3, 0},
      {Format::kF32, Format::kF8E4M3, 128}, {Format::kBF16, Format::kF8E4M3, 0}};
  const std::size_t bytes = mib << 20;
  // Source values of a trained layer's spread, in each source format; buffers touched first.
  // Each source is `bytes` long: a 16-bit one holds bytes / 2 values (it held bytes / 4 once, and
  // its rows read past it), an f32 one the first bytes / 4 of them.
  std::vector<float> f32(bytes / 2);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : f32) x = normal(rng);
  std::vector<std::uint16_t> bf16(f32.size()), f16(f32.size());
  layout::convert(Format::kF32, f32.data(), Format::kBF16, bf16.data(), f32.size());
  layout::convert(Format::kF32, f32.data(), Format::kF16, f16.data(), f32.size());
  std::vector<std::byte> dst(bytes * 2), copy(bytes);  // f16 -> f32 writes twice the source
  std::memset(dst.data(), 1, dst.size());
  std::memset(copy.data(), 1, copy.size());

  nlohmann::json rows = nlohmann::json::array();
  if (!json) {
    std::printf("%-7s %-7s %6s %6s %11s %10s %7s %9s\n", "from", "to", "block", "MiB", "convert_ms", "memcpy_ms",
                "GB/s", "x_memcpy");
  }
  for (const auto& c : cases) {
    const void* src = c.from == Format::kF32 ? static_cast<const void*>(f32.data())
                      : c.from == Format::kBF16 ? static_cast<const void*>(bf16.data())
                                                : static_cast<const void*>(f16.data());
    const std::size_t count = bytes / layout::format_size(c.from);
    std::vector<double> convert_ms, memcpy_ms;
    for (int r = 0; r < reps + 1; ++r) {  // the first run warms up and is dropped
      auto start = Clock::now();
      std::memcpy(copy.data(), src, bytes);
      const double m = ms_since(start);
      start = Clock::now();
      if (c.to == Format::kF8E4M3) {
        auto* codes = reinterpret_cast<std::uint8_t*>(dst.data());
        if (c.block == 0) {
          layout::quantize_fp8_per_tensor(c.from, src, codes, count);
        } else {
          layout::quantize_fp8_per_block(c.from, src, codes, count, c.block);
        }
      } else {
        layout::convert(c.from, src, c.to, dst.data(), count);
      }
      const double t = ms_since(start);
      if (r == 0) continue;
      convert_ms.push_back(t);
      memcpy_ms.push_back(m);
    }
    const double conv = median(convert_ms), mc = median(memcpy_ms);
    const double gb_s = static_cast<double>(bytes) / (conv * 1e6);
    nlohmann::json row = {{"from", layout::format_name(c.from)}, {"to", layout::format_name(c.to)},
                          {"scale_block", c.block}, {"mib", mib}, {"convert_ms", conv}, {"memcpy_ms", mc},
                          {"gb_s", gb_s}, {"x_memcpy", conv / mc}};
    rows.push_back(row);
    if (!json) {
      std::printf("%-7s %-7s %6zu %6zu %11.1f %10.1f %7.2f %9.1f\n", std::string(layout::format_name(c.from)).c_str(),
                  std::string(layout::format_name(c.to)).c_str(), c.block, mib, conv, mc, gb_s, conv / mc);
    }
  }
  if (json) std::cout << rows.dump(2) << "\n";
  return 0;
}
