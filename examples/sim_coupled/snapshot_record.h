// The record of one training run that the replay scores policies on: at every evaluation, the
// step, the training clock, the validation loss and all parameters (flattened in the module's
// registration order). Binary, native endianness: written and read on the same machine.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sim_coupled {

struct Snapshot {
  std::int64_t step = 0;
  double time_s = 0;
  double val_loss = 0;
  std::vector<float> params;
};

inline constexpr char kRecordMagic[8] = {'M', 'C', 'S', 'I', 'M', 'R', 'E', '1'};

class RecordWriter {
 public:
  RecordWriter(const std::string& path, std::uint64_t param_count) : out_(path, std::ios::binary), count_(param_count) {
    if (!out_) throw std::runtime_error("cannot write record " + path);
    out_.write(kRecordMagic, sizeof kRecordMagic);
    out_.write(reinterpret_cast<const char*>(&count_), sizeof count_);
  }
  // Appends one snapshot; `params` holds count_ floats.
  void append(std::int64_t step, double time_s, double val_loss, const float* params) {
    out_.write(reinterpret_cast<const char*>(&step), sizeof step);
    out_.write(reinterpret_cast<const char*>(&time_s), sizeof time_s);
    out_.write(reinterpret_cast<const char*>(&val_loss), sizeof val_loss);
    out_.write(reinterpret_cast<const char*>(params), static_cast<std::streamsize>(count_ * sizeof(float)));
    if (!out_) throw std::runtime_error("writing the record failed");
  }

 private:
  std::ofstream out_;
  std::uint64_t count_;
};

// Throws std::runtime_error naming the file and what is wrong with it.
inline std::vector<Snapshot> read_record(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read record " + path);
  char magic[8];
  std::uint64_t count = 0;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(&count), sizeof count);
  if (!in || std::memcmp(magic, kRecordMagic, sizeof magic) != 0 || count == 0 || count > (1u << 28))
    throw std::runtime_error(path + " is not a training record (bad header)");
  std::vector<Snapshot> out;
  for (;;) {
    Snapshot s;
    if (!in.read(reinterpret_cast<char*>(&s.step), sizeof s.step)) break;
    s.params.resize(count);
    in.read(reinterpret_cast<char*>(&s.time_s), sizeof s.time_s);
    in.read(reinterpret_cast<char*>(&s.val_loss), sizeof s.val_loss);
    in.read(reinterpret_cast<char*>(s.params.data()), static_cast<std::streamsize>(count * sizeof(float)));
    if (!in) throw std::runtime_error(path + ": truncated snapshot after step " + std::to_string(s.step));
    if (!out.empty() && s.step <= out.back().step)
      throw std::runtime_error(path + ": steps not increasing at step " + std::to_string(s.step));
    out.push_back(std::move(s));
  }
  if (out.empty()) throw std::runtime_error(path + " holds no snapshot");
  return out;
}

}  // namespace sim_coupled
