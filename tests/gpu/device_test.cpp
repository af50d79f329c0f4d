// Tests that need a CUDA device (label `gpu`). Each skips with "no CUDA device: ..." when the
// build has no CUDA or the machine has no usable device, so CI (nvcc, no GPU) passes them as
// skipped. On the GPU machine they check the kernel, the CUDA copy engine in the staging
// pipeline and the IPC export/open/cache across two processes.
//
// main() is ours: `modelcast_gpu_device_tests --ipc-child` is the second process of the IPC test.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/pmix64.h"
#include "modelcast/error.h"
#include "transports/cuda_ipc/cuda_ipc.h"
#include "transports/staging/cuda_copy_engine.h"
#include "transports/staging/staging_pipeline.h"

#if MODELCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
extern char** environ;
#endif

namespace modelcast {
namespace {

// Empty when a device is usable; otherwise why not.
std::string why_no_device() {
#if MODELCAST_HAVE_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "cudaGetDeviceCount returned 0";
  return {};
#else
  return "modelcast was built without CUDA (MODELCAST_HAVE_CUDA=0)";
#endif
}

#define REQUIRE_CUDA_DEVICE()                                     \
  do {                                                            \
    const std::string why = why_no_device();                      \
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;  \
  } while (0)

#if MODELCAST_HAVE_CUDA

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    const cudaError_t status_ = (call);                                                      \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_);         \
  } while (0)

