#include "transports/ucx/ucx_memory.h"

#include <cstring>
#include <string>

#include "modelcast/error.h"
#include "transports/ucx/address_seal.h"

namespace modelcast::transport {
namespace {
constexpr std::uint32_t kRegionMagic = 0x55435852;  // "UCXR": an exported region
constexpr std::size_t kRegionHeader = 16;           // address, length
}  // namespace

UcxRegion::~UcxRegion() {
  if (worker_.in_forked_child()) return;  // the registration is the parent's (UcxWorker)
  worker_.run([this] {
    if (quiesce_) quiesce_(memh_);  // no operation writes into the region after this
    ucp_mem_unmap(worker_.context(), memh_);
  });
}

UcxRemoteRegion::~UcxRemoteRegion() {
  worker_.post([rkey = rkey_] { ucp_rkey_destroy(rkey); });
}

std::unique_ptr<UcxRegion> map_region(UcxWorker& worker, void* base, std::size_t length, MemoryLocation location,
                                      UcxRegion::Quiesce quiesce) {
  ucp_mem_h memh = worker.run([&] {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = base;
    mp.length = length;
    mp.memory_type = location.kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucp_mem_h handle = nullptr;
    if (auto s = ucp_mem_map(worker.context(), &mp, &handle); s != UCS_OK) {
      throw_ucx("registering " + std::to_string(length) + " bytes", s);
    }
    return handle;
  });
  return std::make_unique<UcxRegion>(worker, memh, base, length, location, std::move(quiesce));
}

std::vector<std::byte> pack_region(ucp_context_h context, const UcxRegion& region) {
  void* packed = nullptr;
  std::size_t packed_size = 0;
  if (auto s = ucp_rkey_pack(context, region.memh(), &packed, &packed_size); s != UCS_OK) {
    throw_ucx("packing a remote key", s);
  }
  std::vector<std::byte> body(kRegionHeader + packed_size);
  auto address = reinterpret_cast<std::uint64_t>(region.base());
  std::uint64_t length = region.length();
  std::memcpy(body.data(), &address, 8);
  std::memcpy(body.data() + 8, &length, 8);
  std::memcpy(body.data() + kRegionHeader, packed, packed_size);
  ucp_rkey_buffer_release(packed);
  return seal(kRegionMagic, body);
}

ExportedRegion unpack_region(std::span<const std::byte> descriptor) {
  auto body = unseal(kRegionMagic, "exported UCX region", descriptor);
  if (body.size() <= kRegionHeader) throw Error(ErrorCode::kTransport, "exported UCX region carries no remote key");
  ExportedRegion out;
  std::memcpy(&out.address, body.data(), 8);
  std::memcpy(&out.length, body.data() + 8, 8);
  out.packed_key.assign(body.begin() + kRegionHeader, body.end());
  return out;
}

}  // namespace modelcast::transport
