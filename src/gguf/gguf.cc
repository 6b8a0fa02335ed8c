#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace specd {
namespace {

// "f32, f16, ..., q6_K": every type specd reads, for error messages.
std::string SupportedTypeNames() {
  std::string names;
  for (DType t : kAllDTypes) names += (names.empty() ? "" : ", ") + std::string(DTypeName(t));
  return names;
}

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;
// Arrays nest in principle; real files use one level. A bound keeps a hostile file from
// recursing the stack away.
constexpr int kMaxArrayDepth = 4;

// A bounds-checked little-endian reader over the mapped bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return size_ - offset_; }

  template <typename T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  std::string ReadString(const char* what) {
    const uint64_t length = Read<uint64_t>(what);
    SPECD_CHECK(length <= remaining(), file_, ": ", what, " claims a string of ", length,
                " bytes at offset ", offset_, " but only ", remaining(), " bytes remain");
    std::string s(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return s;
  }

  void Need(size_t n, const char* what) const {
    SPECD_CHECK(n <= remaining(), file_, ": truncated while reading ", what, " at offset ", offset_,
                " (need ", n, " bytes, ", remaining(), " left)");
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  const std::string& file_;
};

size_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

GgufValue ReadValue(Cursor& in, GgufType type, const std::string& key, int depth,
                    const std::string& file) {
  GgufValue v;
  v.type = type;
  const char* what = "a metadata value";
  switch (type) {
    case GgufType::kUint8:
      v.value = uint64_t{in.Read<uint8_t>(what)};
      break;
    case GgufType::kInt8:
      v.value = int64_t{in.Read<int8_t>(what)};
      break;
    case GgufType::kUint16:
      v.value = uint64_t{in.Read<uint16_t>(what)};
      break;
    case GgufType::kInt16:
      v.value = int64_t{in.Read<int16_t>(what)};
      break;
    case GgufType::kUint32:
      v.value = uint64_t{in.Read<uint32_t>(what)};
      break;
    case GgufType::kInt32:
      v.value = int64_t{in.Read<int32_t>(what)};
      break;
    case GgufType::kUint64:
      v.value = in.Read<uint64_t>(what);
      break;
    case GgufType::kInt64:
      v.value = in.Read<int64_t>(what);
      break;
    case GgufType::kFloat32:
      v.value = double{in.Read<float>(what)};
      break;
    case GgufType::kFloat64:
      v.value = in.Read<double>(what);
      break;
    case GgufType::kBool: {
      const uint8_t b = in.Read<uint8_t>(what);
      SPECD_CHECK(b <= 1, file, ": key '", key, "' has a bool value of ", int{b});
      v.value = b != 0;
      break;
    }
    case GgufType::kString:
      v.value = in.ReadString("a string value");
      break;
    case GgufType::kArray: {
      SPECD_CHECK(depth < kMaxArrayDepth, file, ": key '", key, "' nests arrays too deeply");
      const uint32_t element = in.Read<uint32_t>("an array type");
      SPECD_CHECK(IsKnownType(element), file, ": key '", key, "' has an array of unknown type ",
                  element);
      const uint64_t count = in.Read<uint64_t>("an array length");
      const auto element_type = static_cast<GgufType>(element);
      SPECD_CHECK(count <= in.remaining() / MinEncodedSize(element_type), file, ": key '", key,
                  "' claims ", count, " array elements, more than the file can hold");
      GgufArray array;
      array.element_type = element_type;
      array.items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        array.items.push_back(ReadValue(in, element_type, key, depth + 1, file));
      }
      v.value = std::move(array);
      break;
    }
  }
  return v;
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

int64_t GgufValue::AsInt(const std::string& what) const {
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    SPECD_CHECK(*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what,
                " is out of range: ", *u);
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  Fail(what, " should be an integer but is a ", GgufTypeName(type));
}

double GgufValue::AsFloat(const std::string& what) const {
  if (const auto* f = std::get_if<double>(&value)) return *f;
  if (std::holds_alternative<uint64_t>(value) || std::holds_alternative<int64_t>(value)) {
    return static_cast<double>(AsInt(what));
  }
  Fail(what, " should be a number but is a ", GgufTypeName(type));
}

bool GgufValue::AsBool(const std::string& what) const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  Fail(what, " should be a bool but is a ", GgufTypeName(type));
}

const std::string& GgufValue::AsString(const std::string& what) const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  Fail(what, " should be a string but is a ", GgufTypeName(type));
}

const GgufArray& GgufValue::AsArray(const std::string& what) const {
  if (const auto* a = std::get_if<GgufArray>(&value)) return *a;
  Fail(what, " should be an array but is a ", GgufTypeName(type));
}

int64_t GgufTensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPECD_CHECK(fd >= 0, "cannot open model file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("'", path, "' is not a regular file");
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) {
      ::close(fd);
      Fail("cannot map '", path, "': ", std::strerror(errno));
    }
    file->mapping_ = mapping;
    file->mapping_size_ = file->size_;
    file->data_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);
  file->Parse();
  return file;
}

void GgufFile::ReleaseResidentPages() const {
  if (mapping_ != nullptr) ::madvise(mapping_, mapping_size_, MADV_DONTNEED);
}