std::vector<unsigned char> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<std::size_t>(8, n - i));
  }
  return v;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t n) {
    if (cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(std::size_t n) {
    if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) p = nullptr;
  }
  ~PinnedBuffer() { cudaFreeHost(p); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

#endif

TEST(GpuDigest, DeviceDigestEqualsHostReferenceAndSeesOneCorruptByte) {
  REQUIRE_CUDA_DEVICE();
#if MODELCAST_HAVE_CUDA
  // Tensors with tails of every length mod 16, one unaligned, one empty, one of many segments.
  const std::vector<pmix64::Range> tensors = {
      {0, 1}, {256, 15}, {512, 16}, {768, 17}, {1024 + 3, 1000}, {4096, 0}, {8192, (std::uint64_t{64} << 20) + 5}};
  const std::size_t total = 8192 + (std::size_t{64} << 20) + 5;
  auto host = random_bytes(total, 11);
  DeviceBuffer device(total);
  ASSERT_NE(device.p, nullptr);
  CUDA_OK(cudaMemcpy(device.p, host.data(), total, cudaMemcpyHostToDevice));
  auto digests = pmix64::digest_device(0, device.p, tensors, nullptr);
  ASSERT_EQ(digests.size(), tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    EXPECT_EQ(digests[t], pmix64::digest_host(host.data() + tensors[t].offset, tensors[t].size)) << "tensor " << t;
  }
  // Corrupt one byte of the big tensor on the device, on purpose.
  const std::size_t at = 8192 + 12345678;
  const unsigned char bad = static_cast<unsigned char>(host[at] ^ 0x10);
  CUDA_OK(cudaMemcpy(static_cast<unsigned char*>(device.p) + at, &bad, 1, cudaMemcpyHostToDevice));
  auto corrupted = pmix64::digest_device(0, device.p, tensors, nullptr);
  EXPECT_NE(corrupted[6], digests[6]);
  for (std::size_t t = 0; t < 6; ++t) EXPECT_EQ(corrupted[t], digests[t]) << "tensor " << t;
  host[at] = bad;
  EXPECT_EQ(corrupted[6], pmix64::digest_host(host.data() + 8192, tensors[6].size));
#endif
}

TEST(GpuStaging, DeviceToDeviceThroughPinnedBounceBuffers) {
  REQUIRE_CUDA_DEVICE();
#if MODELCAST_HAVE_CUDA
  const std::size_t chunk = std::size_t{1} << 20;
  const std::size_t size = 10 * chunk + 3;
  const auto host = random_bytes(size, 12);
  DeviceBuffer src(size), dst(size);
  ASSERT_NE(src.p, nullptr);
  ASSERT_NE(dst.p, nullptr);
  CUDA_OK(cudaMemcpy(src.p, host.data(), size, cudaMemcpyHostToDevice));
  for (std::size_t depth = 1; depth <= 4; ++depth) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    CUDA_OK(cudaMemset(dst.p, 0, size));
    PinnedBuffer bounce(depth * chunk);
    ASSERT_NE(bounce.p, nullptr);
    staging::CudaCopyEngine d2h(0), h2d(0);  // two streams: copies in both directions overlap
    staging::CopyStage fill(d2h, staging::CopyStage::Direction::kFill, static_cast<std::byte*>(src.p));
    staging::CopyStage drain(h2d, staging::CopyStage::Direction::kDrain, static_cast<std::byte*>(dst.p));
    staging::StagingPipeline pipeline({chunk, depth}, std::span(static_cast<std::byte*>(bounce.p), depth * chunk));
    const auto result = pipeline.run(size, fill, drain);
    ASSERT_TRUE(result.ok) << result.error;
    EXPECT_EQ(result.done_bytes, size);
    std::vector<unsigned char> back(size);
    CUDA_OK(cudaMemcpy(back.data(), dst.p, size, cudaMemcpyDeviceToHost));
    EXPECT_EQ(back, host);
  }
#endif
}

#if MODELCAST_HAVE_CUDA
struct IpcRequest {
  cuda_ipc::IpcExport source;
  std::uint64_t size;
  std::uint64_t expected_digest;
};
#endif

TEST(GpuCudaIpc, SecondProcessMapsTheSlotOnceAndReadsItExactly) {
  REQUIRE_CUDA_DEVICE();
#if MODELCAST_HAVE_CUDA
  const std::size_t size = (std::size_t{32} << 20) + 77;
  const auto host = random_bytes(size, 13);
  DeviceBuffer slot(size);
  ASSERT_NE(slot.p, nullptr);
  CUDA_OK(cudaMemcpy(slot.p, host.data(), size, cudaMemcpyHostToDevice));
  IpcRequest request{cuda_ipc::export_allocation(slot.p, size, 1), size, pmix64::digest_host(host.data(), size)};
  EXPECT_EQ(request.source.slot, 1u);
  EXPECT_EQ(request.source.size, size);

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], 0);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  // The child is this binary again: /proc/self/exe, unless MODELCAST_GPU_TEST_SELF names what
  // starts it. A copy run through a carried loader (scripts/gpu-bundle.sh) needs that: there
  // /proc/self/exe is the loader, so it names the wrapper that starts this binary through it.
  const char* override_self = std::getenv("MODELCAST_GPU_TEST_SELF");
  std::string self = override_self != nullptr && *override_self != '\0' ? override_self : "/proc/self/exe";
  char flag[] = "--ipc-child";
  char* argv[] = {self.data(), flag, nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, self.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[0]);
  ASSERT_EQ(spawned, 0) << std::strerror(spawned);
  ASSERT_EQ(write(pipe_fds[1], &request, sizeof request), static_cast<ssize_t>(sizeof request));
  close(pipe_fds[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // the slot stays allocated until the child is done
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the IPC child reported a failure (its stderr says which)";
#endif
}

#if MODELCAST_HAVE_CUDA
// The consumer side, in its own process: open through the cache twice (one open), read the
// bytes on the host and on the device, compare with the producer's digest.
int ipc_child() {
  IpcRequest request{};
  std::size_t got = 0;
  while (got < sizeof request) {
    const ssize_t n = read(0, reinterpret_cast<char*>(&request) + got, sizeof request - got);
    if (n <= 0) {
      std::fprintf(stderr, "ipc child: short read\n");
      return 2;
    }
    got += static_cast<std::size_t>(n);
  }
  try {
    cuda_ipc::IpcHandleCache cache(cuda_ipc::cuda_ipc_ops(0));
    auto first = cache.acquire(1234, request.source);
    auto second = cache.acquire(1234, request.source);  // the next version in the same slot
    if (first->base != second->base || cache.opens() != 1) {
      std::fprintf(stderr, "ipc child: the cache reopened the handle\n");
      return 3;
    }
    std::vector<unsigned char> bytes(request.size);
    if (cudaMemcpy(bytes.data(), first->base, request.size, cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::fprintf(stderr, "ipc child: copy out of the mapping failed\n");
      return 4;
    }
    if (pmix64::digest_host(bytes.data(), bytes.size()) != request.expected_digest) {
      std::fprintf(stderr, "ipc child: bytes differ from the producer's\n");
      return 5;
    }
    const pmix64::Range all{0, request.size};
    if (pmix64::digest_device(0, first->base, std::span(&all, 1), nullptr)[0] != request.expected_digest) {
      std::fprintf(stderr, "ipc child: device digest of the mapping differs\n");
      return 6;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipc child: %s\n", e.what());
    return 7;
  }
  return 0;
}
#endif

}  // namespace
}  // namespace modelcast

int main(int argc, char** argv) {
#if MODELCAST_HAVE_CUDA
  if (argc > 1 && std::strcmp(argv[1], "--ipc-child") == 0) return modelcast::ipc_child();
#endif
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
