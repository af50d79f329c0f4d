// Threads: any thread posts; `mutex_` of the receiving transport guards its posted receives
// and its unexpected sends (a send that found no receive yet waits there, as a tag-matching
// network transport's unexpected queue does). Completions are queued to the thread of the
// transport that posted the transfer (a send's to its sender's, a receive's to its receiver's),
// never run under a lock or inside the call that caused them; a transport's thread is joined
// when it is destroyed, so no callback of its runs after that.
#include "transports/loopback/loopback_transport.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "common/library_thread.h"
#include "transports/loopback/loopback_fabric.h"
#include "modelcast/error.h"

namespace modelcast::transport {
namespace loopback {


class LoopbackRegion : public MemoryRegion {
 public:
  LoopbackRegion(std::byte* base, std::size_t length) : base_(base), length_(length) {}
  ~LoopbackRegion() override { Fabric::get().forget(this); }
  std::byte* base() const override { return base_; }
  std::size_t length() const override { return length_; }
  MemoryLocation location() const override { return MemoryLocation::host(); }

 private:
  std::byte* base_;
  std::size_t length_;
};

// Names an export, never memory: each read looks the export up again, so a region
// deregistered meanwhile fails the read instead of being read after it is gone.
class LoopbackRemoteRegion : public RemoteRegion {
 public:
  LoopbackRemoteRegion(PeerId peer, std::uint64_t export_id, std::size_t length)
      : peer_(peer), export_id_(export_id), length_(length) {}
  PeerId peer() const override { return peer_; }
  std::size_t length() const override { return length_; }
  std::uint64_t export_id() const { return export_id_; }

 private:
  PeerId peer_;
  std::uint64_t export_id_;
  std::size_t length_;
};

class LoopbackTransport : public Transport {
 public:
  LoopbackTransport() : address_(Fabric::get().next_id++) {
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
  Capabilities capabilities() const override {
    Capabilities caps;
    caps.pairs = {{MemoryKind::kHost, MemoryKind::kHost}};
    caps.reach = Reach::kProcess;
    caps.two_sided = true;
    caps.one_sided = true;
    return caps;
  }

  std::unique_ptr<MemoryRegion> register_memory(void* base, std::size_t length, MemoryLocation location) override {
    if (location.kind != MemoryKind::kHost) {
      throw Error(ErrorCode::kTransport, "loopback transport moves host memory only");
    }
    return std::make_unique<LoopbackRegion>(static_cast<std::byte*>(base), length);
  }

  std::vector<std::byte> address() const override { return pack_words({address_}); }

  PeerId connect(std::span<const std::byte> peer_address, bool, PeerFailure) override {
    std::uint64_t address = unpack_words(peer_address, 1, "address")[0];
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
    check_range("send", offset, length, region.length());
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
    check_range("receive", offset, length, region.length());
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

  // A send completes for its sender once queued here (as an eager one), but its copy stays
  // queued until a receive takes it: a refused transfer's chunks were kept for good, a version's
  // worth of memory per refusal. A receive without memory takes one and drops it.
  void discard(std::uint64_t tag) override {
    std::unique_lock lock(mutex_);
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->tag != tag) continue;
      unexpected_.erase(it);  // its sender was told when it was queued
      return;
    }
    receives_.push_back(Receive{next_id_++, nullptr, 0, tag, {}});
  }

  // The descriptor names an entry of the fabric's export directory, never an address: a peer
  // can read only what was exported, within the bounds recorded here.
  std::vector<std::byte> export_region(const MemoryRegion& region) override {
    auto& fabric = Fabric::get();
    std::uint64_t id = fabric.next_id++;
    std::lock_guard lock(fabric.mutex);
    fabric.exports[id] = {address_, &region, region.base(), region.length()};
    return pack_words({id});
  }

