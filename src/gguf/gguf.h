// GGUF (versions 2 and 3), the file format of llama.cpp: metadata key/values followed by tensor
// descriptions and aligned tensor data. Files are memory-mapped; every length, count, offset and
// shape is checked against the file before use, so a truncated or hostile file gives an Error
// that names the problem rather than a read out of bounds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tensor/dtype.h"

namespace specd {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* GgufTypeName(GgufType t);

struct GgufValue;
struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<GgufValue> items;
};

// One metadata value with its exact on-disk type, so that a file re-written keeps its types.
struct GgufValue {
  GgufType type = GgufType::kUint32;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  static GgufValue U32(uint32_t v) { return {GgufType::kUint32, uint64_t{v}}; }
  static GgufValue I32(int32_t v) { return {GgufType::kInt32, int64_t{v}}; }
  static GgufValue U64(uint64_t v) { return {GgufType::kUint64, v}; }
  static GgufValue F32(float v) { return {GgufType::kFloat32, double{v}}; }
  static GgufValue Bool(bool v) { return {GgufType::kBool, v}; }
  static GgufValue Str(std::string v) { return {GgufType::kString, std::move(v)}; }
  static GgufValue Array(GgufType element_type, std::vector<GgufValue> items) {
    return {GgufType::kArray, GgufArray{element_type, std::move(items)}};
  }

  // Typed reads; each throws an Error naming `what` if the value does not have that shape.
  int64_t AsInt(const std::string& what) const;
  double AsFloat(const std::string& what) const;
  bool AsBool(const std::string& what) const;
  const std::string& AsString(const std::string& what) const;
  const GgufArray& AsArray(const std::string& what) const;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (innermost) dimension
  uint64_t offset = 0;         // from the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t NumElements() const;
};

class GgufFile {
 public:
  // Opens and validates a GGUF file; throws Error on any problem.
  static std::unique_ptr<GgufFile> Open(const std::string& path);
  // Parses an in-memory image (which must outlive the result); used by tests and fuzzers.
  // Gives the mapped pages back (they stay in the page cache): after the weights were copied
  // into their packed layouts, the file's pages would otherwise stay resident beside the
  // copies. Whatever is read later faults back in. No effect on a file read from memory.
  void ReleaseResidentPages() const;
  static std::unique_ptr<GgufFile> FromMemory(const uint8_t* data, size_t size,
                                              const std::string& name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(const std::string& key) const;
  const GgufValue& Get(const std::string& key) const;  // throws if missing
  // Optional keys: the value if present (checked for its type), else the fallback.
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetFloat(const std::string& key, double fallback) const;
  bool GetBool(const std::string& key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;
  const GgufTensorInfo& GetTensor(const std::string& name) const;  // throws if missing

 private:
  GgufFile() = default;
  void Parse();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Builds a GGUF file (version 3) from metadata and tensors.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}
  void Set(const std::string& key, GgufValue value);
  // Adds a tensor; `data` must hold RowBytes(type, shape[0]) * (product of the other dims) bytes.
  void AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                 std::vector<uint8_t> data);
  // Writes the file atomically (to path + ".tmp", then renamed).
  void Write(const std::string& path) const;
  // The serialized file, for tests.
  std::vector<uint8_t> Serialize() const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<uint8_t> SerializeHeader(std::vector<uint64_t>* offsets, uint64_t* data_start) const;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace specd
