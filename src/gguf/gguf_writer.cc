#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "gguf/gguf.h"

namespace specd {
namespace {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void PutValue(const GgufValue& v) {
    switch (v.type) {
      case GgufType::kUint8:
        Put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.value)));
        break;
      case GgufType::kInt8:
        Put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.value)));
        break;
      case GgufType::kUint16:
        Put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.value)));
        break;
      case GgufType::kInt16:
        Put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.value)));
        break;
      case GgufType::kUint32:
        Put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.value)));
        break;
      case GgufType::kInt32:
        Put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.value)));
        break;
      case GgufType::kUint64:
        Put<uint64_t>(std::get<uint64_t>(v.value));
        break;
      case GgufType::kInt64:
        Put<int64_t>(std::get<int64_t>(v.value));
        break;
      case GgufType::kFloat32:
        Put<float>(static_cast<float>(std::get<double>(v.value)));
        break;
      case GgufType::kFloat64:
        Put<double>(std::get<double>(v.value));
        break;
      case GgufType::kBool:
        Put<uint8_t>(std::get<bool>(v.value) ? 1 : 0);
        break;
      case GgufType::kString:
        PutString(std::get<std::string>(v.value));
        break;
      case GgufType::kArray: {
        const auto& a = std::get<GgufArray>(v.value);
        Put<uint32_t>(static_cast<uint32_t>(a.element_type));
        Put<uint64_t>(a.items.size());
        for (const auto& item : a.items) {
          SPECD_CHECK(item.type == a.element_type, "GGUF array element of type ",
                      GgufTypeName(item.type), " in an array of ", GgufTypeName(a.element_type));
          PutValue(item);
        }
        break;
      }
    }
  }

 private:
  std::vector<uint8_t>* out_;
};

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                           std::vector<uint8_t> data) {
  SPECD_CHECK(!shape.empty() && shape.size() <= 4, "tensor '", name, "' needs 1..4 dimensions");
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  const int64_t expected = RowBytes(type, shape[0]) * rows;
  SPECD_CHECK(static_cast<int64_t>(data.size()) == expected, "tensor '", name, "' has ",
              data.size(), " bytes, its shape and type need ", expected);
  for (const auto& t : tensors_) SPECD_CHECK(t.name != name, "duplicate tensor '", name, "'");
  tensors_.push_back({name, type, std::move(shape), std::move(data)});
}

std::vector<uint8_t> GgufWriter::SerializeHeader(std::vector<uint64_t>* offsets,
                                                 uint64_t* data_start) const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Put<uint32_t>(0x46554747);
  w.Put<uint32_t>(3);
  w.Put<uint64_t>(tensors_.size());
  const bool write_alignment = alignment_ != 32;
  w.Put<uint64_t>(metadata_.size() + (write_alignment ? 1 : 0));
  for (const auto& [key, value] : metadata_) {
    w.PutString(key);
    w.Put<uint32_t>(static_cast<uint32_t>(value.type));
    w.PutValue(value);
  }
  if (write_alignment) {
    w.PutString("general.alignment");
    w.Put<uint32_t>(static_cast<uint32_t>(GgufType::kUint32));
    w.Put<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  offsets->clear();
  for (const auto& t : tensors_) {
    w.PutString(t.name);
    w.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.Put<uint64_t>(static_cast<uint64_t>(d));
    w.Put<uint32_t>(static_cast<uint32_t>(t.type));
    w.Put<uint64_t>(offset);
    offsets->push_back(offset);
    offset = AlignUp(offset + t.data.size(), alignment_);
  }
  *data_start = AlignUp(out.size(), alignment_);
  out.resize(*data_start, 0);
  return out;
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint64_t> offsets;
  uint64_t data_start = 0;
  std::vector<uint8_t> out = SerializeHeader(&offsets, &data_start);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  out.resize(AlignUp(out.size(), alignment_), 0);
  return out;
}

void GgufWriter::Write(const std::string& path) const {
  std::vector<uint64_t> offsets;
  uint64_t data_start = 0;
  const std::vector<uint8_t> header = SerializeHeader(&offsets, &data_start);
  SPECD_CHECK(!std::filesystem::is_directory(path), "cannot write '", path,
              "': it is a directory (give a file name)");
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  SPECD_CHECK(f != nullptr, "cannot write '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  uint64_t written = 0;
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t i = 0; i < tensors_.size() && ok; ++i) {
    const uint64_t pad = offsets[i] - written;
    ok = ok && std::fwrite(zeros.data(), 1, pad, f) == pad;
    ok = ok && std::fwrite(tensors_[i].data.data(), 1, tensors_[i].data.size(), f) ==
                   tensors_[i].data.size();
    written = offsets[i] + tensors_[i].data.size();
  }
  const uint64_t tail = AlignUp(written, alignment_) - written;
  ok = ok && std::fwrite(zeros.data(), 1, tail, f) == tail;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    Fail("failed writing '", path, "' (disk full?)");
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::remove(tmp.c_str());
    Fail("cannot write '", path, "': ", error.message());
  }
}

}  // namespace specd
