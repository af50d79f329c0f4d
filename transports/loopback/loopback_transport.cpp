// Threads: any thread posts; `mutex_` of the receiving transport guards its posted receives
// and its unexpected sends (a send that found no receive yet waits there, as UCX's unexpected
// queue does). Completions are queued to the completing transport's own thread, never run
// under a lock or inside the call that caused them.
#include "transports/loopback/loopback_transport.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "modelcast/error.h"

namespace modelcast::transport {
namespace {

class LoopbackRegion : public MemoryRegion {
 public:
  LoopbackRegion(std::byte* base, std::size_t length, MemoryKind kind) : base_(base), length_(length), kind_(kind) {}
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  MemoryKind kind() const override { return kind_; }

 private:
  std::byte* base_;
  std::size_t length_;
  MemoryKind kind_;
};

class LoopbackTransport;

// Every loopback transport of the process, by address, so connect() can find its peer.
struct Fabric {
  std::mutex mutex;
  std::map<std::uint64_t, LoopbackTransport*> transports;
  std::atomic<std::uint64_t> next_address{1};
  static Fabric& get() {
    static Fabric fabric;
    return fabric;
  }
};

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport() : address_(Fabric::get().next_address++) {
    std::lock_guard lock(Fabric::get().mutex);
    Fabric::get().transports[address_] = this;
  }

  ~LoopbackTransport() override {
    {
      std::lock_guard lock(Fabric::get().mutex);
      Fabric::get().transports.erase(address_);
    }
    std::vector<Completion> orphans;
    {
      std::lock_guard lock(mutex_);
      for (auto& r : receives_) orphans.push_back(std::move(r.done));
      for (auto& s : unexpected_) orphans.push_back(std::move(s.done));
      receives_.clear();
      unexpected_.clear();
    }
    for (auto& done : orphans) complete(std::move(done), {false, "transport shut down"});
    {
      std::lock_guard lock(completions_mutex_);
      stopping_ = true;
    }
    completions_cv_.notify_all();
    thread_.join();
  }

  std::string name() const override { return "loopback"; }
  Capabilities capabilities() const override { return {true, false, false}; }

  std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryKind kind) override {
    if (kind != MemoryKind::kHost) throw Error(ErrorCode::kTransport, "loopback transport moves host memory only");
    return std::make_unique<LoopbackRegion>(static_cast<std::byte*>(base), length, kind);
  }

  std::vector<std::byte> address() const override {
    std::vector<std::byte> bytes(sizeof address_);
    std::memcpy(bytes.data(), &address_, sizeof address_);
    return bytes;
  }

  PeerId connect(std::span<const std::byte> peer_address, bool, PeerFailure) override {
    std::uint64_t address = 0;
    if (peer_address.size() != sizeof address) {
      throw Error(ErrorCode::kTransport, "malformed loopback address (" + std::to_string(peer_address.size()) + " bytes)");
    }
    std::memcpy(&address, peer_address.data(), sizeof address);
    std::lock_guard lock(mutex_);
    PeerId id = next_id_++;
    peers_[id] = address;
    return id;
  }

  void disconnect(PeerId peer) override {
    std::lock_guard lock(mutex_);
    peers_.erase(peer);
  }

