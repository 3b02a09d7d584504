#include "core/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>

#include "core/host_memory.hpp"

namespace actord {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kMaxCount = 1ull << 24;  // tensors, keys, array elements: far beyond any model's
constexpr uint64_t kMaxString = 1ull << 24;

enum ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10, i64 = 11,
  f64 = 12,
};

// A bounds-checked cursor over the mapped header.
class Reader {
 public:
  Reader(const unsigned char* data, size_t size, std::string where) : data_(data), size_(size), where_(std::move(where)) {}
  size_t offset() const { return at_; }
  Error fail(const std::string& what) const {
    return make_error(Errc::parse_error, where_ + ": " + what + " (at byte " + std::to_string(at_) + ")");
  }
  template <class T>
  Status read(T* out) {
    if (size_ - at_ < sizeof(T)) return fail("truncated");
    std::memcpy(out, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return Status::success();
  }
  Status read_string(std::string* out) {
    uint64_t n = 0;
    ACTORD_TRY_STATUS(read(&n));
    if (n > kMaxString) return fail("string of " + std::to_string(n) + " bytes");
    if (size_ - at_ < n) return fail("truncated string");
    out->assign(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return Status::success();
  }
  // One scalar of `type` into `v` (kind and value).
  Status read_scalar(uint32_t type, GgufValue* v) {
    auto as_int = [&](auto x) {
      v->kind = GgufValue::Kind::integer;
      v->integer = static_cast<int64_t>(x);
    };
    auto as_float = [&](double x) {
      v->kind = GgufValue::Kind::floating;
      v->floating = x;
    };
    switch (type) {
      case u8: { uint8_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case i8: { int8_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case u16: { uint16_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case i16: { int16_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case u32: { uint32_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case i32: { int32_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case i64: { int64_t x = 0; ACTORD_TRY_STATUS(read(&x)); as_int(x); return Status::success(); }
      case u64: {
        uint64_t x = 0;
        ACTORD_TRY_STATUS(read(&x));
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return fail("u64 value out of range");
        as_int(x);
        return Status::success();
      }
      case f32: { float x = 0; ACTORD_TRY_STATUS(read(&x)); as_float(x); return Status::success(); }
      case f64: { double x = 0; ACTORD_TRY_STATUS(read(&x)); as_float(x); return Status::success(); }
      case boolean: {
        uint8_t x = 0;
        ACTORD_TRY_STATUS(read(&x));
        v->kind = GgufValue::Kind::boolean;
        v->boolean = x != 0;
        return Status::success();
      }
      case string:
        v->kind = GgufValue::Kind::string;
        return read_string(&v->string);
      default:
        return fail("unknown value type " + std::to_string(type));
    }
  }
  Status read_value(uint32_t type, GgufValue* v) {
    if (type != array) return read_scalar(type, v);
    uint32_t element = 0;
    uint64_t count = 0;
    ACTORD_TRY_STATUS(read(&element));
    ACTORD_TRY_STATUS(read(&count));
    if (element == array) return fail("nested arrays are not supported");
    if (count > kMaxCount) return fail("array of " + std::to_string(count) + " elements");
    v->kind = GgufValue::Kind::array;
    GgufValue item;
    for (uint64_t i = 0; i < count; ++i) {
      ACTORD_TRY_STATUS(read_scalar(element, &item));
      v->element = item.kind;
      if (item.kind == GgufValue::Kind::string) {
        v->strings.push_back(std::move(item.string));
      } else {
        v->numbers.push_back(item.kind == GgufValue::Kind::integer   ? static_cast<double>(item.integer)
                             : item.kind == GgufValue::Kind::boolean ? (item.boolean ? 1.0 : 0.0)
                                                                     : item.floating);
      }
    }
    if (count == 0) {
      v->element = element == string ? GgufValue::Kind::string
                   : element == f32 || element == f64 ? GgufValue::Kind::floating
                                                      : GgufValue::Kind::integer;
    }
    return Status::success();
  }

 private:
  const unsigned char* data_;
  size_t size_;
  size_t at_ = 0;
  std::string where_;
};

}  // namespace

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return "F32";
    case GgmlType::f16: return "F16";
    case GgmlType::q4_0: return "Q4_0";
    case GgmlType::q4_1: return "Q4_1";
    case GgmlType::q5_0: return "Q5_0";
    case GgmlType::q5_1: return "Q5_1";
    case GgmlType::q8_0: return "Q8_0";
    case GgmlType::q8_1: return "Q8_1";
    case GgmlType::q2_k: return "Q2_K";
    case GgmlType::q3_k: return "Q3_K";
    case GgmlType::q4_k: return "Q4_K";
    case GgmlType::q5_k: return "Q5_K";
    case GgmlType::q6_k: return "Q6_K";
    case GgmlType::q8_k: return "Q8_K";
    case GgmlType::bf16: return "BF16";
  }
  return "?";
}

std::optional<GgmlBlock> ggml_block(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32: return GgmlBlock{1, 4};
    case GgmlType::f16: return GgmlBlock{1, 2};
    case GgmlType::bf16: return GgmlBlock{1, 2};
    case GgmlType::q4_0: return GgmlBlock{32, 18};
    case GgmlType::q4_1: return GgmlBlock{32, 20};
    case GgmlType::q5_0: return GgmlBlock{32, 22};
    case GgmlType::q5_1: return GgmlBlock{32, 24};
    case GgmlType::q8_0: return GgmlBlock{32, 34};
    case GgmlType::q8_1: return GgmlBlock{32, 36};
    case GgmlType::q2_k: return GgmlBlock{256, 84};
    case GgmlType::q3_k: return GgmlBlock{256, 110};
    case GgmlType::q4_k: return GgmlBlock{256, 144};
    case GgmlType::q5_k: return GgmlBlock{256, 176};
    case GgmlType::q6_k: return GgmlBlock{256, 210};
    case GgmlType::q8_k: return GgmlBlock{256, 292};
  }
  return std::nullopt;
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

bool GgufFile::is_gguf(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  return in && magic == kMagic;
}

Result<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::not_found, where + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 24) {
    ::close(fd);
    return make_error(Errc::parse_error, where + ": not a GGUF file (too short)");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return make_error(Errc::internal, where + ": mmap failed (" + std::strerror(errno) + ")");
  auto f = parse(std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); }),
                 static_cast<const unsigned char*>(base), size, path);
  if (f) f->mapped_ = true;
  return f;
}

Result<GgufFile> GgufFile::from_bytes(std::vector<unsigned char> bytes, const std::string& where) {
  if (bytes.size() < 24) return make_error(Errc::parse_error, where + ": not a GGUF file (too short)");
  auto owner = std::make_shared<std::vector<unsigned char>>(std::move(bytes));
  const unsigned char* data = owner->data();
  const size_t size = owner->size();
  return parse(std::shared_ptr<void>(owner, owner.get()), data, size, where);
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<void> owner, const unsigned char* data, size_t size,
                                 const std::filesystem::path& path) {
  const std::string where = path.string();
  GgufFile f;
  f.path_ = path;
  f.size_ = size;
  f.mapping_ = std::move(owner);
  Reader r(data, size, where);
  uint32_t magic = 0;
  uint64_t n_tensors = 0, n_keys = 0;
  ACTORD_TRY_STATUS(r.read(&magic));
  if (magic != kMagic) return make_error(Errc::parse_error, where + ": not a GGUF file (bad magic)");
  ACTORD_TRY_STATUS(r.read(&f.version_));
  if (f.version_ != 2 && f.version_ != 3) {
    return make_error(Errc::unsupported, where + ": GGUF version " + std::to_string(f.version_) + " (supported: 2, 3)");
  }
  ACTORD_TRY_STATUS(r.read(&n_tensors));
  ACTORD_TRY_STATUS(r.read(&n_keys));
  if (n_tensors > kMaxCount || n_keys > kMaxCount) return r.fail("implausible tensor or key count");
  for (uint64_t i = 0; i < n_keys; ++i) {
    std::string key;
    uint32_t type = 0;
    ACTORD_TRY_STATUS(r.read_string(&key));
    ACTORD_TRY_STATUS(r.read(&type));
    GgufValue v;
    if (auto s = r.read_value(type, &v); !s) return make_error(s.error().code, s.error().message + " in key '" + key + "'");
    f.metadata_[key] = std::move(v);
  }
  struct Info {
    uint32_t type;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    uint32_t n_dims = 0, type = 0;
    uint64_t offset = 0;
    ACTORD_TRY_STATUS(r.read_string(&t.name));
    ACTORD_TRY_STATUS(r.read(&n_dims));
    if (n_dims == 0 || n_dims > 4) return r.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      ACTORD_TRY_STATUS(r.read(&dim));
      if (dim == 0 || dim > (1ull << 40)) return r.fail("tensor '" + t.name + "' has a dimension of " + std::to_string(dim));
      if (__builtin_mul_overflow(elements, dim, &elements) || elements > (1ull << 50)) {
        return r.fail("tensor '" + t.name + "' has more than 2^50 elements");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    ACTORD_TRY_STATUS(r.read(&type));
    ACTORD_TRY_STATUS(r.read(&offset));
    const auto block = ggml_block(type);
    if (!block) {
      return make_error(Errc::unsupported, where + ": tensor '" + t.name + "' has ggml type " + std::to_string(type) +
                                               ", which this reader does not know");
    }
    t.type = static_cast<GgmlType>(type);
    if (t.dims[0] % block->elements != 0) {
      return make_error(Errc::parse_error, where + ": tensor '" + t.name + "': its rows of " + std::to_string(t.dims[0]) +
                                               " are not whole blocks of " + std::to_string(block->elements));
    }
    t.bytes = static_cast<size_t>(t.elements() / block->elements * block->bytes);
    if (f.by_name_.count(t.name)) return r.fail("tensor '" + t.name + "' appears twice");
    f.by_name_[t.name] = f.tensors_.size();
    f.tensors_.push_back(std::move(t));
    infos.push_back({type, offset});
  }
  int64_t alignment = 32;
  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->kind != GgufValue::Kind::integer || a->integer <= 0 || (a->integer & (a->integer - 1)) != 0 ||
        a->integer > 65536) {
      return make_error(Errc::parse_error, where + ": general.alignment must be a power of two");
    }
    alignment = a->integer;
  }
  const size_t data_start = (r.offset() + alignment - 1) / alignment * alignment;
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    GgufTensor& t = f.tensors_[i];
    const uint64_t offset = infos[i].offset;
    if (offset % static_cast<uint64_t>(alignment) != 0 || data_start > size || offset > size - data_start ||
        t.bytes > size - data_start - offset) {
      return make_error(Errc::parse_error, where + ": tensor '" + t.name + "' (" + std::to_string(t.bytes) +
                                               " bytes at offset " + std::to_string(offset) +
                                               ") lies outside the file or off its alignment");
    }
    t.data = data + data_start + offset;
  }
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Result<std::string> GgufFile::string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(Errc::invalid_config, path_.string() + ": missing key " + std::string(key));
  if (v->kind != GgufValue::Kind::string) {
    return make_error(Errc::invalid_config, path_.string() + ": " + std::string(key) + " is not a string");
  }
  return v->string;
}

