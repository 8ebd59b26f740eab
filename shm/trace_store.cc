#include "shm/trace_store.h"

#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <new>

namespace ferry::shm {

namespace bip = boost::interprocess;

Result<TraceStore> TraceStore::Create(const std::string& segment, uint32_t hookhost) {
  std::string name = ObjectName(segment, hookhost);
  bip::shared_memory_object::remove(name.c_str());
  try {
    bip::permissions mode(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, mode);
    object.truncate(sizeof(TraceAreaData));
    TraceStore store;
    store.region_ = bip::mapped_region(object, bip::read_write);
    std::memset(store.region_.get_address(), 0, sizeof(TraceAreaData));
    store.data_ = static_cast<TraceAreaData*>(store.region_.get_address());
    return store;
  } catch (const bip::interprocess_exception& e) {
    return Internal("cannot create the trace store '" + name + "': " + e.what());
  }
}

Result<TraceStore> TraceStore::Open(const std::string& segment, uint32_t hookhost) {
  std::string name = ObjectName(segment, hookhost);
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!object.get_size(size) || static_cast<size_t>(size) != sizeof(TraceAreaData)) {
      return InvalidArgument("the trace store '" + name + "' has " + std::to_string(size) +
                             " bytes, not " + std::to_string(sizeof(TraceAreaData)));
    }
    TraceStore store;
    store.region_ = bip::mapped_region(object, bip::read_write);
    store.data_ = static_cast<TraceAreaData*>(store.region_.get_address());
    return store;
  } catch (const bip::interprocess_exception& e) {
    return NotFound("no trace store '" + name + "': " + e.what());
  }
}

void TraceStore::Remove(const std::string& segment, uint32_t hookhost) {
  bip::shared_memory_object::remove(ObjectName(segment, hookhost).c_str());
}

bool TraceStore::Push(const TraceSpanData& span) {
  TraceAreaData& d = *data_;
  uint64_t head = d.head.load(std::memory_order_relaxed);
  uint64_t tail = d.tail.load(std::memory_order_acquire);
  if (head - tail >= kTraceRingSpans) {
    d.dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  d.spans[head % kTraceRingSpans] = span;
  d.head.store(head + 1, std::memory_order_release);
  return true;
}

std::vector<TraceSpanData> TraceStore::Take() {
  TraceAreaData& d = *data_;
  uint64_t tail = d.tail.load(std::memory_order_relaxed);
  uint64_t head = d.head.load(std::memory_order_acquire);
  if (head - tail > kTraceRingSpans) {
    tail = head - kTraceRingSpans;  // A head that lies (or ran past a stalled reader).
  }
  std::vector<TraceSpanData> out;
  out.reserve(static_cast<size_t>(head - tail));
  for (uint64_t i = tail; i != head; ++i) {
    out.push_back(d.spans[i % kTraceRingSpans]);
  }
  d.tail.store(head, std::memory_order_release);
  return out;
}

}  // namespace ferry::shm