  std::unique_ptr<RemoteRegion> import_region(PeerId peer, std::span<const std::byte> descriptor) override {
    std::uint64_t id = unpack_words(descriptor, 1, "region descriptor")[0];
    std::uint64_t peer_address = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = peers_.find(peer);
      if (it == peers_.end()) throw Error(ErrorCode::kTransport, "peer " + std::to_string(peer) + " is not connected");
      peer_address = it->second;
    }
    auto& fabric = Fabric::get();
    std::lock_guard lock(fabric.mutex);
    auto it = fabric.exports.find(id);
    if (it == fabric.exports.end() || it->second.owner != peer_address) {
      throw Error(ErrorCode::kTransport, "loopback region descriptor names no region exported by peer " +
                                             std::to_string(peer));
    }
    return std::make_unique<LoopbackRemoteRegion>(peer, id, it->second.length);
  }

  TransferId post_read(const RemoteRegion& source, std::size_t source_offset, const MemoryRegion& destination,
                       std::size_t destination_offset, std::size_t length, Completion done) override {
    check_range("read source", source_offset, length, source.length());
    check_range("read destination", destination_offset, length, destination.length());
    TransferId id = next_id_++;
    {
      std::lock_guard lock(mutex_);
      if (!peers_.count(source.peer())) {
        complete(std::move(done), {false, "peer " + std::to_string(source.peer()) + " is not connected"});
        return id;
      }
    }
    const auto& remote = static_cast<const LoopbackRemoteRegion&>(source);
    auto& fabric = Fabric::get();
    std::unique_lock lock(fabric.mutex);  // keeps the exported region registered while we copy
    auto it = fabric.exports.find(remote.export_id());
    if (it == fabric.exports.end()) {
      lock.unlock();
      complete(std::move(done), {false, "the exported region is no longer registered"});
      return id;
    }
    std::memcpy(destination.base() + destination_offset, it->second.base + source_offset, length);
    lock.unlock();
    complete(std::move(done), {true, {}});
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
    // send is complete for the sender once delivered or matched, as in a network transport's
    // eager protocol.
  }

 private:
  struct Send {
    TransferId id;
    const std::byte* data;
    std::size_t length;
    std::uint64_t tag;
    Completion done;
    LoopbackTransport* sender;  // null once queued as unexpected (its completion already ran)
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
    // No receive yet: the bytes are copied now (the sender may reuse its memory once done), and
    // the send is complete for its sender, as an eager send is. The queued copy names no sender:
    // the sender may be gone by the time a receive matches it.
    auto copy = std::make_shared<std::vector<std::byte>>(send.data, send.data + send.length);
    send.data = copy->data();
    auto sender_done = std::move(send.done);
    LoopbackTransport* sender = send.sender;
    send.done = [copy](const TransferResult&) {};
    send.sender = nullptr;
    unexpected_.push_back(std::move(send));
    lock.unlock();
    sender->complete(std::move(sender_done), {true, {}});
  }

  // Each side's completion runs on its own transport's thread, as with a network transport: a
  // sender's callbacks never outlive the sender (its thread is joined when it goes). The
  // sender, when named, is alive: deliver() runs under the fabric lock within its post_send.
  void match(Send send, Receive receive) {
    auto complete_send = [&](TransferResult result) {
      if (send.sender) send.sender->complete(std::move(send.done), std::move(result));
    };
    if (receive.data == nullptr) {  // discard(): taken and dropped
      complete_send({true, {}});
      return;
    }
    if (send.length > receive.length) {
      complete(std::move(receive.done), {false, "message of " + std::to_string(send.length) +
                                                    " bytes for a receive of " + std::to_string(receive.length)});
      complete_send({false, "receiver's buffer too small"});
      return;
    }
    std::memcpy(receive.data, send.data, send.length);
    if (send.length < receive.length) {  // taken, as UCX takes it, but no whole receive
      complete(std::move(receive.done), {false, "a message of " + std::to_string(send.length) +
                                                    " bytes arrived for a receive of " +
                                                    std::to_string(receive.length)});
      complete_send({true, {}});
      return;
    }
    complete(std::move(receive.done), {true, {}});
    complete_send({true, {}});
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
  std::thread thread_ = library_thread("loopback transport", [this] { run_completions(); });
};

}  // namespace loopback

std::unique_ptr<Transport> make_loopback_transport() { return std::make_unique<loopback::LoopbackTransport>(); }

}  // namespace modelcast::transport
