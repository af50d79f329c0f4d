// A gate that holds threads until opened: what makes "this member is slow" or "this stream is
// held" a fact a test controls instead of a timing. A failed assertion must not leave a thread
// held (the test's teardown would hang joining it), so a test declares the gate before the
// objects whose threads wait on it and an Opener after them: the Opener, destroyed first, opens
// the gate on every way out.
#pragma once

#include <future>

namespace testing_support {

class Gate {
 public:
  Gate() : opened_(promise_.get_future().share()) {}
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Blocks until open(); any thread.
  void wait() const { opened_.wait(); }
  // Opens the gate (once; later calls do nothing). The test's thread only.
  void open() {
    if (!open_) promise_.set_value();
    open_ = true;
  }

  // Opens the gate when it goes out of scope.
  class Opener {
   public:
    explicit Opener(Gate& gate) : gate_(gate) {}
    ~Opener() { gate_.open(); }
    Opener(const Opener&) = delete;
    Opener& operator=(const Opener&) = delete;

   private:
    Gate& gate_;
  };

 private:
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  bool open_ = false;
};

}  // namespace testing_support
