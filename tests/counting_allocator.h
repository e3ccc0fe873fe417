#pragma once
// The host allocator, counting live and peak bytes: the peak tensor memory of a piece of code on
// the CPU (tests/unit/test_chunked_head.cpp, tests/unit/test_model_attention.cpp,
// tests/bench/bench_train.cpp). CountingCpuAllocator::Scope installs it as LibTorch's CPU
// allocator and restores the previous one when it ends; blocks it handed out free through its own
// deleter whenever they die, so the counter outlives them (the one static instance()).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cstdint>

namespace rlpt::testing {

class CountingCpuAllocator final : public c10::Allocator {
  public:
    static CountingCpuAllocator& instance() {
        static CountingCpuAllocator counter;  // outlives every block it hands out
        return counter;
    }

    // Each block carries its size in a header of kHeader bytes in front (the data stays 64-byte
    // aligned), so the data pointer is its own context: raw_allocate (oneDNN's bf16 matmul
    // scratch) requires that.
    c10::DataPtr allocate(size_t n) override {
        auto* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
        *reinterpret_cast<size_t*>(base) = n;
        void* p = base + kHeader;
        const int64_t live = live_.fetch_add(int64_t(n)) + int64_t(n);
        int64_t peak = peak_.load();
        while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
        }
        return {p, p, &CountingCpuAllocator::release, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }
    void reset_peak() { peak_.store(live_.load()); }
    int64_t live() const { return live_.load(); }
    int64_t peak() const { return peak_.load(); }

    // Installed while it lives; peak_extra(): the peak live bytes above the level at its start.
    class Scope {
      public:
        Scope() : previous_(c10::GetCPUAllocator()) {
            c10::SetCPUAllocator(&instance(), /*priority=*/0);
            instance().reset_peak();
            start_ = instance().live();
        }
        ~Scope() { c10::SetCPUAllocator(previous_, /*priority=*/0); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;
        int64_t peak_extra() const { return instance().peak() - start_; }

      private:
        c10::Allocator* previous_;
        int64_t start_ = 0;
    };

  private:
    static constexpr size_t kHeader = 64;
    static void release(void* p) {
        char* base = static_cast<char*>(p) - kHeader;
        instance().live_.fetch_sub(int64_t(*reinterpret_cast<size_t*>(base)));
        c10::free_cpu(base);
    }
    std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace rlpt::testing
