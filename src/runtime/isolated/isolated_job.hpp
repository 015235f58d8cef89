/// @file
/// One request of an isolated actor on its way through the worker (internal to the isolated backend,
/// shared by its two translation units: isolated_backend.cpp and isolated_commands.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "cuactor/core/expected.hpp"
#include "cuactor/runtime/commands.hpp"
#include "cuactor/runtime/detail/request.hpp"
#include "runtime/isolated/isolated_backend.hpp"

namespace cuactor::runtime::isolated {

/// A message payload or reply.
using Bytes = std::vector<std::byte>;

/// One request of the actor on its way through the worker.
struct IsolatedBackend::Job {
  std::shared_ptr<detail::OpRecord> op;
  std::size_t total = 0;   ///< Bytes of a copy.
  std::size_t posted = 0;  ///< Bytes of a copy handed to requests so far.
  int outstanding = 0;     ///< Link requests made, not answered.
  bool started = false;    ///< A request was made (it can no longer be cancelled).
  bool all_posted = false;
  bool answered = false;
  std::optional<Error> error;  ///< The first error of any of its requests.
  CommandResult result;        ///< allocate's allocation.
};

}  // namespace cuactor::runtime::isolated
