/// @file
/// Memory of request records and completion-pool jobs (internal). A record is made on the caller's
/// thread and freed on the thread that answered it; with a general-purpose allocator every such cross-thread free
/// contends with the caller's next allocation (measured with glibc: a third of a submit call). Records are recycled
/// instead: each thread keeps a small cache of blocks per size class and trades them with a shared depot in batches, so
/// a submit takes and a reply gives back a block without a lock.
#pragma once

#include <cstddef>
#include <new>

namespace cuactor::runtime::detail {

/// True when records are recycled; false in sanitizer builds, where every record goes to the system
/// allocator so that a use after free is still caught.
bool record_recycling_enabled() noexcept;
/// A block of at least `bytes`, aligned like ::operator new; throws std::bad_alloc like it.
void* allocate_record(std::size_t bytes);
/// Gives back a block from allocate_record(`bytes`) (any thread, also one that is exiting).
void deallocate_record(void* block, std::size_t bytes) noexcept;

/// Allocator for std::allocate_shared of request records (stateless: all instances are equal).
template <class T>
struct RecordAllocator {
  using value_type = T;
  RecordAllocator() noexcept = default;
  template <class U>
  RecordAllocator(const RecordAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor): rebinding

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "over-aligned records are not recycled");
    return static_cast<T*>(allocate_record(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { deallocate_record(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const RecordAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace cuactor::runtime::detail
