#include "transports/cuda_ipc/ipc_descriptor.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "modelcast/error.h"

namespace modelcast::cuda_ipc {
namespace {

constexpr char kMagic[8] = {'m', 'c', 'i', 'p', 'c', 'r', 'g', '1'};
constexpr std::size_t kExporterAt = 8, kSlotAt = 16, kDeviceAt = 20, kSizeAt = 24, kHandleAt = 32;
static_assert(kHandleAt + kHandleBytes == kDescriptorBytes);

// Fixed width, little-endian whatever the host: the layout is the header's, not a struct's.
template <typename T>
void put(std::vector<std::byte>& out, std::size_t at, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<std::byte>((bits >> (8 * i)) & 0xff);
}

template <typename T>
T get(std::span<const std::byte> in, std::size_t at) {
  std::make_unsigned_t<T> bits = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    bits |= static_cast<std::make_unsigned_t<T>>(std::to_integer<unsigned>(in[at + i])) << (8 * i);
  }
  return static_cast<T>(bits);
}

[[noreturn]] void malformed(const std::string& what) {
  throw Error(ErrorCode::kProtocol, "cuda_ipc region descriptor: " + what);
}

}  // namespace

std::vector<std::byte> encode_descriptor(const IpcDescriptor& d) {
  if (d.source.device < 0) throw Error(ErrorCode::kInvalidArgument, "cuda_ipc export: negative device ordinal");
  if (d.source.size == 0) throw Error(ErrorCode::kInvalidArgument, "cuda_ipc export: an empty slot");
  std::vector<std::byte> out(kDescriptorBytes);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put<std::uint64_t>(out, kExporterAt, d.exporter);
  put<std::uint32_t>(out, kSlotAt, d.source.slot);
  put<std::int32_t>(out, kDeviceAt, d.source.device);
  put<std::uint64_t>(out, kSizeAt, d.source.size);
  std::memcpy(out.data() + kHandleAt, d.source.handle.data(), kHandleBytes);
  return out;
}

IpcDescriptor decode_descriptor(std::span<const std::byte> bytes) {
  if (bytes.size() != kDescriptorBytes) {
    malformed(std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kDescriptorBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) malformed("wrong magic (not a cuda_ipc descriptor)");
  IpcDescriptor d;
  d.exporter = get<std::uint64_t>(bytes, kExporterAt);
  d.source.slot = get<std::uint32_t>(bytes, kSlotAt);
  d.source.device = get<std::int32_t>(bytes, kDeviceAt);
  if (d.source.device < 0) malformed("negative device ordinal " + std::to_string(d.source.device));
  d.source.size = get<std::uint64_t>(bytes, kSizeAt);
  if (d.source.size == 0) malformed("a slot of size 0");
  std::memcpy(d.source.handle.data(), bytes.data() + kHandleAt, kHandleBytes);
  return d;
}

}  // namespace modelcast::cuda_ipc
