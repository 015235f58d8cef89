// JSON on stdout for every `--json` path of the CLI, errors included.
#pragma once

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cuactor/core/error.hpp"

namespace cuactor::cli {

/// `j` as text; bytes that are not UTF-8 (file names are arbitrary bytes) become U+FFFD instead of
/// nlohmann's type_error, so printing never aborts.
inline std::string dump_json(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The object printed instead of a result: {"error": {"code", "category", "value", "message"}}.
inline nlohmann::json error_json(const Error& e) {
  return {{"error",
           {{"category", e.code().category().name()},
            {"value", e.code().value()},
            {"code", e.code().message()},
            {"message", e.message()}}}};
}

/// Prints error_json(e) on stdout (the stream a `--json` consumer reads).
inline void print_json_error(const Error& e) {
  std::cout << dump_json(error_json(e)) << "\n";
}

}  // namespace cuactor::cli
