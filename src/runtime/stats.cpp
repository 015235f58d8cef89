#include "cuactor/runtime/stats.hpp"

#include <nlohmann/json.hpp>

namespace cuactor::runtime {

std::string_view to_string(CircuitState state) noexcept {
  switch (state) {
    case CircuitState::closed:
      return "closed";
    case CircuitState::recovering:
      return "recovering";
    case CircuitState::open:
      return "open";
  }
  return "unknown";
}

std::string_view to_string(CompletionMode mode) noexcept {
  switch (mode) {
    case CompletionMode::sequence_word:
      return "sequence_word";
    case CompletionMode::event_query:
      return "event_query";
  }
  return "unknown";
}

std::string to_json(const DeviceStats& s) {
  nlohmann::ordered_json j;
  j["device"] = s.device;
  j["isolated"] = s.isolated;
  j["memory_known"] = s.memory_known;
  j["free_bytes"] = s.free_bytes;
  j["total_bytes"] = s.total_bytes;
  j["queue_depth"] = s.queue_depth;
  j["in_flight"] = s.in_flight;
  j["generation"] = s.generation;
  j["circuit"] = std::string(to_string(s.circuit));
  j["accepting_ops"] = s.accepting_ops;
  j["completion"] = std::string(to_string(s.completion));
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["poisonings"] = s.poisonings;
  j["rejected_full"] = s.rejected_full;
  j["dispatch_ns"] = s.dispatch_ns;
  j["batches"] = s.batches;
  j["worker_buffers"] = s.worker_buffers;
  j["worker_buffer_bytes"] = s.worker_buffer_bytes;
  j["worker_graphs"] = s.worker_graphs;
  j["worker_host_buffers"] = s.worker_host_buffers;
  j["worker_restarts"] = s.worker_restarts;
  j["worker_pid"] = s.worker_pid;
  return j.dump();
}

}  // namespace cuactor::runtime
