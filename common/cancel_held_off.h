// Holds thread cancellation off while it lives (pthread_setcancelstate): a cancel that comes
// meanwhile acts at the thread's next cancellation point once it is gone. For calls a C caller
// makes that change state across their blocking points, or wait in destructors, which a forced
// unwind would leave half done or turn into an abort (the C ABIs' boundaries use it).
#pragma once

#include <pthread.h>

namespace modelcast {

class CancelHeldOff {
 public:
  CancelHeldOff() noexcept { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &before_); }
  ~CancelHeldOff() {
    int ignored = 0;
    pthread_setcancelstate(before_, &ignored);
  }
  CancelHeldOff(const CancelHeldOff&) = delete;
  CancelHeldOff& operator=(const CancelHeldOff&) = delete;

 private:
  int before_ = PTHREAD_CANCEL_ENABLE;
};

}  // namespace modelcast
