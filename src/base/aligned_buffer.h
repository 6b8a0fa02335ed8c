// A 64-byte aligned, zero-initialized array of trivially copyable T, for kernel operands.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace specd {

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept { Swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    Swap(other);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  // Grows (never shrinks) the allocation; contents are zeroed.
  void Resize(size_t n) {
    ResizeForOverwrite(n);
    if (n > 0) std::memset(static_cast<void*>(data_), 0, n * sizeof(T));
  }
  // The same without zeroing, for buffers the caller writes in full before reading: a forward
  // pass resizes its activation buffers and matmul scratch every layer, and zeroing them cost
  // ~6% of a 16-row SmolLM2 forward. Contents are unspecified.
  void ResizeForOverwrite(size_t n) {
    if (n > capacity_) {
      std::free(data_);
      const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = n;
    }
    size_ = n;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  void Swap(AlignedBuffer& other) {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace specd
