// The test model (tests/support/test_model.h) in device memory: uploaded through the device
// runtime the process selected (MODELCAST_DEVICE), and checked by copying device views back.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "device/device_runtime.h"
#include "modelcast/model_view.h"
#include "test_model.h"

namespace devicemodel {

using modelcast::device::DeviceRuntime;

// The second device where there is one, so producer and consumer sit on different devices.
inline int other_device(const DeviceRuntime& runtime) { return runtime.device_count() > 1 ? 1 : 0; }

class DeviceModel {
 public:
  // kOwnAllocations: one device allocation per tensor. kInteriorOffsets: every tensor inside one
  // larger allocation, none at its base (as a framework's caching allocator places them), which
  // is what CUDA IPC gets wrong if an export does not start at the allocation.
  enum class Placement { kOwnAllocations, kInteriorOffsets };

  DeviceModel(DeviceRuntime& runtime, int device, std::size_t kib, int count = 12,
              Placement placement = Placement::kOwnAllocations)
      : runtime_(runtime), device_(device), host_(testmodel::make(kib, count)) {
    for (auto& t : host_) {
      t.spec.memory = modelcast::MemoryKind::kCuda;
      t.spec.device = device;
    }
    if (placement == Placement::kOwnAllocations) {
      for (auto& t : host_) pointers_.push_back(runtime_.allocate(device, t.spec.size_bytes()));
      allocations_ = pointers_;
      return;
    }
    constexpr std::size_t kLead = 4096 + 256, kGap = 512;  // off the base, and apart
    std::vector<std::size_t> offsets;
    std::size_t end = kLead;
    for (auto& t : host_) {
      offsets.push_back(end);
      end += (t.spec.size_bytes() + kGap + 255) / 256 * 256;
    }
    auto* base = static_cast<std::byte*>(runtime_.allocate(device, end));
    allocations_.push_back(base);
    for (auto offset : offsets) pointers_.push_back(base + offset);
  }
  // The caller has synchronised the streams it uploaded on (or destroyed them, which waits).
  ~DeviceModel() {
    for (auto* p : staged_) runtime_.release_host(p);
    for (auto* p : allocations_) runtime_.release(p);
  }
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // Writes fill(seed, version) into the device tensors, ordered on `stream` (nullptr: now).
  // A copy queued on a stream comes from pinned memory: CUDA may make a copy from pageable memory
  // wait for the stream to reach it, which deadlocks a test holding that stream until later.
  void upload(std::uint64_t seed, std::uint64_t version, void* stream = nullptr) {
    testmodel::fill(host_, seed, version);
    if (!stream) {
      for (std::size_t i = 0; i < host_.size(); ++i) {
        runtime_.copy_async(pointers_[i], host_[i].words.data(), host_[i].spec.size_bytes(), nullptr);
      }
      runtime_.synchronize_stream(nullptr);
      return;
    }
    for (std::size_t i = 0; i < host_.size(); ++i) {
      const std::size_t size = host_[i].spec.size_bytes();
      void* pinned = runtime_.allocate_host(std::max<std::size_t>(size, 1));
      staged_.push_back(pinned);  // the copy may run later: its source must stay
      std::memcpy(pinned, host_[i].words.data(), size);
      runtime_.copy_async(pointers_[i], pinned, size, stream);
    }
  }

  std::vector<modelcast::TensorRef> refs() const {
    std::vector<modelcast::TensorRef> out;
    for (std::size_t i = 0; i < host_.size(); ++i) out.push_back({host_[i].spec, pointers_[i]});
    return out;
  }
  void* pointer(std::size_t i) const { return pointers_[i]; }

 private:
  DeviceRuntime& runtime_;
  int device_;
  std::vector<testmodel::Tensor> host_;
  std::vector<void*> staged_;  // pinned sources of stream-ordered uploads
  std::vector<void*> pointers_;     // one per tensor
  std::vector<void*> allocations_;  // what was allocated (the tensors' bases, or one block)
};

// Empty if every tensor of `view` (device or host memory) holds what fill(seed, version) wrote
// (testmodel::fill's, with `change_pct` < 100: versions that change only some tensors).
inline std::string check(DeviceRuntime& runtime, const modelcast::ModelView& view, std::uint64_t seed,
                         int change_pct = 100) {
  auto tensors = view.tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    std::size_t size = tensors[t].size_bytes();
    std::vector<unsigned char> bytes(size);
    if (tensors[t].spec->memory == modelcast::MemoryKind::kCuda) {
      if (size) runtime.copy_async(bytes.data(), tensors[t].data, size, nullptr);
      runtime.synchronize_stream(nullptr);
    } else if (size) {
      std::memcpy(bytes.data(), tensors[t].data, size);
    }
    for (std::size_t i = 0; i * 8 < size; ++i) {
      std::uint64_t expected = testmodel::word(seed, testmodel::source_version(seed, view.version(), t, change_pct), t, i);
      if (std::memcmp(bytes.data() + i * 8, &expected, std::min<std::size_t>(8, size - i * 8)) != 0) {
        return "tensor '" + tensors[t].name() + "' word " + std::to_string(i) + " differs from version " +
               std::to_string(view.version());
      }
    }
  }
  return {};
}

}  // namespace devicemodel