  TransferId post_send(PeerId peer, const MemoryRegion& region, std::size_t offset, std::size_t length,
                       std::uint64_t tag, Completion done) override {
    TransferId id = next_id_++;
    std::uint64_t address = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = peers_.find(peer);
      if (it == peers_.end()) {
        complete(std::move(done), {false, "peer " + std::to_string(peer) + " is not connected"});
        return id;
      }
      address = it->second;
    }
    std::lock_guard fabric(Fabric::get().mutex);  // keeps the target alive while we deliver
    auto target = Fabric::get().transports.find(address);
    if (target == Fabric::get().transports.end()) {
      complete(std::move(done), {false, "peer is gone"});
      return id;
    }
    target->second->deliver({id, region.base() + offset, length, tag, std::move(done), this});
    return id;
  }

  TransferId post_recv(const MemoryRegion& region, std::size_t offset, std::size_t length, std::uint64_t tag,
                       Completion done) override {
    TransferId id = next_id_++;
    Receive receive{id, region.base() + offset, length, tag, std::move(done)};
    std::unique_lock lock(mutex_);
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->tag != tag) continue;
      Send send = std::move(*it);
      unexpected_.erase(it);
      lock.unlock();
      match(std::move(send), std::move(receive));
      return id;
    }
    receives_.push_back(std::move(receive));
    return id;
  }

  void cancel(TransferId transfer) override {
    Completion done;
    {
      std::lock_guard lock(mutex_);
      for (auto it = receives_.begin(); it != receives_.end(); ++it) {
        if (it->id == transfer) {
          done = std::move(it->done);
          receives_.erase(it);
          break;
        }
      }
    }
    if (done) complete(std::move(done), {false, "cancelled"});
    // A send waits in its target's unexpected queue; the target cancels nothing of ours: a
    // send is complete for the sender once delivered or matched, as in UCX's eager protocol.
  }

 private:
  struct Send {
    TransferId id;
    const std::byte* data;
    std::size_t length;
    std::uint64_t tag;
    Completion done;
    LoopbackTransport* sender;
  };
  struct Receive {
    TransferId id;
    std::byte* data;
    std::size_t length;
    std::uint64_t tag;
    Completion done;
  };

  // A send from `send.sender` arrives here (the fabric lock held by the sender).
  void deliver(Send send) {
    std::unique_lock lock(mutex_);
    for (auto it = receives_.begin(); it != receives_.end(); ++it) {
      if (it->tag != send.tag) continue;
      Receive receive = std::move(*it);
      receives_.erase(it);
      lock.unlock();
      match(std::move(send), std::move(receive));
      return;
    }
    // No receive yet: the bytes are copied now (the sender may reuse its memory once done).
    auto copy = std::make_shared<std::vector<std::byte>>(send.data, send.data + send.length);
    send.data = copy->data();
    auto sender_done = std::move(send.done);
    send.done = [copy](const TransferResult&) {};
    unexpected_.push_back(std::move(send));
    lock.unlock();
    complete(std::move(sender_done), {true, {}});
  }

  void match(Send send, Receive receive) {
    if (send.length > receive.length) {
      complete(std::move(receive.done), {false, "message of " + std::to_string(send.length) +
                                                    " bytes for a receive of " + std::to_string(receive.length)});
      complete(std::move(send.done), {false, "receiver's buffer too small"});
      return;
    }
    std::memcpy(receive.data, send.data, send.length);
    complete(std::move(receive.done), {true, {}});
    complete(std::move(send.done), {true, {}});
  }

  void complete(Completion done, TransferResult result) {
    if (!done) return;
    {
      std::lock_guard lock(completions_mutex_);
      completions_.emplace_back(std::move(done), std::move(result));
    }
    completions_cv_.notify_one();
  }

  void run_completions() {
    for (;;) {
      std::pair<Completion, TransferResult> next;
      {
        std::unique_lock lock(completions_mutex_);
        completions_cv_.wait(lock, [&] { return stopping_ || !completions_.empty(); });
        if (completions_.empty()) return;
        next = std::move(completions_.front());
        completions_.pop_front();
      }
      next.first(next.second);
    }
  }

  const std::uint64_t address_;
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex mutex_;
  std::map<PeerId, std::uint64_t> peers_;  // guarded by mutex_
  std::list<Receive> receives_;            // guarded by mutex_
  std::list<Send> unexpected_;             // guarded by mutex_
  std::mutex completions_mutex_;
  std::condition_variable completions_cv_;
  std::deque<std::pair<Completion, TransferResult>> completions_;
  bool stopping_ = false;
  std::thread thread_{[this] { run_completions(); }};
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport() { return std::make_unique<LoopbackTransport>(); }

}  // namespace modelcast::transport
