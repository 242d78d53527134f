// Per-thread, 64-byte aligned scratch memory that grows and is kept between calls.
#pragma once

#include <cstdlib>
#include <memory>
#include <new>

namespace d5k {

class Scratch {
   public:
    // At least `count` elements of T (contents undefined).
    template <typename T>
    T* get(std::size_t count) {
        const std::size_t want = count * sizeof(T);
        if (want > bytes_) {
            const std::size_t rounded = (want + 63) / 64 * 64;
            data_.reset(std::aligned_alloc(64, rounded));
            if (!data_) throw std::bad_alloc();
            bytes_ = rounded;
        }
        return static_cast<T*>(data_.get());
    }

   private:
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    std::unique_ptr<void, Free> data_;
    std::size_t bytes_ = 0;
};

}  // namespace d5k
