// The tracer's buffers (see trace.h): one per recording thread, registered on its first
// event and kept after the thread ends until a trace_stop has handed its events over.
#include "trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>

namespace d5k::trace {

std::atomic<bool> enabled{false};

namespace {

struct Buffer {
    std::mutex lock;  // the owner appends, trace_stop drains: uncontended but for that
    std::vector<Event> events;
    std::int32_t tid = 0;
};

std::mutex registry_lock;
std::vector<std::shared_ptr<Buffer>> registry;
std::atomic<std::size_t> kept{0};        // events accepted since start (past the cap too)
std::atomic<std::uint64_t> dropped{0};  // events refused past the cap

Buffer& own_buffer() {
    thread_local const std::shared_ptr<Buffer> mine = [] {
        auto made = std::make_shared<Buffer>();
        made->tid = static_cast<std::int32_t>(::syscall(SYS_gettid));
        made->events.reserve(1024);
        const std::lock_guard<std::mutex> hold(registry_lock);
        registry.push_back(made);
        return made;
    }();
    return *mine;
}

constexpr const char* kNames[] = {
    "gemm",
    "gemm.slab",
    "gemm.pack_a",
    "gemm.pack_b",
    "gemm.macro",
    "conv2d.planes",
    "conv2d.im2col",
    "conv2d.direct",
    "conv2d.im2col.columns",
    "conv2d.direct.pack_weights",
    "conv2d.direct.job",
    "conv2d.backward",
    "conv2d.col2im",
    "max_pool.forward",
    "max_pool.backward",
    "avg_pool.forward",
    "avg_pool.backward",
    "relu.forward",
    "relu.backward",
    "softmax.forward",
    "softmax.backward",
    "batch_norm.forward",
    "batch_norm.backward",
    "layer_norm.forward",
    "layer_norm.backward",
    "erf.forward",
    "erf.backward",
    "gelu.forward",
    "gelu.backward",
    "gather.forward",
    "gather.backward",
    "gemm_batched",
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<std::size_t>(Name::count_),
              "every trace::Name needs its text in kNames");

}  // namespace

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::int64_t begin_ns() { return now_ns(); }

const char* name_text(Name name) {
    const auto index = static_cast<std::size_t>(name);
    return index < static_cast<std::size_t>(Name::count_) ? kNames[index] : "unknown";
}

void record(Name name, std::int64_t begin_ns, std::int64_t end_ns) {
    if (kept.fetch_add(1, std::memory_order_relaxed) >= kCapacity) {
        dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    Buffer& buffer = own_buffer();
    const std::lock_guard<std::mutex> hold(buffer.lock);
    buffer.events.push_back({name, buffer.tid, begin_ns, end_ns});
}

void start() {
    const std::lock_guard<std::mutex> hold(registry_lock);
    for (const auto& buffer : registry) {
        const std::lock_guard<std::mutex> own(buffer->lock);
        buffer->events.clear();
    }
    kept.store(0, std::memory_order_relaxed);
    dropped.store(0, std::memory_order_relaxed);
    enabled.store(true, std::memory_order_release);
}

std::vector<Event> stop(std::uint64_t& dropped_out) {
    enabled.store(false, std::memory_order_release);
    std::vector<Event> out;
    const std::lock_guard<std::mutex> hold(registry_lock);
    std::vector<std::shared_ptr<Buffer>> alive;
    for (auto& buffer : registry) {
        {
            const std::lock_guard<std::mutex> own(buffer->lock);
            out.insert(out.end(), buffer->events.begin(), buffer->events.end());
            buffer->events.clear();
            buffer->events.shrink_to_fit();
        }
        // Only the registry holds the buffer of a thread that has ended: let it go.
        if (buffer.use_count() > 1) alive.push_back(std::move(buffer));
    }
    registry = std::move(alive);
    dropped_out = dropped.exchange(0, std::memory_order_relaxed);
    return out;
}

}  // namespace d5k::trace
