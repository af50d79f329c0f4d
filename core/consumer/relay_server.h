// Serves other consumers the blocks of a version this consumer holds or is still receiving,
// when the producer orders it (protocol::RelayOrder): each block goes out, tagged for the
// receiver's fetch, as soon as it is verified here, so a version flows on down a chain while it
// arrives. The receiver checks every block again against the producer's signed digests: a
// relay can delay a version, never alter it.
//
// An order holds the receive buffer its version is in, which keeps the buffer out of reuse
// (VersionStore hands out only buffers no one else refers to) until its sends are over; an
// order cancelled while sends are under way is kept until they complete, so the buffer stays
// registered while the transport reads it.
// On a one-sided route (CUDA IPC between device consumers on one host) the receiver reads
// instead: an export_region order pins the installed version's buffer and returns its export
// (export_buffer), and the buffer stays pinned until the producer cancels the order, which it
// does once the receiver's fetch has ended, however it ended, or until clear() (the consumer
// joins again: a producer that forgot it forgot its orders).
// Service thread only; send completions reach it through the loop's event queue. It sends no
// control message: the calls return the failures to report to the producer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model/installed_version.h"
#include "core/transfer/chunk_plan.h"
#include "core/wire/protocol.h"

namespace modelcast::consumer {

struct RelaySent {
  // The order's serial in its RelayServer, not the producer's order id: a producer's ids start
  // at 1 again with each run, and a send of an earlier run's order may still complete after a
  // new run's order took its id (a send to a receiver that died on this host may never end).
  std::uint64_t serial = 0;
  std::uint64_t bytes = 0;
  bool ok = false;
  std::string error;
};

// Whether a block of an order's buffer can be sent: verified here (kReady), still arriving or
// unverified (kNotYet), or never (the fetch that was filling the buffer ended without it).
enum class BlockState { kNotYet, kReady, kNever };

class RelayServer {
 public:
  // Runs on the transport's thread: push it to the service loop, which calls on_sent.
  using SendCompletion = std::function<void(const RelaySent&)>;
  using Readiness = std::function<BlockState(const detail::ReceiveBuffer&, std::uint32_t block)>;

  explicit RelayServer(SendCompletion on_sent) : on_sent_(std::move(on_sent)) {}
  ~RelayServer();

  // Takes an order whose version is (being) received into `buffer`, laid out as `manifest`
  // says. Returns the failure to report when it cannot be served: blocks cut otherwise than
  // the version's, a block beyond it, an unreachable receiver.
  std::optional<protocol::RelayFailed> accept(const protocol::RelayOrder& order,
                                              std::shared_ptr<detail::ReceiveBuffer> buffer, const Manifest& manifest);
  // Posts the sends of every block now ready; returns the orders that can never be served.
  std::vector<protocol::RelayFailed> pump(const Readiness& ready);
  // A send finished: bytes it carried (0 on failure), and the failure to report if it ended
  // its order.
  std::pair<std::uint64_t, std::optional<protocol::RelayFailed>> on_sent(const RelaySent& sent);
  // Pins `buffer` (the installed version, `bytes` long) for an export_region order and returns
  // the offer carrying its export. Throws Error naming why it cannot be exported.
  protocol::RelayOffer export_buffer(const protocol::RelayOrder& order, std::shared_ptr<detail::ReceiveBuffer> buffer,
                                     std::uint64_t bytes);
  // Ends an order. Returns the bytes an exported order served when its receiver installed
  // them (`delivered`), else 0.
  std::uint64_t cancel(std::uint64_t order_id, bool delivered = false);
  // A new producer or transport: every order is cancelled and every receiver connection closed.
  void clear();
  // Gives up the orders that ended before `ended_before` with sends still posted, and returns
  // how many. A send to a receiver on this host that died never ends in UCX 1.13 (UcxQuirks),
  // so such an order would hold its buffer for ever; given up, the buffer goes back to reuse
  // (a late send reads newer bytes: the receiver's fetch has ended, and any receiver checks
  // every block) and is marked (ReceiveBuffer::sends_given_up) so that it is never released.
  // Returns the buffers of the orders given up.
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> give_up_stuck(std::chrono::steady_clock::time_point ended_before);
  std::size_t orders() const { return orders_.size(); }
  // Orders ended with sends still posted (each holds its buffer until they end or are given up).
  std::size_t draining() const { return draining_.size(); }
  // Exported buffers a peer may be reading now (orders not yet cancelled).
  std::size_t exported() const { return exported_.size(); }

 private:
  struct Order {
    std::uint64_t order_id = 0;  // the producer's
    std::uint64_t incarnation = 0;
    std::uint64_t fetch_id = 0;
    std::vector<std::uint32_t> blocks;
    std::size_t next = 0;     // blocks[0, next) are posted
    std::size_t pending = 0;  // posted sends not yet completed
    transfer::ChunkPlan plan;
    std::shared_ptr<detail::ReceiveBuffer> buffer;
    transport::PeerId peer = 0;
    std::vector<transport::TransferId> transfers;
    std::chrono::steady_clock::time_point ended{};  // when it moved to draining_
  };
  protocol::RelayFailed failure(const Order& order, std::string why) const;
  // Ends an order: cancels its sends and keeps it draining until they complete.
  void end(std::map<std::uint64_t, Order>::iterator it);
  // A send of `order` failed: the connection may be what failed, so the next order to that
  // receiver connects afresh (a peer already replaced or cleared is left alone).
  void forget_peer(const Order& order);
  // The order of that producer id being served, or orders_.end(). Linear: a consumer serves a
  // few orders at a time (the producer's relay_fanout).
  std::map<std::uint64_t, Order>::iterator find_order(std::uint64_t order_id);

  SendCompletion on_sent_;
  std::uint64_t next_serial_ = 1;
  std::map<std::uint64_t, Order> orders_;    // by serial
  std::map<std::uint64_t, Order> draining_;  // by serial; ended, sends still completing
  struct Exported {
    std::shared_ptr<detail::ReceiveBuffer> buffer;  // pinned: out of reuse while a peer may read it
    std::uint64_t bytes = 0;
  };
  std::map<std::uint64_t, Exported> exported_;  // by order id
  // Closes the least recently ordered connections that no order uses and that a close frees,
  // while more than kKeptReceivers are open.
  void close_idle_receivers();

  // Receivers connected to, per transport: a chain passes each consumer one receiver a version,
  // mostly the same one, so connections are kept; but at most kKeptReceivers of those with
  // failure detection (the others only while an order uses them), the most recently ordered, or
  // a relay serving receivers that come and go (restarted servers) held an endpoint, and over
  // TCP a socket, for each one it ever served. A connection without failure detection (a
  // receiver on this host, over shared memory) is kept: UCX frees such an endpoint only with its
  // worker (UcxTransport::close_peer), so closing it freed nothing and each reconnection to a
  // receiver the planner rotated back cost another.
  static constexpr std::size_t kKeptReceivers = 8;
  struct Receiver {
    transport::PeerId peer = 0;
    std::uint64_t last_serial = 0;  // the newest order to it
    bool detect_failure = false;    // as connected (RelayOrder::detect_failure)
  };
  std::map<std::pair<const transport::Transport*, std::vector<std::byte>>, Receiver> peers_;
  std::vector<std::shared_ptr<transport::Transport>> transports_;  // those peers_ refers to
};

}  // namespace modelcast::consumer
