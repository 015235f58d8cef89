#include "cuactor/runtime/wire.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace cuactor::runtime::wire {

Writer& Writer::put_f64(double v) {
  return put(std::bit_cast<std::uint64_t>(v));
}

Writer& Writer::put_bytes(std::span<const std::byte> bytes) {
  put(static_cast<std::uint32_t>(bytes.size()));
  out_.insert(out_.end(), bytes.begin(), bytes.end());
  return *this;
}

Writer& Writer::put_string(std::string_view s) {
  return put_bytes(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

bool Reader::need(std::size_t n, std::string_view field) {
  if (!good()) return false;
  if (remaining() >= n) return true;
  reject(
      fmt::format("{}: field '{}' needs {} bytes at offset {} but only {} remain", what_, field, n, pos_, remaining()));
  return false;
}

double Reader::get_f64(std::string_view field) {
  return std::bit_cast<double>(get<std::uint64_t>(field));
}

bool Reader::get_bool(std::string_view field) {
  const auto v = get<std::uint8_t>(field);
  if (v > 1) reject(fmt::format("{}: field '{}' is {}, not a boolean (0 or 1)", what_, field, v));
  return v == 1;
}

std::span<const std::byte> Reader::get_bytes(std::string_view field) {
  const auto n = get<std::uint32_t>(field);
  if (!need(n, field)) return {};
  auto s = in_.subspan(pos_, n);
  pos_ += n;
  return s;
}

std::string Reader::get_string(std::string_view field) {
  auto b = get_bytes(field);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::uint32_t Reader::get_count(std::string_view field, std::uint32_t max) {
  const auto n = get<std::uint32_t>(field);
  if (n > max) {
    reject(fmt::format("{}: field '{}' is {}, more than the limit {}", what_, field, n, max));
    return 0;
  }
  return n;
}

void Reader::reject(std::string message) {
  if (good()) error_ = std::move(message);
}

Status Reader::finish() const {
  if (!good()) return fail(errc::protocol_error, error_);
  if (remaining() != 0)
    return fail(errc::protocol_error,
                fmt::format("{}: {} unexpected bytes after the last field at offset {}", what_, remaining(), pos_));
  return ok();
}

}  // namespace cuactor::runtime::wire