std::unique_ptr<GgufFile> GgufFile::FromMemory(const uint8_t* data, size_t size,
                                               const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->data_ = data;
  file->size_ = size;
  file->Parse();
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

void GgufFile::Parse() {
  const std::string& file = path_;
  Cursor in(data_, size_, file);
  SPECD_CHECK(size_ >= 4, file, ": too short to be a GGUF file (", size_, " bytes)");
  const uint32_t magic = in.Read<uint32_t>("the magic number");
  SPECD_CHECK(magic == kGgufMagic, file, ": not a GGUF file (bad magic number)");
  version_ = in.Read<uint32_t>("the version");
  SPECD_CHECK(version_ == 2 || version_ == 3, file, ": GGUF version ", version_,
              " is not supported (only 2 and 3)");
  const uint64_t n_tensors = in.Read<uint64_t>("the tensor count");
  const uint64_t n_kv = in.Read<uint64_t>("the metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor at least
  // 8 + 4 + 4 + 8 bytes: a count larger than the file can hold is rejected before allocating.
  SPECD_CHECK(n_kv <= in.remaining() / 13, file, ": claims ", n_kv,
              " metadata entries, more than the file can hold");
  SPECD_CHECK(n_tensors <= in.remaining() / 24, file, ": claims ", n_tensors,
              " tensors, more than the file can hold");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = in.ReadString("a metadata key");
    const uint32_t type = in.Read<uint32_t>("a metadata type");
    SPECD_CHECK(IsKnownType(type), file, ": metadata key '", key, "' has unknown value type ",
                type);
    GgufValue value = ReadValue(in, static_cast<GgufType>(type), key, 0, file);
    SPECD_CHECK(metadata_index_.count(key) == 0, file, ": duplicate metadata key '", key, "'");
    metadata_index_[key] = metadata_.size();
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = Find("general.alignment")) {
    const int64_t alignment = a->AsInt("general.alignment");
    SPECD_CHECK(alignment > 0 && alignment <= (1 << 20) && (alignment & (alignment - 1)) == 0, file,
                ": general.alignment must be a power of two, got ", alignment);
    alignment_ = static_cast<uint32_t>(alignment);
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = in.ReadString("a tensor name");
    const uint32_t n_dims = in.Read<uint32_t>("a tensor's dimension count");
    SPECD_CHECK(n_dims >= 1 && n_dims <= kMaxDims, file, ": tensor '", t.name, "' has ", n_dims,
                " dimensions (1..4 allowed)");
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t extent = in.Read<uint64_t>("a tensor dimension");
      SPECD_CHECK(extent >= 1 && extent <= (1ull << 40), file, ": tensor '", t.name,
                  "' has dimension ", d, " of size ", extent);
      SPECD_CHECK(static_cast<uint64_t>(n_elements) <= (1ull << 42) / extent, file, ": tensor '",
                  t.name, "' is too large");
      n_elements *= static_cast<int64_t>(extent);
      t.shape.push_back(static_cast<int64_t>(extent));
    }
    const uint32_t type_id = in.Read<uint32_t>("a tensor type");
    const auto type = DTypeFromId(type_id);
    SPECD_CHECK(type.has_value(), file, ": tensor '", t.name, "' has type ", GgmlTypeName(type_id),
                ", which specd does not support (it reads ", SupportedTypeNames(), ")");
    t.type = *type;
    SPECD_CHECK(t.shape[0] % BlockElements(t.type) == 0, file, ": tensor '", t.name,
                "' has rows of ", t.shape[0], " elements, not a multiple of the ",
                DTypeName(t.type), " block size ", BlockElements(t.type));
    t.n_bytes = static_cast<uint64_t>(RowBytes(t.type, t.shape[0]) * (n_elements / t.shape[0]));
    t.offset = in.Read<uint64_t>("a tensor offset");
    SPECD_CHECK(t.offset % alignment_ == 0, file, ": tensor '", t.name, "' offset ", t.offset,
                " is not aligned to ", alignment_);
    SPECD_CHECK(tensor_index_.count(t.name) == 0, file, ": duplicate tensor '", t.name, "'");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (in.offset() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& t : tensors_) {
    SPECD_CHECK(data_start <= size_ && t.offset <= size_ - data_start &&
                    t.n_bytes <= size_ - data_start - t.offset,
                file, ": tensor '", t.name, "' (", t.n_bytes, " bytes at data offset ", t.offset,
                ") lies beyond the end of the file (", size_,
                " bytes): the file is truncated or corrupt");
    t.data = data_ + data_start + t.offset;
  }
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::Get(const std::string& key) const {
  const GgufValue* v = Find(key);
  SPECD_CHECK(v != nullptr, path_, ": required metadata key '", key, "' is missing");
  return *v;
}

int64_t GgufFile::GetInt(const std::string& key, int64_t fallback) const {
  const GgufValue* v = Find(key);
  return v ? v->AsInt(key) : fallback;
}

double GgufFile::GetFloat(const std::string& key, double fallback) const {
  const GgufValue* v = Find(key);
  return v ? v->AsFloat(key) : fallback;
}

bool GgufFile::GetBool(const std::string& key, bool fallback) const {
  const GgufValue* v = Find(key);
  return v ? v->AsBool(key) : fallback;
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::GetTensor(const std::string& name) const {
  const GgufTensorInfo* t = FindTensor(name);
  SPECD_CHECK(t != nullptr, path_, ": required tensor '", name, "' is missing");
  return *t;
}

}  // namespace specd
