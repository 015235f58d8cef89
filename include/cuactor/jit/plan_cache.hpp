/// @file
/// The JIT's plan cache ([J4]): core's LruCache (bounded LRU, default 64 entries, single flight, a
/// failure not kept) over shared immutable results, in its asynchronous form: a request returns a
/// JitFuture at once and the compile runs on the engine's workers, never on the caller's thread.
#pragma once

#include <functional>
#include <memory>

#include "cuactor/core/lru_cache.hpp"
#include "cuactor/core/shared_future.hpp"

namespace cuactor::jit {

/// A compile result that becomes available later, shared by every requester (see SharedFuture).
template <class T>
using JitFuture = SharedFuture<std::shared_ptr<const T>>;

/// Counters of a PlanCache.
using PlanCacheStats = CacheStats;

/// JitFutures keyed by the full identity `Key` of a request (never its source alone, never run-time
/// scalars such as alpha/beta); use get_or_start() so that the caller never blocks.
template <class Key, class T, class Hash = std::hash<Key>>
using PlanCache = LruCache<Key, std::shared_ptr<const T>, Hash>;

}  // namespace cuactor::jit
