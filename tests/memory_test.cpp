// safetensors reading, weight lookup and block allocation, including damaged files.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include "core/host_memory.hpp"
#include "core/large_buffer.hpp"
#include "memory/block_allocator.hpp"
#include "memory/kv_cache.hpp"
#include "core/kv_sizing.hpp"
#include "memory/safetensors.hpp"
#include "memory/weight_loader.hpp"
#include "test_util.hpp"

using namespace actord;

TEST_CASE("stories260K's safetensors file reads with the shapes of its config", "[memory]") {
  auto file = SafetensorsFile::open(test::stories_dir() / "model.safetensors");
  REQUIRE(file.ok());
  CHECK(file->tensors().size() == 47);
  const auto& embed = file->tensors().at("model.embed_tokens.weight");
  CHECK(embed.dtype == DType::f32);
  CHECK(embed.shape == std::vector<int64_t>{512, 64});
}

TEST_CASE("damaged safetensors files are errors that name the problem", "[memory]") {
  test::TempDir tmp;
  auto missing = SafetensorsFile::open(tmp.path() / "nope.safetensors");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == Errc::not_found);

  // Truncated: keep the header, drop most of the data.
  std::ifstream in(test::stories_dir() / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  test::write_file(tmp.path() / "trunc.safetensors", bytes.substr(0, bytes.size() / 2));
  auto trunc = SafetensorsFile::open(tmp.path() / "trunc.safetensors");
  REQUIRE_FALSE(trunc.ok());
  CHECK_THAT(trunc.error().message, Catch::Contains("truncated safetensors file"));

  test::write_file(tmp.path() / "tiny.safetensors", "abc");
  CHECK_THAT(SafetensorsFile::open(tmp.path() / "tiny.safetensors").error().message,
             Catch::Contains("truncated safetensors file (3 bytes)"));

  std::string bad_header = "{not json";
  uint64_t n = bad_header.size();
  test::write_file(tmp.path() / "bad.safetensors", std::string(reinterpret_cast<char*>(&n), 8) + bad_header);
  CHECK_THAT(SafetensorsFile::open(tmp.path() / "bad.safetensors").error().message,
             Catch::Contains("malformed safetensors header"));

  std::string int8 = R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})";
  n = int8.size();
  test::write_file(tmp.path() / "i8.safetensors", std::string(reinterpret_cast<char*>(&n), 8) + int8 + "x");
  auto unsupported = SafetensorsFile::open(tmp.path() / "i8.safetensors");
  REQUIRE_FALSE(unsupported.ok());
  CHECK(unsupported.error().message == (tmp.path() / "i8.safetensors").string() +
                                           ": tensor 'w' has unsupported dtype I8");
}

TEST_CASE("the weight loader names missing tensors and wrong shapes", "[memory]") {
  auto loader = WeightLoader::open(test::stories_dir());
  REQUIRE(loader.ok());
  auto missing = loader->load_f32("lm_head.weight", {512, 64});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "missing tensor 'lm_head.weight'");
  auto wrong = loader->load_f32("model.norm.weight", {65});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message == "tensor 'model.norm.weight' has the wrong shape: expected [65], found [64]");
  test::TempDir tmp;
  CHECK(WeightLoader::open(tmp.path()).error().code == Errc::not_found);
  test::write_file(tmp.path() / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
  CHECK_THAT(WeightLoader::open(tmp.path()).error().message, Catch::Contains("points at missing shard"));
}

TEST_CASE("f16 and bf16 convert to f32", "[memory]") {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, smallest subnormal, 65504
  const uint16_t bf16[] = {0x3f80, 0xc040};                 // 1, -3
  TensorView v;
  v.dtype = DType::f16;
  v.shape = {4};
  v.data = reinterpret_cast<const std::byte*>(f16);
  float out[4];
  convert_to_f32(v, out);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == Approx(5.960464477539063e-08f));
  CHECK(out[3] == 65504.0f);
  v.dtype = DType::bf16;
  v.shape = {2};
  v.data = reinterpret_cast<const std::byte*>(bf16);
  convert_to_f32(v, out);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == -3.0f);
}

TEST_CASE("block allocator hands out - frees and lends ids", "[memory]") {
  BlockAllocator a(4);
  std::vector<uint32_t> got;
  REQUIRE(a.allocate(3, got));
  CHECK(got == std::vector<uint32_t>{0, 1, 2});
  CHECK_FALSE(a.allocate(2, got));  // all or nothing
  CHECK(got.size() == 3);
  a.free({1});
  CHECK(a.num_free() == 2);
  auto lent = a.take_free(5);
  CHECK(lent.size() == 2);
  CHECK(a.num_total() == 2);
  BlockAllocator lease;
  lease.add(lent);
  CHECK(lease.num_free() == 2);
}