Result<int64_t> GgufFile::integer(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(Errc::invalid_config, path_.string() + ": missing key " + std::string(key));
  if (v->kind != GgufValue::Kind::integer) {
    return make_error(Errc::invalid_config, path_.string() + ": " + std::string(key) + " is not an integer");
  }
  return v->integer;
}

Result<double> GgufFile::number(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(Errc::invalid_config, path_.string() + ": missing key " + std::string(key));
  if (v->kind == GgufValue::Kind::integer) return static_cast<double>(v->integer);
  if (v->kind != GgufValue::Kind::floating) {
    return make_error(Errc::invalid_config, path_.string() + ": " + std::string(key) + " is not a number");
  }
  return v->floating;
}

std::optional<int64_t> GgufFile::integer_or(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->kind != GgufValue::Kind::integer) return std::nullopt;
  return v->integer;
}

std::optional<double> GgufFile::number_or(std::string_view key) const {
  auto n = number(key);
  if (!n) return std::nullopt;
  return *n;
}

std::optional<bool> GgufFile::boolean_or(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v || v->kind != GgufValue::Kind::boolean) return std::nullopt;
  return v->boolean;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::release(const GgufTensor& t) const {
  if (!mapped_) return;  // an image in memory (from_bytes): its bytes are the only copy
  drop_file_pages(t.data, t.bytes);
}

}  // namespace actord
