// The kernels' own tracer: named regions of time, recorded only while a trace is on.
//
// Off (the default), a region costs one relaxed atomic load and a branch: no clock read,
// no allocation. On, a region records its name, the OS thread id (gettid) and its begin
// and end on std::chrono::steady_clock, which on Linux with libstdc++ is CLOCK_MONOTONIC,
// the clock of Python's time.perf_counter_ns (d5's trace time base). Each thread that
// records (OpenMP's included) appends to its own buffer; all buffers together keep at
// most kCapacity events and count the ones past it as dropped.
//
// Regions belong where they explain time: a whole call, a packing pass, a macro-block.
// Never inside a micro-kernel's loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace d5k::trace {

// Every region's name. A new region adds a value here and its text in trace.cpp.
enum class Name : std::uint16_t {
    gemm,             // one product, whole call, in the calling thread
    gemm_slab,        // one thread's share of a product (its slab of rows or columns)
    gemm_pack_a,      // packing an mc x kc block of A
    gemm_pack_b,      // packing a kc x nc block of B
    gemm_macro,       // the micro-kernel sweep over one packed block (a macro-kernel)
    conv_planes,      // Conv forward as a GEMM on the input planes (1x1, unit strides)
    conv_im2col,      // Conv forward with im2col + GEMM, whole call
    conv_direct,      // Conv forward with the direct kernels, whole call
    conv_im2col_pack, // building one block of im2col columns
    conv_direct_pack, // repacking the weights for the direct kernels
    conv_direct_job,  // one job of the direct convolution (rows x channels of an image block)
    conv_backward,    // Conv backward, whole call
    conv_col2im,      // scattering column gradients back into dX
    max_pool_forward,
    max_pool_backward,
    avg_pool_forward,
    avg_pool_backward,
    relu_forward,
    relu_backward,
    softmax_forward,
    softmax_backward,
    batch_norm_forward,
    batch_norm_backward,
    layer_norm_forward,
    layer_norm_backward,
    erf_forward,
    erf_backward,
    gelu_forward,
    gelu_backward,
    gather_forward,
    gather_backward,
    gemm_batched,     // a batch of products (attention's), whole call
    count_            // not a name: the number of names
};

// The most events kept between trace_start and trace_stop (all threads together).
constexpr std::size_t kCapacity = std::size_t(1) << 20;

// One recorded region.
struct Event {
    Name name;
    std::int32_t tid;
    std::int64_t begin_ns, end_ns;
};

// Whether regions record now. Read relaxed: a region that starts just as the trace is
// turned on or off may or may not be recorded. (Defined in trace.cpp: a plain global,
// hidden in the module, is one load; an inline variable would be a unique symbol read
// through the GOT.)
extern std::atomic<bool> enabled;

inline bool on() { return __builtin_expect(enabled.load(std::memory_order_relaxed), false); }

// Now on steady_clock, in nanoseconds.
std::int64_t now_ns();

// Append one event to the calling thread's buffer (or count it as dropped). Out of line
// and cold, like begin_ns: the untraced path keeps only the load and the branches.
__attribute__((cold, noinline)) void record(Name name, std::int64_t begin_ns, std::int64_t end_ns);

// now_ns() for a region's beginning.
__attribute__((cold, noinline)) std::int64_t begin_ns();

// The text of a name ("gemm.pack_a").
const char* name_text(Name name);

// Forget every event and drop count, then record.
void start();

// Stop recording and hand over the events recorded since start(), in no particular
// order, and how many were dropped past kCapacity.
std::vector<Event> stop(std::uint64_t& dropped);

// A scoped region: records [construction, destruction) when the trace was on at its
// construction.
class Region {
   public:
    explicit Region(Name name) : name_(name), begin_(on() ? begin_ns() : -1) {}
    ~Region() {
        if (__builtin_expect(begin_ >= 0, false)) record(name_, begin_, now_ns());
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

   private:
    Name name_;
    std::int64_t begin_;
};

}  // namespace d5k::trace

#define D5K_TRACE_CAT2(a, b) a##b
#define D5K_TRACE_CAT(a, b) D5K_TRACE_CAT2(a, b)
// A region named `name` (a d5k::trace::Name value) from here to the end of the scope.
#define D5K_TRACE(name) \
    const ::d5k::trace::Region D5K_TRACE_CAT(d5k_trace_region_, __COUNTER__)(::d5k::trace::Name::name)
