// Per-thread scratch memory that grows and is kept between calls: 64-byte aligned, or on
// huge pages when large and asked for.
#pragma once

#include <sys/mman.h>

#include <cstdlib>
#include <memory>
#include <new>

namespace d5k {

class Scratch {
   public:
    // The tag of a buffer whose allocations of 1 MiB and more are 2 MiB aligned and
    // advised as transparent huge pages before their first touch (where the kernel grants
    // none, the advice is ignored).
    static constexpr bool huge_pages = true;

    explicit Scratch(bool huge = false) : huge_(huge) {}

    // At least `count` elements of T (contents undefined).
    template <typename T>
    T* get(std::size_t count) {
        const std::size_t want = count * sizeof(T);
        if (want > bytes_) {
            constexpr std::size_t huge = std::size_t(2) << 20;
            const std::size_t align = huge_ && want >= huge / 2 ? huge : 64;
            const std::size_t rounded = (want + align - 1) / align * align;
            data_.reset(std::aligned_alloc(align, rounded));
            if (!data_) throw std::bad_alloc();
            if (align == huge) madvise(data_.get(), rounded, MADV_HUGEPAGE);
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
    bool huge_;
};

}  // namespace d5k
