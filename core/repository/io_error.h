// A file system call of the repository's that failed, with its errno: a writer tells a full disk
// (ENOSPC, EDQUOT) from the other failures by it, not by the message.
#pragma once

#include <string>

#include "modelcast/error.h"

namespace modelcast::repository {

class IoError : public Error {
 public:
  IoError(int error_number, const std::string& message) : Error(ErrorCode::kResource, message), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

}  // namespace modelcast::repository
