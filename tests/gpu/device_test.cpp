// Tests that need a CUDA device (label `gpu`), through the device runtime's CUDA implementation
// (device/cuda_runtime.cpp) like the library: nothing here calls CUDA itself. Each skips with
// "no CUDA device: ..." when the build has no CUDA or the machine has no usable device, so CI
// (nvcc, no GPU) passes them as skipped. On the GPU machine they check the pmix64 kernel against
// its host reference, and the IPC export, open and cache across two processes.
//
// main() is ours: `modelcast_gpu_device_tests --ipc-child` is the second process of the IPC test.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/device_runtime.h"
#include "device/pmix64.h"
#include "modelcast/error.h"
#include "transports/cuda_ipc/ipc_handle_cache.h"

extern char** environ;

namespace modelcast {
namespace {

// The CUDA runtime, made once; nullptr when the build has no CUDA or the machine no device.
device::DeviceRuntime* cuda() {
  static std::unique_ptr<device::DeviceRuntime> runtime = device::make_cuda_runtime();
  return runtime.get();
}

#define REQUIRE_CUDA_DEVICE()                                                                      \
  do {                                                                                             \
    if (!cuda()) GTEST_SKIP() << "no CUDA device: the build has no CUDA or the machine no device"; \
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

// Device memory and a stream of the CUDA runtime, released with the object.
struct DeviceBuffer {
  void* p;
  explicit DeviceBuffer(std::size_t n) : p(cuda()->allocate(0, n)) {}
  ~DeviceBuffer() { cuda()->release(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Stream {
  device::StreamHandle s = cuda()->create_stream(0);
  ~Stream() { cuda()->destroy_stream(s); }
  void copy(void* to, const void* from, std::size_t n) {
    cuda()->copy_async(to, from, n, s);
    cuda()->synchronize_stream(s);
  }
};

TEST(GpuDigest, DeviceDigestEqualsHostReferenceAndSeesOneCorruptByte) {
  REQUIRE_CUDA_DEVICE();
  // Tensors with tails of every length mod 16, one unaligned, one empty, one of many segments.
  const std::vector<device::ByteRange> tensors = {
      {0, 1}, {256, 15}, {512, 16}, {768, 17}, {1024 + 3, 1000}, {4096, 0}, {8192, (std::uint64_t{64} << 20) + 5}};
  const std::size_t total = 8192 + (std::size_t{64} << 20) + 5;
  auto host = random_bytes(total, 11);
  DeviceBuffer buffer(total);
  Stream stream;
  stream.copy(buffer.p, host.data(), total);
  auto digests = cuda()->digest(0, buffer.p, tensors, stream.s);
  ASSERT_EQ(digests.size(), tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    EXPECT_EQ(digests[t], pmix64::digest_host(host.data() + tensors[t].offset, tensors[t].size)) << "tensor " << t;
  }
  // Corrupt one byte of the big tensor on the device, on purpose.
  const std::size_t at = 8192 + 12345678;
  const unsigned char bad = static_cast<unsigned char>(host[at] ^ 0x10);
  stream.copy(static_cast<unsigned char*>(buffer.p) + at, &bad, 1);
  auto corrupted = cuda()->digest(0, buffer.p, tensors, stream.s);
  EXPECT_NE(corrupted[6], digests[6]);
  for (std::size_t t = 0; t < 6; ++t) EXPECT_EQ(corrupted[t], digests[t]) << "tensor " << t;
  host[at] = bad;
  EXPECT_EQ(corrupted[6], pmix64::digest_host(host.data() + 8192, tensors[6].size));
}

struct IpcRequest {
  cuda_ipc::IpcExport source;
  std::uint64_t expected_digest;
};

TEST(GpuCudaIpc, SecondProcessMapsTheSlotOnceAndReadsItExactly) {
  REQUIRE_CUDA_DEVICE();
  const std::size_t size = (std::size_t{32} << 20) + 77;
  const auto host = random_bytes(size, 13);
  DeviceBuffer slot(size);
  Stream stream;
  stream.copy(slot.p, host.data(), size);
  IpcRequest request{};
  request.source.slot = 1;
  request.source.device = 0;
  request.source.size = size;
  request.source.handle = cuda()->export_allocation(slot.p);
  request.expected_digest = pmix64::digest_host(host.data(), size);

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
}

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
    if (!cuda()) {
      std::fprintf(stderr, "ipc child: no CUDA device\n");
      return 3;
    }
    cuda_ipc::IpcOps ops;
    ops.open = [](const cuda_ipc::IpcExport& source) { return cuda()->open_ipc(source.handle, 0); };
    ops.close = [](void* base, const cuda_ipc::IpcExport&) { cuda()->close_ipc(base); };
    cuda_ipc::IpcHandleCache cache(std::move(ops));
    auto first = cache.acquire(1234, request.source);
    auto second = cache.acquire(1234, request.source);  // the next version in the same slot
    if (first->base != second->base || cache.opens() != 1) {
      std::fprintf(stderr, "ipc child: the cache reopened the handle\n");
      return 3;
    }
    std::vector<unsigned char> bytes(request.source.size);
    Stream stream;
    stream.copy(bytes.data(), first->base, bytes.size());
    if (pmix64::digest_host(bytes.data(), bytes.size()) != request.expected_digest) {
      std::fprintf(stderr, "ipc child: bytes differ from the producer's\n");
      return 5;
    }
    const device::ByteRange all{0, request.source.size};
    if (cuda()->digest(0, first->base, std::span(&all, 1), stream.s)[0] != request.expected_digest) {
      std::fprintf(stderr, "ipc child: device digest of the mapping differs\n");
      return 6;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipc child: %s\n", e.what());
    return 7;
  }
  return 0;
}

}  // namespace
}  // namespace modelcast

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--ipc-child") == 0) return modelcast::ipc_child();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