TEST_CASE("KV blocks move byte for byte - to a swap space and back, and through export bytes", "[memory][swap]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
    INFO("dtype " << dtype_name(dtype));
    KvCache pool(3, 2, 8, 6, 4, dtype);
    KvCache host(3, 2, 8, 2, 4, dtype);
    // 3 layers x k|v x 2 heads x 4 slots of 8 elements, and for int8 a 4-byte scale per slot.
    CHECK(pool.block_bytes() == size_t(3 * 2 * 2 * 4) * (8 * dtype_size(dtype) + (dtype == DType::i8 ? 4 : 0)));
    CHECK(KvCache::bytes_for(3, 2, 8, 6, 4, dtype) == 6 * pool.block_bytes());
    CHECK(pool.head_stride() * int64_t(dtype_size(dtype)) == int64_t(pool.block_bytes() / 12));
    {  // every block's bytes are its own: each written, all read back
      std::vector<std::vector<unsigned char>> each(6, std::vector<unsigned char>(pool.block_bytes()));
      for (uint32_t b = 0; b < 6; ++b) {
        for (size_t i = 0; i < each[b].size(); ++i) each[b][i] = static_cast<unsigned char>(i * 7 + b * 101 + 3);
        pool.write_block(b, each[b].data());
      }
      std::vector<unsigned char> got(pool.block_bytes());
      for (uint32_t b = 0; b < 6; ++b) {
        pool.read_block(b, got.data());
        CHECK(got == each[b]);
      }
    }
    std::vector<unsigned char> original(pool.block_bytes()), back(pool.block_bytes());
    for (size_t i = 0; i < original.size(); ++i) original[i] = static_cast<unsigned char>(i * 37 + 11);
    pool.write_block(4, original.data());
    pool.read_block(4, back.data());
    CHECK(back == original);
    pool.copy_block(4, host, 1);  // swap out
    pool.write_block(4, std::vector<unsigned char>(pool.block_bytes(), 0xAB).data());  // the block is reused
    host.copy_block(1, pool, 2);  // swap in elsewhere
    pool.read_block(2, back.data());
    CHECK(back == original);
    pool.copy_block(2, pool, 0);  // copy within the pool (copy-on-write)
    pool.read_block(0, back.data());
    CHECK(back == original);
    KvCache other(3, 2, 8, 6, 4, dtype);
    other.write_block(5, original.data());  // import
    other.read_block(5, back.data());
    CHECK(back == original);
    CHECK(pool.same_layout(other));
    CHECK_FALSE(pool.same_layout(KvCache(3, 2, 8, 6, 8, dtype)));
  }
}

TEST_CASE("a KV pool populated up front is resident and zero - a buffer left alone is backed as it is written",
          "[memory]") {
  const size_t page = page_bytes();
  // Pages of the buffer resident now (mincore).
  auto resident = [&](LargeBuffer& b) {
    std::vector<unsigned char> in((b.size() + page - 1) / page);
    REQUIRE(mincore(b.data(), b.size(), in.data()) == 0);
    size_t n = 0;
    for (unsigned char v : in) n += v & 1;
    return n;
  };
  LargeBuffer lazy(size_t{8} << 20), eager(size_t{8} << 20);
  CHECK(resident(lazy) == 0);
  eager.populate();
  CHECK(resident(eager) == eager.size() / page);
  CHECK(std::all_of(eager.data(), eager.data() + eager.size(), [](unsigned char v) { return v == 0; }));
  lazy.data()[0] = 1;
  CHECK(resident(lazy) < lazy.size() / page);

  KvCache pool(2, 2, 8, 1000, 16, DType::bf16);
  pool.populate();
  std::vector<unsigned char> block(pool.block_bytes(), 0xFF);
  pool.read_block(999, block.data());
  CHECK(std::all_of(block.begin(), block.end(), [](unsigned char v) { return v == 0; }));
}

TEST_CASE("KV sizing - blocks from the memory settings - errors name the key", "[memory]") {
  EngineSection engine;
  engine.block_size = 16;
  engine.kv_cache_memory = 1 << 20;
  auto sized = size_kv_cache(engine, 1024, "t.yaml: ");  // 16 KiB a block
  REQUIRE(sized.ok());
  CHECK(sized->block_bytes == 16384);
  CHECK(sized->num_blocks == 64);
  CHECK(sized->swap_blocks == 0);  // recompute: no swap space
  engine.preemption_mode = "swap";
  engine.swap_space = 100000;
  sized = size_kv_cache(engine, 1024, "t.yaml: ");
  REQUIRE(sized.ok());
  CHECK(sized->swap_blocks == 6);
  engine.swap_space = 1000;
  CHECK(size_kv_cache(engine, 1024, "t.yaml: ").error().message ==
        "t.yaml: engine.swap_space: 1000 bytes hold no KV block (one block takes 16384 bytes)");
  engine.kv_cache_memory = 5;
  CHECK(size_kv_cache(engine, 1024, "t.yaml: ").error().code == Errc::invalid_config);
}
